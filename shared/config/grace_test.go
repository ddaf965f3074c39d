package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/config"
)

// TestReconcileGrace: HOURGLASS_RECONCILE_GRACE, the time past its due
// time a job out of Redis may spend in the work queue before the reconciler
// puts it back, is read as the stack sets it (the work queue's redelivery
// span, 22m30s with the stack's queue), and unset it is the reconcile interval
// (locally the work queue holds nothing Redis does not). Nonsense is
// refused, naming it.
func TestReconcileGrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want time.Duration
	}{
		{name: "unset: the interval", want: 2 * time.Minute},
		{name: "unset: a shorter interval", vars: map[string]string{"HOURGLASS_RECONCILE_INTERVAL": "1s"}, want: time.Second},
		{name: "as the stack sets it", vars: map[string]string{"HOURGLASS_RECONCILE_GRACE": "22m30s"}, want: 22*time.Minute + 30*time.Second},
		{name: "set, dynamodb", vars: map[string]string{"HOURGLASS_LEDGER": "dynamodb", "HOURGLASS_RECONCILE_GRACE": "15m"},
			want: 15 * time.Minute},
		{name: "zero", vars: map[string]string{"HOURGLASS_RECONCILE_GRACE": "0s"}},
		{name: "negative", vars: map[string]string{"HOURGLASS_RECONCILE_GRACE": "-1m"}},
		{name: "no unit", vars: map[string]string{"HOURGLASS_RECONCILE_GRACE": "900"}},
	} {
		for _, p := range []config.Profile{config.Local, config.Lambda} {
			t.Run(tc.name, func(t *testing.T) {
				setEnv(t, tc.vars)
				c, err := config.Load(p)
				if tc.want == 0 {
					if err == nil || !strings.Contains(err.Error(), "HOURGLASS_RECONCILE_GRACE") {
						t.Fatalf("Load = %v, want an error naming HOURGLASS_RECONCILE_GRACE", err)
					}
					return
				}
				if err != nil || c.ReconcileGrace != tc.want {
					t.Fatalf("grace %v (%v), want %v", c.ReconcileGrace, err, tc.want)
				}
			})
		}
	}
}
