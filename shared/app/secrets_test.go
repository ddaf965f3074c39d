package app_test

import (
	"context"
	"testing"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// TestSecretsComeFromSecretsManager: the AUTH token and the signing secrets
// named by ARN are read at cold start, through the SDK's own configuration
// (AWS_ENDPOINT_URL points it at a stand-in speaking Secrets Manager's JSON
// protocol), and the Redis client authenticates with the token.
func TestSecretsComeFromSecretsManager(t *testing.T) {
	values := map[string]string{
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:redis-auth": `{"password":"r3dis-auth-token-0123"}`,
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:payout":     "payout-signing-secret",
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:finance":    "finance-signing-secret",
	}
	endpoint := fakes.NewSecretStore(values).Serve(t)

	s := redistest.Start(t)
	if err := s.Client(t).ConfigSet(context.Background(), "requirepass", "r3dis-auth-token-0123").Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "eu-west-1",
		"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "",
		"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"REDIS_URL":                  s.URL(),
		"REDIS_AUTH_SECRET_ARN":      "arn:aws:secretsmanager:eu-west-1:123456789012:secret:redis-auth",
		"PAYOUT_SIGNING_SECRET_ARN":  "arn:aws:secretsmanager:eu-west-1:123456789012:secret:payout",
		"FINANCE_SIGNING_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:finance",
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Lambda)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.ResolveSecrets(context.Background(), &cfg); err != nil {
		t.Fatal(err)
	}
	if string(cfg.PayoutSecret) != "payout-signing-secret" || string(cfg.FinanceSecret) != "finance-signing-secret" {
		t.Fatal("signing secrets not read from Secrets Manager")
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	if err := redisconn.Ping(context.Background(), rdb); err != nil {
		t.Fatalf("the client did not authenticate with the token: %v", err)
	}
}
