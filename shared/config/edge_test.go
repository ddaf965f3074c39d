package config_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/config"
)

// TestLambdaRefusesDevAuth: a Lambda function configured with
// HOURGLASS_AUTH=dev would trust X-User-Id and open the admin routes to the
// public default token; its cold start fails instead, naming the variable.
// The local stack keeps dev auth.
func TestLambdaRefusesDevAuth(t *testing.T) {
	for _, vars := range []map[string]string{
		{"HOURGLASS_AUTH": "dev"},
		{"HOURGLASS_AUTH": "dev", "HOURGLASS_ADMIN_TOKEN": "a-long-private-token"},
	} {
		setEnv(t, vars)
		c, err := config.Load(config.Lambda)
		if err == nil {
			t.Fatalf("Load(Lambda) with %v = %+v, want an error", vars, c)
		}
		if !strings.Contains(err.Error(), "HOURGLASS_AUTH") || !strings.Contains(err.Error(), "jwt") {
			t.Errorf("error %q does not name HOURGLASS_AUTH and the way out (jwt)", err)
		}
	}
	setEnv(t, map[string]string{"HOURGLASS_AUTH": "dev"})
	if got := load(t, config.Local).Auth; got != "dev" {
		t.Errorf("local Auth = %q, want dev", got)
	}
}

// TestAdminRoleARNs: HOURGLASS_ADMIN_ROLE_ARNS is a comma-separated list of
// IAM role ARNs (with or without a path); anything else fails the cold start
// naming the variable and the entry.
func TestAdminRoleARNs(t *testing.T) {
	for _, ok := range []string{
		"",
		"arn:aws:iam::123456789012:role/hourglass-operator",
		"arn:aws:iam::123456789012:role/ops/team/hourglass-operator, arn:aws:iam::210987654321:role/Break.Glass@x",
		"arn:aws-cn:iam::123456789012:role/ops",
	} {
		setEnv(t, map[string]string{"HOURGLASS_ADMIN_ROLE_ARNS": ok})
		load(t, config.Lambda)
	}
	for _, bad := range []string{
		"hourglass-operator",
		"arn:aws:iam::123456789012:user/alice",
		"arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops",
		"arn:aws:iam::12345:role/ops",
		"arn:aws:iam::123456789012:role/",
		"arn:aws:iam::123456789012:role/ops,arn:aws:iam::123456789012:role/*",
		"arn:aws:iam::123456789012:role/ops name",
	} {
		setEnv(t, map[string]string{"HOURGLASS_ADMIN_ROLE_ARNS": bad})
		_, err := config.Load(config.Lambda)
		if err == nil || !strings.Contains(err.Error(), "HOURGLASS_ADMIN_ROLE_ARNS") {
			t.Errorf("Load with HOURGLASS_ADMIN_ROLE_ARNS=%q: %v, want an error naming it", bad, err)
		}
	}
}

// TestLambdaLogsAtInfo: a function whose environment names no level logs at
// INFO (no DEBUG lines in production unless asked for).
func TestLambdaLogsAtInfo(t *testing.T) {
	for _, p := range []config.Profile{config.Lambda, config.Local} {
		setEnv(t, nil)
		if got := load(t, p).SlogLevel(); got != slog.LevelInfo {
			t.Errorf("profile %d: level %v, want INFO", p, got)
		}
	}
	setEnv(t, map[string]string{"HOURGLASS_LOG_LEVEL": "debug"})
	if got := load(t, config.Lambda).SlogLevel(); got != slog.LevelDebug {
		t.Errorf("HOURGLASS_LOG_LEVEL=debug: level %v", got)
	}
}
