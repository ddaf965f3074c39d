package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/config"
)

// TestPaymentGrace: HOURGLASS_PAYMENT_GRACE is 0 locally and the
// signature's tolerance (5m) in Lambda unless set; more than the tolerance
// (a signature that old is refused anyway) or a negative one fails the
// start naming the variable.
func TestPaymentGrace(t *testing.T) {
	setEnv(t, nil)
	if got := load(t, config.Local).PaymentGrace; got != 0 {
		t.Errorf("local grace %s, want 0", got)
	}
	if got := load(t, config.Lambda).PaymentGrace; got != 5*time.Minute {
		t.Errorf("Lambda grace %s, want 5m", got)
	}
	setEnv(t, map[string]string{"HOURGLASS_PAYMENT_GRACE": "0s"})
	if got := load(t, config.Lambda).PaymentGrace; got != 0 {
		t.Errorf("Lambda grace set to 0s: %s", got)
	}
	for _, bad := range []string{"6m", "-1s"} {
		setEnv(t, map[string]string{"HOURGLASS_PAYMENT_GRACE": bad})
		if _, err := config.Load(config.Lambda); err == nil || !strings.Contains(err.Error(), "HOURGLASS_PAYMENT_GRACE") {
			t.Errorf("HOURGLASS_PAYMENT_GRACE=%s: %v, want an error naming it", bad, err)
		}
	}
}
