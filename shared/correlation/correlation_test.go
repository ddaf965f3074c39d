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
