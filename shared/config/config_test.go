package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// clearEnv unsets every variable Config reads, so a developer's shell or CI
// cannot leak into a test; t.Setenv restores them afterwards.
func clearEnv(t *testing.T) {
	t.Helper()
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ",")
		if name == "" {
			continue
		}
		t.Setenv(name, "")
		if err := os.Unsetenv(name); err != nil {
			t.Fatal(err)
		}
	}
}

// setEnv clears the environment, then sets vars.
func setEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	clearEnv(t)
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

func load(t *testing.T, p config.Profile) config.Config {
	t.Helper()
	c, err := config.Load(p)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// TestDefaultsMatchSpec checks each default against SPEC.md's "Local stack"
// table and the limits of "HTTP API".
func TestDefaultsMatchSpec(t *testing.T) {
	setEnv(t, nil)
	c := load(t, config.Local)
	for _, tc := range []struct {
		env  string
		got  any
		want any
	}{
		{"HOURGLASS_ADDR", c.Addr, "127.0.0.1:8080"},
		{"REDIS_URL", c.RedisURL, config.Secret("")},
		{"HOURGLASS_AUTH", c.Auth, "dev"},
		{"HOURGLASS_ADMIN_TOKEN", c.AdminToken, config.Secret("dev-admin")},
		{"PAYOUT_URL", c.PayoutURL, ""},
		{"PAYOUT_SIGNING_SECRET", c.PayoutSecret, config.Secret("dev-secret")},
		{"FINANCE_WEBHOOK_URL", c.FinanceWebhookURL, ""},
		{"HOURGLASS_POLL_INTERVAL", c.PollInterval, time.Second},
		{"HOURGLASS_DEFAULT_DELAY", c.DefaultDelay, 30 * time.Minute},
		{"HOURGLASS_RETRY_BASE", c.RetryBase, 30 * time.Second},
		{"HOURGLASS_RETRY_CAP", c.RetryCap, 30 * time.Minute},
		{"HOURGLASS_MAX_ATTEMPTS", c.MaxAttempts, 8},
		{"HOURGLASS_LEASE", c.Lease, 30 * time.Second},
		{"HOURGLASS_RECONCILE_INTERVAL", c.ReconcileInterval, 2 * time.Minute},
		{"FINANCE_SIGNING_SECRET", c.FinanceSecret, config.Secret("dev-finance-secret")},
		{"HOURGLASS_REDIS_PREFIX", c.RedisPrefix, "hg:"},
		{"HOURGLASS_REDIS_COMMANDS", c.RedisCommands, "all"},
		{"HOURGLASS_QUEUE_SHARDS", c.QueueShards, 1},
		{"HOURGLASS_CURRENCIES", c.Currencies, []string{"CNY", "USD", "EUR", "JPY"}},
		{"HOURGLASS_MAX_AMOUNT", c.MaxAmount, "1000000"},
		{"HOURGLASS_MAX_DELAY", c.MaxDelay, 30 * 24 * time.Hour},
	} {
		t.Run(tc.env, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("default of %s (-want +got):\n%s", tc.env, diff)
			}
		})
	}

	rules, err := c.WithdrawalRules()
	if err != nil {
		t.Fatalf("WithdrawalRules: %v", err)
	}
	want := withdrawal.Rules{
		Currencies:   []string{"CNY", "USD", "EUR", "JPY"},
		MaxAmount:    decimal.RequireFromString("1000000"),
		DefaultDelay: 30 * time.Minute,
		MaxDelay:     30 * 24 * time.Hour,
	}
	if diff := cmp.Diff(want, rules, cmp.Comparer(func(a, b decimal.Decimal) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("default withdrawal rules (-want +got):\n%s", diff)
	}
	if c.SlogLevel() != slog.LevelInfo {
		t.Errorf("default log level %v, want info", c.SlogLevel())
	}
}

