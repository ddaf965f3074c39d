package stall_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/stall"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
)

// The real queue, stalled: a poller that froze between its claim and its
// ack past its lease finds, when it thaws, that another poller took the job
// over; its ack with the old lease acks nothing.
func TestStalledPollerOnTheRealQueue(t *testing.T) {
	if err := stall.RegisterScripts(os.DirFS("../../shared/delayq/lua"), "*.lua"); err != nil {
		t.Fatal(err)
	}
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := hooked(t, b)
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
		q, err := delayq.New(rdb, delayq.Options{Name: "withdrawals", Kind: "withdrawal.payout"})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Add(ctx, 0, "w1", clk.Now()); err != nil {
			t.Fatal(err)
		}
		const lease = 30 * time.Second
		type result struct {
			claim delayq.Claim
			acked int
		}
		poll := func(out *result) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				c, err := q.Claim(ctx, 0, clk.Now(), lease, 10)
				if err != nil {
					return err
				}
				out.claim = c
				ids := make([]string, 0, len(c.Jobs))
				for _, j := range c.Jobs {
					ids = append(ids, j.ID)
				}
				out.acked, err = q.Ack(ctx, 0, c.Lease, ids...)
				return err
			}
		}
		s := stall.New(t)
		var first, second result
		p1 := s.Go(ctx, "poller-1", poll(&first))
		if !strings.HasPrefix(p1.At(), "redis pipeline EVALSHA claim ") {
			t.Fatalf("poller-1 at %q", p1.At())
		}
		for !strings.Contains(p1.At(), " ack ") { // past the claim (and its NOSCRIPT retries)
			s.Step(p1)
		}
		if len(first.claim.Jobs) != 1 {
			t.Fatalf("poller-1 claimed %+v", first.claim)
		}
		clk.Advance(time.Minute)
		p2 := s.Go(ctx, "poller-2", poll(&second))
		if err := s.Finish(p2); err != nil {
			t.Fatal(err)
		}
		if len(second.claim.Jobs) != 1 || second.claim.Reaped != 1 || second.acked != 1 {
			t.Fatalf("poller-2: %+v", second)
		}
		if err := s.Finish(p1); err != nil {
			t.Fatal(err)
		}
		if first.acked != 0 {
			t.Fatalf("poller-1 acked %d with a lease taken over", first.acked)
		}
	})
}
