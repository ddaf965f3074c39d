package app_test

import (
	"io"
	"testing"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
)

// lambdaApp builds the App a Lambda function builds, from the environment
// the test has set (t.Setenv), on a Redis client closed with the test.
func lambdaApp(t *testing.T) *app.App {
	t.Helper()
	cfg, err := config.Load(config.Lambda)
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