func TestLoadReadsTheEnvironment(t *testing.T) {
	setEnv(t, map[string]string{
		"HOURGLASS_ADDR":          "0.0.0.0:9000",
		"REDIS_URL":               "redis://:pw@cache:6379/2",
		"HOURGLASS_AUTH":          "jwt",
		"HOURGLASS_POLL_INTERVAL": "250ms",
		"HOURGLASS_DEFAULT_DELAY": "0s",
		"HOURGLASS_MAX_ATTEMPTS":  "3",
		"HOURGLASS_QUEUE_SHARDS":  "16",
		"HOURGLASS_CURRENCIES":    " USD , JPY",
		"HOURGLASS_MAX_AMOUNT":    "5000.50",
		"PAYOUT_URL":              "https://pay.example.com/v1/payouts",
		"HOURGLASS_LOG_LEVEL":     "debug",
	})
	c := load(t, config.Local)
	type picked struct {
		Addr         string
		RedisURL     string
		Auth         string
		PollInterval time.Duration
		DefaultDelay time.Duration
		MaxAttempts  int
		QueueShards  int
		Currencies   []string
		MaxAmount    string
		PayoutURL    string
		LogLevel     slog.Level
	}
	got := picked{c.Addr, string(c.RedisURL), c.Auth, c.PollInterval, c.DefaultDelay, c.MaxAttempts,
		c.QueueShards, c.Currencies, c.MaxAmount, c.PayoutURL, c.SlogLevel()}
	want := picked{"0.0.0.0:9000", "redis://:pw@cache:6379/2", "jwt", 250 * time.Millisecond, 0, 3,
		16, []string{"USD", "JPY"}, "5000.50", "https://pay.example.com/v1/payouts", slog.LevelDebug}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("loaded config (-want +got):\n%s", diff)
	}
}

