package config_test

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/config"
)

// TestHorizonLeavesTheReconcilerALead: with the dynamodb ledger a
// withdrawal due beyond HOURGLASS_REDIS_HORIZON reaches Redis only at a
// reconciler pass, so a horizon shorter than two reconcile intervals
// cannot promote it an interval ahead and is refused at start, naming both
// variables. The redis ledger has no horizon and ignores it.
func TestHorizonLeavesTheReconcilerALead(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		ok   bool
	}{
		{name: "defaults, dynamodb", vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb"}, ok: true},
		{name: "defaults, redis", vars: nil, ok: true},
		{name: "exactly two intervals", ok: true, vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb",
			"HOURGLASS_REDIS_HORIZON": "4m", "HOURGLASS_RECONCILE_INTERVAL": "2m"}},
		{name: "the stacks' test settings", ok: true, vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb",
			"HOURGLASS_RECONCILE_INTERVAL": "5s"}},
		{name: "a millisecond short", vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb",
			"HOURGLASS_REDIS_HORIZON": "3m59.999s", "HOURGLASS_RECONCILE_INTERVAL": "2m"}},
		{name: "below the default interval", vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb",
			"HOURGLASS_REDIS_HORIZON": "1s"}},
		{name: "the interval raised past it", vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb",
			"HOURGLASS_RECONCILE_INTERVAL": "31m"}},
		{name: "short, redis ledger", ok: true, vars: map[string]string{"HOURGLASS_REDIS_HORIZON": "1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.vars)
			_, err := config.Load(config.Local)
			if tc.ok {
				if err != nil {
					t.Fatalf("Load refused %v: %v", tc.vars, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load accepted %v", tc.vars)
			}
			for _, name := range []string{"HOURGLASS_REDIS_HORIZON", "HOURGLASS_RECONCILE_INTERVAL"} {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error does not name %s: %v", name, err)
				}
			}
		})
	}
}
