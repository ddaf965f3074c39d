package payout_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// A call of a payout attempt that could not start before the attempt's
// deadline is not made: nothing reaches the provider, and it is no verdict
// (withdrawal.ErrTooLate, never unknown or failed). Issue 21, defect 1.
func TestNoCallPastTheAttemptsDeadline(t *testing.T) {
	srv, rec := serve(t, answer(http.StatusOK, `{"payout_id":"po_1"}`))
	c, clk := newClient(t, srv.URL)
	for _, past := range []time.Duration{0, time.Second} {
		ctx := withdrawal.WithCallDeadline(t.Context(), clk.Now().Add(-past))
		if _, err := c.Pay(ctx, testWithdrawal()); !errors.Is(err, withdrawal.ErrTooLate) || kind(err) != "transient" {
			t.Errorf("Pay %s past the deadline: %v, want ErrTooLate", past, err)
		}
		if _, err := c.Lookup(ctx, testWithdrawal()); !errors.Is(err, withdrawal.ErrTooLate) {
			t.Errorf("Lookup %s past the deadline: %v, want ErrTooLate", past, err)
		}
	}
	if n := len(rec.all()); n != 0 {
		t.Fatalf("the provider got %d requests past their attempt's deadline", n)
	}
	// Before the deadline it is an ordinary call.
	ctx := withdrawal.WithCallDeadline(t.Context(), clk.Now().Add(time.Minute))
	if id, err := c.Pay(ctx, testWithdrawal()); err != nil || id != "po_1" {
		t.Fatalf("Pay before the deadline: %q %v", id, err)
	}
}

// A call made close to its attempt's deadline is cut short at it, not at
// the client's own (longer) timeout: no request of the attempt is still
// running once another consumer may take the withdrawal over. The bound is
// read on the client's clock, so the test states it exactly.
func TestACallEndsByItsAttemptsDeadline(t *testing.T) {
	release := make(chan struct{})
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	c, clk := newClient(t, srv.URL) // its own timeout: the 10 s default
	ctx := withdrawal.WithCallDeadline(t.Context(), clk.Now().Add(80*time.Millisecond))
	_, err := c.Pay(ctx, testWithdrawal())
	if kind(err) != "unknown" || !strings.Contains(err.Error(), "no answer within 80ms") {
		t.Fatalf("Pay near its deadline: %v, want unknown, cut at 80ms", err)
	}
	_, err = c.Lookup(ctx, testWithdrawal())
	if err == nil || !strings.Contains(err.Error(), "no answer within 80ms") {
		t.Fatalf("Lookup near its deadline: %v, want cut at 80ms", err)
	}
}
