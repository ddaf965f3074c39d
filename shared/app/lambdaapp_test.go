package app_test

import (
	"io"
	"testing"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
)

// appFromEnv builds the App of profile p (a Lambda function's, the local
// stack's) from the environment the test has set (t.Setenv), on a Redis
// client closed with the test.
func appFromEnv(t *testing.T, p config.Profile) *app.App {
	t.Helper()
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	a, err := app.New(cfg, app.NewLogger(io.Discard, cfg.SlogLevel()), rdb)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