func TestLambdaProfileDefaultsToJWT(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile config.Profile
		vars    map[string]string
		want    string
	}{
		{name: "lambda, unset", profile: config.Lambda, want: "jwt"},
		{name: "lambda, set to jwt", profile: config.Lambda, vars: map[string]string{"HOURGLASS_AUTH": "jwt"}, want: "jwt"},
		{name: "local, unset", profile: config.Local, want: "dev"},
		{name: "local, set to jwt", profile: config.Local, vars: map[string]string{"HOURGLASS_AUTH": "jwt"}, want: "jwt"},
		{
			// A deployment template that renders an unset parameter as
			// HOURGLASS_AUTH="" has not asked for dev mode.
			name: "lambda, set but empty", profile: config.Lambda, vars: map[string]string{"HOURGLASS_AUTH": ""}, want: "jwt",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.vars)
			if got := load(t, tc.profile).Auth; got != tc.want {
				t.Errorf("Auth = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBadValueFailsNamingTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		extra      map[string]string
	}{
		{env: "HOURGLASS_POLL_INTERVAL", value: "0s"},
		{env: "HOURGLASS_POLL_INTERVAL", value: "-1s"},
		{env: "HOURGLASS_POLL_INTERVAL", value: "soon"},
		{env: "HOURGLASS_LEASE", value: "0"},
		{env: "HOURGLASS_LEASE", value: "30"},
		{env: "HOURGLASS_RETRY_BASE", value: "-30s"},
		{env: "HOURGLASS_RETRY_CAP", value: "10s"}, // below the 30s base
		{env: "HOURGLASS_RECONCILE_INTERVAL", value: "0s"},
		{env: "HOURGLASS_RECONCILE_INTERVAL", value: "2 minutes"},
		{env: "HOURGLASS_MAX_DELAY", value: "0s"},
		{env: "HOURGLASS_DEFAULT_DELAY", value: "-1s"},
		{env: "HOURGLASS_DEFAULT_DELAY", value: "721h"},
		{env: "HOURGLASS_DEFAULT_DELAY", value: "2h", extra: map[string]string{"HOURGLASS_MAX_DELAY": "1h"}},
		{env: "PAYOUT_TIMEOUT", value: "0s"},
		{env: "HOURGLASS_VISIBILITY_TIMEOUT", value: "-5s"},
		{env: "HOURGLASS_POLLER_MARGIN", value: "-1s"},
		{env: "HOURGLASS_MAX_ATTEMPTS", value: "0"},
		{env: "HOURGLASS_MAX_ATTEMPTS", value: "-3"},
		{env: "HOURGLASS_MAX_ATTEMPTS", value: "eight"},
		{env: "HOURGLASS_MAX_RECEIVES", value: "0"},
		{env: "HOURGLASS_AUTH", value: "oauth"},
		{env: "HOURGLASS_AUTH", value: "DEV"},
		{env: "HOURGLASS_LOG_LEVEL", value: "loud"},
		{env: "HOURGLASS_CURRENCIES", value: "CNY,XXX"},
		{env: "HOURGLASS_CURRENCIES", value: "usd"},
		{env: "HOURGLASS_CURRENCIES", value: ","},
		{env: "HOURGLASS_MAX_AMOUNT", value: "lots"},
		{env: "HOURGLASS_MAX_AMOUNT", value: "0"},
		{env: "HOURGLASS_MAX_AMOUNT", value: "-100"},
		{env: "HOURGLASS_QUEUE_SHARDS", value: "0"},
		{env: "HOURGLASS_QUEUE_SHARDS", value: "2000"},
		{env: "HOURGLASS_QUEUE_SHARDS", value: "many"},
		{env: "HOURGLASS_CLAIM_BATCH", value: "0"},
		{env: "HOURGLASS_CLAIM_BATCH", value: "5000"},
		{env: "PAYOUT_URL", value: "ftp://pay.example.com/"},
		{env: "PAYOUT_URL", value: "pay.example.com/payouts"},
		{env: "PAYOUT_URL", value: "https://"},
		{env: "FINANCE_WEBHOOK_URL", value: "mailto:finance@example.com"},
		{env: "HOURGLASS_REDIS_PREFIX", value: "hg:{x}:"},
		{env: "HOURGLASS_REDIS_PREFIX", value: "hg}"},
		{env: "HOURGLASS_REDIS_COMMANDS", value: "serverless"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			setEnv(t, tc.extra)
			t.Setenv(tc.env, tc.value)
			c, err := config.Load(config.Local)
			if err == nil {
				t.Fatalf("Load accepted %s=%q", tc.env, tc.value)
			}
			if !strings.Contains(err.Error(), tc.env) {
				t.Errorf("error does not name %s: %v", tc.env, err)
			}
			if diff := cmp.Diff(config.Config{}, c); diff != "" {
				t.Errorf("Load returned a config with its error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEveryBadValueIsReportedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{
			name: "checked values",
			vars: map[string]string{
				"HOURGLASS_AUTH": "oauth", "HOURGLASS_QUEUE_SHARDS": "0", "HOURGLASS_CLAIM_BATCH": "5000",
				"PAYOUT_URL": "ftp://x", "HOURGLASS_REDIS_PREFIX": "{hg}", "HOURGLASS_LEASE": "0s",
			},
		},
		{
			name: "unparsable and checked values",
			vars: map[string]string{
				"HOURGLASS_POLL_INTERVAL": "soon", "HOURGLASS_AUTH": "oauth", "HOURGLASS_QUEUE_SHARDS": "0",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.vars)
			_, err := config.Load(config.Local)
			if err == nil {
				t.Fatal("Load accepted the bad values")
			}
			for name := range tc.vars {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error does not name %s: %v", name, err)
				}
			}
		})
	}
}

func TestCheckNeedsAnAdminTokenInDevMode(t *testing.T) {
	setEnv(t, nil)
	c := load(t, config.Local)
	c.AdminToken = ""
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "HOURGLASS_ADMIN_TOKEN") {
		t.Errorf("Check with no admin token in dev mode = %v, want an error naming HOURGLASS_ADMIN_TOKEN", err)
	}
	c.Auth = "jwt"
	if err := c.Check(); err != nil {
		t.Errorf("Check with no admin token in jwt mode = %v, want nil", err)
	}
}

