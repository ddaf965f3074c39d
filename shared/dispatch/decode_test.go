package dispatch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
)

func TestDecodeJobRoundTrip(t *testing.T) {
	for _, j := range []delayq.Job{
		{Kind: "withdrawal.payout", Queue: "withdrawals", Shard: 3, ID: "01JD9Z", Due: 1_790_000_000_250, Lease: 1_790_000_030_000},
		{Kind: "seckill.order", Queue: "seckill:item-1", ID: `<a&b>"q" é` + "\u2028", Due: 1},
	} {
		got, err := dispatch.DecodeJob(marshal(t, j))
		if err != nil {
			t.Fatalf("DecodeJob: %v", err)
		}
		if diff := cmp.Diff(j, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestDecodeJobRejects(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty", ``, "EOF"},
		{"not json", `hello`, "invalid character"},
		{"array", `[]`, "cannot unmarshal array"},
		{"null", `null`, "missing kind"},
		{"unknown field", `{"kind":"k","queue":"q","id":"1","amount":"5"}`, `unknown field "amount"`},
		{"missing kind", `{"queue":"q","id":"1","due_ms":1}`, "missing kind"},
		{"empty kind", `{"kind":"","queue":"q","id":"1"}`, "missing kind"},
		{"missing queue", `{"kind":"k","id":"1"}`, "missing queue"},
		{"missing id", `{"kind":"k","queue":"q"}`, "missing id"},
		{"negative shard", `{"kind":"k","queue":"q","shard":-1,"id":"1"}`, "negative shard -1"},
		{"wrong type", `{"kind":"k","queue":"q","shard":"1","id":"1"}`, "cannot unmarshal string"},
		{"trailing data", `{"kind":"k","queue":"q","id":"1"} {}`, "data after the JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := dispatch.DecodeJob(tc.body)
			if !errors.Is(err, dispatch.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeJob(%q) = %+v, %v; want ErrInvalidJob containing %q", tc.body, job, err, tc.want)
			}
			if job != (delayq.Job{}) {
				t.Errorf("DecodeJob returned %+v beside its error", job)
			}
		})
	}
}

func TestDecodeJobAcceptsTrailingSpace(t *testing.T) {
	if _, err := dispatch.DecodeJob("{\"kind\":\"k\",\"queue\":\"q\",\"id\":\"1\"}\n"); err != nil {
		t.Errorf("DecodeJob: %v", err)
	}
}
