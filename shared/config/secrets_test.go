package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/config"
)

// Each secret is named by its _ID setting (a name or a complete ARN); the
// former _ARN name still works, the _ID wins when both agree, and two
// different secrets are an error naming both.
func TestSecretIDsAndTheirFormerNames(t *testing.T) {
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hourglass/payout-signing-secret-AbCdEf"
	setEnv(t, map[string]string{
		"REDIS_AUTH_SECRET_ID":      "hourglass/redis-auth",
		"PAYOUT_SIGNING_SECRET_ARN": arn,
		"FINANCE_SIGNING_SECRET_ID": "hourglass/finance", "FINANCE_SIGNING_SECRET_ARN": "hourglass/finance",
		"PAYOUT_WEBHOOK_SECRET_ID": "hourglass/payout-webhook-secret",
	})
	c, err := config.Load(config.Lambda)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{c.RedisAuthSecretID, c.PayoutSecretID, c.FinanceSecretID, c.WebhookSecretID}
	want := []string{"hourglass/redis-auth", arn, "hourglass/finance", "hourglass/payout-webhook-secret"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("secret %d: %q, want %q", i, got[i], want[i])
		}
	}
	if c.SecretTTL != 5*time.Minute {
		t.Errorf("HOURGLASS_SECRET_TTL defaults to %s, want 5m", c.SecretTTL)
	}

	setEnv(t, map[string]string{"REDIS_AUTH_SECRET_ID": "a", "REDIS_AUTH_SECRET_ARN": "b", "HOURGLASS_SECRET_TTL": "0s"})
	_, err = config.Load(config.Lambda)
	for _, name := range []string{"REDIS_AUTH_SECRET_ID", "REDIS_AUTH_SECRET_ARN", "HOURGLASS_SECRET_TTL"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
}
