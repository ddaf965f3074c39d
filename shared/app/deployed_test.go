package app_test

import (
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
)

// TestLambdaRefusesPublicOrSharedKeys: a function's cold start reads its
// keys from Secrets Manager and refuses a secret that holds a public
// development default (now or as the key before a rotation) or a key that
// another channel's secret holds too, naming the settings and never a key;
// with a key of its own for each channel it starts. Before, the enqueue
// function started on dev-payments-secret and dev-webhook-secret when its
// *_SECRET_IDs were unset.
func TestLambdaRefusesPublicOrSharedKeys(t *testing.T) {
	mr := miniredis.RunT(t)
	const webhookID, paymentsID = "hourglass/payout-webhook", "hourglass/payments-webhook"
	uses := []string{"REDIS_URL", "PAYOUT_WEBHOOK_SECRET_ID", "PAYMENTS_WEBHOOK_SECRET_ID"}
	open := func(t *testing.T, ids map[string]string, values map[string]string) error {
		t.Helper()
		clearConfigEnv(t)
		t.Setenv("REDIS_URL", "redis://"+mr.Addr())
		for k, v := range ids {
			t.Setenv(k, v)
		}
		cfg, err := config.Load(config.Lambda)
		if err != nil {
			t.Fatal(err)
		}
		a, err := app.OpenLambda(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), fakes.NewSecretStore(values), uses...)
		if err == nil {
			_ = a.Redis.Close()
		}
		return err
	}
	both := map[string]string{"PAYOUT_WEBHOOK_SECRET_ID": webhookID, "PAYMENTS_WEBHOOK_SECRET_ID": paymentsID}
	if err := open(t, both, map[string]string{webhookID: "wh-7Yx2kQ9pL3vN8rT1", paymentsID: "pm-4Hs6dF0gJ2wE5zC8"}); err != nil {
		t.Fatalf("keys of their own refused: %v", err)
	}
	for _, c := range []struct {
		name   string
		ids    map[string]string
		values map[string]string
		want   []string
	}{
		{"no secret ids", nil, nil, []string{"PAYOUT_WEBHOOK_SECRET_ID", "PAYMENTS_WEBHOOK_SECRET_ID"}},
		{"a public default in the secret", both, map[string]string{webhookID: "wh-7Yx2kQ9pL3vN8rT1", paymentsID: "dev-payments-secret"},
			[]string{"PAYMENTS_WEBHOOK_SECRET_ID", "public development default"}},
		{"a public default as the previous key", both, map[string]string{webhookID: `{"current":"wh-7Yx2kQ9pL3vN8rT1","previous":"dev-webhook-secret"}`,
			paymentsID: "pm-4Hs6dF0gJ2wE5zC8"}, []string{"PAYOUT_WEBHOOK_SECRET_ID", "public development default"}},
		{"one key in two secrets", both, map[string]string{webhookID: "shared-9Kd3Lm5Nq7Rs", paymentsID: `{"password":"shared-9Kd3Lm5Nq7Rs"}`},
			[]string{"PAYMENTS_WEBHOOK_SECRET_ID", "PAYOUT_WEBHOOK_SECRET_ID", "of its own"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := open(t, c.ids, c.values)
			if err == nil {
				t.Fatal("the cold start went on")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %s:\n%v", w, err)
				}
			}
			for _, key := range append(config.DevSecrets(), "shared-9Kd3Lm5Nq7Rs", "wh-7Yx2kQ9pL3vN8rT1") {
				if strings.Contains(err.Error(), key) {
					t.Errorf("error quotes a key (%s):\n%v", key, err)
				}
			}
		})
	}
}

// clearConfigEnv unsets every setting config.Load reads for the test, so
// only what it sets counts.
func clearConfigEnv(t *testing.T) {
	t.Helper()
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ","); name != "" && name != "-" {
			t.Setenv(name, "")
			_ = os.Unsetenv(name)
		}
	}
}
