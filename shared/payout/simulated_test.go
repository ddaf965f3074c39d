package payout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func TestSimulated(t *testing.T) {
	var buf bytes.Buffer
	sim := &payout.Simulated{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	w := testWithdrawal()

	first, err := sim.Pay(t.Context(), w)
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}
	again, err := sim.Pay(t.Context(), w)
	if err != nil {
		t.Fatalf("Pay again: %v", err)
	}
	if first != "sim_wd_01J0TEST" || again != first {
		t.Errorf("payout ids %q, %q, want sim_wd_01J0TEST twice", first, again)
	}
	other := w
	other.ID = "wd_other"
	if id, _ := sim.Pay(t.Context(), other); id != "sim_wd_other" {
		t.Errorf("payout id %q, want sim_wd_other", id)
	}

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("logged %d lines, want one per payout:\n%s", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	delete(got, "time")
	want := map[string]any{
		"level":         "INFO",
		"msg":           "simulated payout",
		"withdrawal_id": "wd_01J0TEST",
		"amount":        "12.50",
		"currency":      "EUR",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log line (-want +got):\n%s", diff)
	}
	if strings.Contains(buf.String(), w.Destination) {
		t.Errorf("log holds the destination: %s", buf.String())
	}
}

func TestSimulatedNilLogger(t *testing.T) {
	var p withdrawal.Provider = &payout.Simulated{}
	if id, err := p.Pay(t.Context(), testWithdrawal()); err != nil || id != "sim_wd_01J0TEST" {
		t.Fatalf("Pay = %q, %v", id, err)
	}
}

func TestSimulatedCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := (&payout.Simulated{}).Pay(ctx, testWithdrawal())
	if err == nil || errors.Is(err, withdrawal.ErrPermanent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Pay = %v, want a transient context.Canceled", err)
	}
}
