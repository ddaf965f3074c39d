package correlation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/hourglass/hourglass/shared/correlation"
)

func TestIDFlowsBackToTheTracker(t *testing.T) {
	ctx := correlation.Track(context.Background())
	if id := correlation.ID(ctx); id != "" {
		t.Fatalf("fresh tracker holds %q", id)
	}
	// A callee learns the id from the record and records it.
	func(ctx context.Context) {
		if got := correlation.With(ctx, "req-1"); got != ctx {
			t.Error("With on a tracked context made a child: the caller would not see the id")
		}
	}(ctx)
	if id := correlation.ID(ctx); id != "req-1" {
		t.Errorf("caller sees %q, want req-1", id)
	}
}

func TestWith(t *testing.T) {
	bg := context.Background()
	if correlation.With(bg, "") != bg {
		t.Error("an empty id changed the context")
	}
	if id := correlation.ID(correlation.With(bg, "req-2")); id != "req-2" {
		t.Errorf("ID %q, want req-2", id)
	}
	if id := correlation.ID(bg); id != "" {
		t.Errorf("ID of a bare context %q", id)
	}
}

func TestLoggerOmitsAnEmptyID(t *testing.T) {
	for _, tc := range []struct{ id, want string }{{"req-3", "req-3"}, {"", ""}} {
		var buf bytes.Buffer
		correlation.Logger(slog.New(slog.NewJSONHandler(&buf, nil)), tc.id).Info("x")
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		got, present := line[correlation.Key]
		if (tc.want == "") == present || (present && got != tc.want) {
			t.Errorf("id %q: line %v", tc.id, line)
		}
	}
}

// TestInfoWritesWhatLoggerWrites: the hot-path line is the line Logger's
// would be, byte for byte, with an id and without, and nothing below the
// logger's level.
func TestInfoWritesWhatLoggerWrites(t *testing.T) {
	attrs := []slog.Attr{slog.String("item_id", "i-1"), slog.String("purchase_id", "p-1"), slog.Int("quantity", 2)}
	args := []any{"item_id", "i-1", "purchase_id", "p-1", "quantity", 2}
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	for _, id := range []string{"req-4", ""} {
		var viaLogger, viaInfo bytes.Buffer
		opts := &slog.HandlerOptions{ReplaceAttr: noTime}
		correlation.Logger(slog.New(slog.NewJSONHandler(&viaLogger, opts)), id).Info("purchase admitted", args...)
		correlation.Info(slog.New(slog.NewJSONHandler(&viaInfo, opts)), id, "purchase admitted", attrs...)
		if viaInfo.String() != viaLogger.String() {
			t.Errorf("id %q: Info wrote %s, Logger writes %s", id, viaInfo.Bytes(), viaLogger.Bytes())
		}
	}
	var quiet bytes.Buffer
	correlation.Info(slog.New(slog.NewJSONHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelWarn})), "req-5", "x", attrs...)
	if quiet.Len() != 0 {
		t.Errorf("a warn logger wrote an info line: %s", quiet.Bytes())
	}
}
