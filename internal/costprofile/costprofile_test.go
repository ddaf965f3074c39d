package costprofile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/internal/costprofile"
)

func TestReadRefusesWhatCannotBePriced(t *testing.T) {
	for name, tc := range map[string]struct{ body, err string }{
		"nodes and serverless": {`{"profiles":[{"name":"prod","cache_nodes":1,"serverless_cache":true,"poller_memory_mb":128,"gives_up":"x"}]}`, "not both"},
		"no cache":             {`{"profiles":[{"name":"prod","poller_memory_mb":128,"gives_up":"x"}]}`, "not both"},
		"no poller memory":     {`{"profiles":[{"name":"prod","cache_nodes":1,"gives_up":"x"}]}`, "poller memory"},
		"prod not first":       {`{"profiles":[{"name":"dev","cache_nodes":1,"poller_memory_mb":128,"gives_up":"x"}]}`, "prod first"},
		"not JSON":             {`{`, "unexpected end"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "profiles.json")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := costprofile.Read(path); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Read = %v, want an error with %q", err, tc.err)
			}
		})
	}
	ps, err := costprofile.Read("../../bench/profiles.json")
	if err != nil || len(ps) < 2 {
		t.Fatalf("bench/profiles.json: %v, %d profiles", err, len(ps))
	}
}