func TestRequire(t *testing.T) {
	c := config.Config{RedisURL: "redis://cache:6379", PayoutURL: "https://pay.example.com"}
	for _, tc := range []struct {
		name  string
		names []string
		want  []string // names the error must mention; nil for no error
		not   []string // names it must not mention
	}{
		{name: "nothing"},
		{name: "all set", names: []string{"REDIS_URL", "PAYOUT_URL"}},
		{name: "one missing", names: []string{"REDIS_URL", "WORK_QUEUE_URL"}, want: []string{"WORK_QUEUE_URL"}, not: []string{"REDIS_URL"}},
		{
			name:  "several missing",
			names: []string{"WORK_QUEUE_URL", "FINANCE_TOPIC_ARN", "FINANCE_WEBHOOK_URL", "PAYOUT_URL"},
			want:  []string{"WORK_QUEUE_URL", "FINANCE_TOPIC_ARN", "FINANCE_WEBHOOK_URL"}, not: []string{"PAYOUT_URL"},
		},
		{name: "unknown name", names: []string{"REDIS_URL", "NO_SUCH_SETTING"}, want: []string{"NO_SUCH_SETTING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Require(tc.names...)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Require(%v) = %v, want nil", tc.names, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Require(%v) = nil, want an error", tc.names)
			}
			for _, n := range tc.want {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("error does not name %s: %v", n, err)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error names %s, which is set: %v", n, err)
				}
			}
		})
	}
}

const secretValue = "s3cr3t-value-42"

func TestSecretNeverPrints(t *testing.T) {
	s := config.Secret(secretValue)
	cfg := config.Config{RedisURL: "redis://:" + secretValue + "@cache:6379", AdminToken: s, PayoutSecret: s, FinanceSecret: s}
	holder := struct {
		Name   string
		Secret config.Secret
	}{"payout", s}

	jsonLog := func(args ...any) string {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("msg", args...)
		return buf.String()
	}
	textLog := func(args ...any) string {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("msg", args...)
		return buf.String()
	}
	for _, tc := range []struct {
		name string
		out  func() string
	}{
		{"%v", func() string { return fmt.Sprintf("%v", s) }},
		{"%s", func() string { return fmt.Sprintf("%s", s) }}, //nolint:staticcheck // S1025: fmt's %s path is the one under test
		{"%+v", func() string { return fmt.Sprintf("%+v", s) }},
		{"%q", func() string { return fmt.Sprintf("%q", s) }},
		{"%#v", func() string { return fmt.Sprintf("%#v", s) }},
		{"Sprint", func() string { return fmt.Sprint(s) }},
		{"error wrap", func() string { return fmt.Errorf("connect %v: %w", s, os.ErrNotExist).Error() }},
		{"%v of a struct", func() string { return fmt.Sprintf("%v", holder) }},
		{"%+v of a struct", func() string { return fmt.Sprintf("%+v", holder) }},
		{"%+v of Config", func() string { return fmt.Sprintf("%+v", cfg) }},
		{"slog JSON attr", func() string { return jsonLog("secret", s) }},
		{"slog JSON slog.Any", func() string { return jsonLog(slog.Any("secret", s)) }},
		{"slog JSON group", func() string { return jsonLog(slog.Group("redis", "url", cfg.RedisURL)) }},
		{"slog text attr", func() string { return textLog("secret", s) }},
		{"slog text Config", func() string { return textLog("config", cfg) }},
		{"slog JSON struct", func() string { return jsonLog("payout", holder) }},
		{"slog JSON Config", func() string { return jsonLog("config", cfg) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out()
			if strings.Contains(out, secretValue) {
				t.Errorf("the secret leaked: %s", out)
			}
			if !strings.Contains(out, "[redacted]") {
				t.Errorf("no [redacted] in %s", out)
			}
		})
	}

	t.Run("Bytes returns the value", func(t *testing.T) {
		if got := string(s.Bytes()); got != secretValue {
			t.Errorf("Bytes() = %q, want %q", got, secretValue)
		}
	})
	t.Run("json.Marshal", func(t *testing.T) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secretValue) {
			t.Errorf("json.Marshal leaked the secret: %s", b)
		}
	})
}
