package app

import "testing"

func TestLambdaProcs(t *testing.T) {
	for _, tc := range []struct {
		memory, gomaxprocs string
		want               int
	}{
		{"128", "", 1},
		{"512", "", 1},
		{"1024", "", 1},
		{"1769", "", 1},
		{"1770", "", 2},
		{"3538", "", 2},
		{"10240", "", 6},
		{"1024", "2", 0}, // set by hand: the runtime reads it
		{"", "", 0},      // not in Lambda
		{"lots", "", 0},
		{"-1", "", 0},
	} {
		env := map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": tc.memory, "GOMAXPROCS": tc.gomaxprocs}
		if got := lambdaProcs(func(k string) string { return env[k] }); got != tc.want {
			t.Errorf("memory %q, GOMAXPROCS %q: %d, want %d", tc.memory, tc.gomaxprocs, got, tc.want)
		}
	}
}
