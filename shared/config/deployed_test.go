package config_test

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/config"
)

// The settings of the functions as the stack deploys them.
var (
	enqueueUses  = []string{"REDIS_URL", "PAYOUT_WEBHOOK_SECRET_ID", "PAYMENTS_WEBHOOK_SECRET_ID"}
	consumerUses = []string{"REDIS_URL", "PAYOUT_URL", "PAYOUT_SIGNING_SECRET_ID"}
	deployed     = map[string]string{
		"REDIS_URL":                  "rediss://cache.example.internal:6379",
		"REDIS_AUTH_SECRET_ID":       "arn:aws:secretsmanager:eu-west-1:123456789012:secret:redis-auth-AbCdEf",
		"PAYOUT_WEBHOOK_SECRET_ID":   "hourglass/payout-webhook",
		"PAYMENTS_WEBHOOK_SECRET_ID": "hourglass/payments-webhook",
		"PAYOUT_URL":                 "https://payouts.example.com/v1/payouts",
		"PAYOUT_SIGNING_SECRET_ID":   "hourglass/payout-signing-secret",
		"FINANCE_WEBHOOK_URL":        "https://finance.example.com/hook",
		"FINANCE_SIGNING_SECRET_ID":  "hourglass/finance-signing",
		"ORDERS_WEBHOOK_URL":         "https://orders.example.com:8443/events",
		"ORDERS_SIGNING_SECRET_ID":   "hourglass/orders-signing",
		// Set but unused in AWS: the secrets above replace them.
		"PAYMENTS_WEBHOOK_SECRET": "inline-value-never-printed",
	}
)

// TestLambdaRefusesPublicSecrets: a function that faces the network does
// not start on what would let anyone in: a key it uses without its
// *_SECRET_ID (so on a public default such as dev-payments-secret, with
// which anyone can forge payment confirmations and payout callbacks), a
// plain http:// outbound URL, one secret named for two channels. Each error
// names the setting and the way out, never a value. The local stack is not
// judged so (hourglass serve runs on the defaults).
func TestLambdaRefusesPublicSecrets(t *testing.T) {
	with := func(change map[string]string) config.Config {
		vars := map[string]string{}
		for k, v := range deployed {
			vars[k] = v
		}
		for k, v := range change {
			if v == "" {
				delete(vars, k)
				continue
			}
			vars[k] = v
		}
		setEnv(t, vars)
		return load(t, config.Lambda)
	}
	if err := with(nil).CheckDeployed(append(enqueueUses, consumerUses...)...); err != nil {
		t.Fatalf("the stack's settings refused: %v", err)
	}
	for _, c := range []struct {
		name   string
		change map[string]string
		uses   []string
		want   []string // what the error must name
	}{
		{"enqueue without its callback keys", map[string]string{"PAYOUT_WEBHOOK_SECRET_ID": "", "PAYMENTS_WEBHOOK_SECRET_ID": ""},
			enqueueUses, []string{"PAYOUT_WEBHOOK_SECRET_ID", "PAYMENTS_WEBHOOK_SECRET_ID", "Secrets Manager"}},
		{"consumer without its signing key", map[string]string{"PAYOUT_SIGNING_SECRET_ID": ""},
			consumerUses, []string{"PAYOUT_SIGNING_SECRET_ID"}},
		{"a webhook's key implied by its URL", map[string]string{"FINANCE_SIGNING_SECRET_ID": "", "ORDERS_SIGNING_SECRET_ID": ""},
			nil, []string{"FINANCE_SIGNING_SECRET_ID", "FINANCE_WEBHOOK_URL", "ORDERS_SIGNING_SECRET_ID", "ORDERS_WEBHOOK_URL"}},
		{"plain http out", map[string]string{"PAYOUT_URL": "http://user:pw@payouts.example.com/v1", "FINANCE_WEBHOOK_URL": "http://finance.example.com/hook",
			"ORDERS_WEBHOOK_URL": "http://orders.example.com/events", "DYNAMODB_ENDPOINT": "http://dynamodb.example.com"},
			consumerUses, []string{"PAYOUT_URL", "FINANCE_WEBHOOK_URL", "ORDERS_WEBHOOK_URL", "DYNAMODB_ENDPOINT", "https"}},
		{"one secret, two channels", map[string]string{"PAYMENTS_WEBHOOK_SECRET_ID": "hourglass/payout-webhook"},
			enqueueUses, []string{"PAYMENTS_WEBHOOK_SECRET_ID", "PAYOUT_WEBHOOK_SECRET_ID", "of its own"}},
		{"one secret, two functions' channels", map[string]string{"PAYOUT_SIGNING_SECRET_ID": "hourglass/payout-webhook"},
			nil, []string{"PAYOUT_SIGNING_SECRET_ID", "PAYOUT_WEBHOOK_SECRET_ID"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := with(c.change).CheckDeployed(c.uses...)
			if err == nil {
				t.Fatal("CheckDeployed = nil, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %s:\n%v", w, err)
				}
			}
			for _, secret := range append(config.DevSecrets(), "inline-value-never-printed", "pw@") {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error quotes a secret (%s):\n%v", secret, err)
				}
			}
		})
	}
	// The local stack runs on the defaults and plain http, as before.
	setEnv(t, map[string]string{"PAYOUT_URL": "http://127.0.0.1:9/pay"})
	if c := load(t, config.Local); string(c.PaymentsWebhookSecret) != "dev-payments-secret" {
		t.Errorf("local PAYMENTS_WEBHOOK_SECRET = %q, want the dev default", string(c.PaymentsWebhookSecret))
	}
}
