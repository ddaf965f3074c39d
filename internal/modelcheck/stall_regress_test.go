package modelcheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// stallWorld is a world of the stalling checker for a regression test that
// replays one of its counterexamples step by step.
func stallWorld(t *testing.T, backend string) *sworld {
	w := newSWorld(t, openStallEnv(t, backend), &runStats{states: map[string]bool{}, acts: map[string]int{}}, 1)
	t.Cleanup(w.close)
	return w
}

// only is the one withdrawal of a world.
func (w *sworld) only() string {
	ids := w.ids()
	if len(ids) != 1 {
		w.fatalf("%d withdrawals, want 1", len(ids))
	}
	return ids[0]
}

// A consumer stalls after the provider paid, before it records the
// payout, past its attempt's deadline. The other container takes the
// attempt over while the provider's lookup still lags (a 404 for a request
// received 41 s ago) and the provider is down: a 404 then proves nothing,
// so the record must keep "may have been paid", and the user's cancel must
// be refused. The checker found this ("paid, then cancelled") in 1507 runs
// with the proof window removed from process.go (a 404 always clearing
// "may have paid"), issue 21.
func TestStallTakeoverAfterAPaymentNeverCancels(t *testing.T) {
	for _, backend := range []string{"redis", "dynamodb"} {
		t.Run(backend, func(t *testing.T) {
			w := stallWorld(t, backend)
			ctx := context.Background()
			w.keys = append(w.keys, creation{key: "k-0", user: "ann",
				body: `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`})
			w.finish(w.spawn("create", func(ctx context.Context) error {
				_, err := w.svc.Create(ctx, "ann", "k-0", []byte(w.keys[0].body))
				return err
			}))
			id := w.only()
			w.clk.Advance(10 * time.Second)
			w.poll()
			if len(w.sqs) != 1 {
				w.fatalf("%d messages due, want 1", len(w.sqs))
			}
			// c2 begins its attempt and the provider pays; c2 stalls
			// before it records the payout.
			c2 := w.deliverTo(w.cons[1], w.sqs[0])
			for i := 0; c2.At() == "" || c2.At()[:4] != "http"; i++ {
				if i == 10 || c2.Done() {
					w.fatalf("c2 never reached the provider: %s", c2)
				}
				w.s.Step(c2)
			}
			w.s.Step(c2) // the POST: the provider pays
			if _, paid := w.prov.paid(id); !paid {
				w.fatalf("the provider did not pay %s", id)
			}
			w.logf("c2 stalls at %s", c2.At())
			w.verify()
			// Past c2's deadline, with the lookup lagging and the
			// provider down, c1 takes the attempt over.
			w.clk.Advance(attemptTimeout + time.Second)
			w.prov.mu.Lock()
			w.prov.lagging, w.prov.down = true, true
			w.prov.mu.Unlock()
			w.poll()
			if len(w.sqs) == 0 {
				w.fatalf("the attempt's deadline brought no message")
			}
			w.finish(w.deliverTo(w.cons[0], w.sqs[len(w.sqs)-1]))
			w.verify()
			rec, err := w.led.Find(ctx, id)
			if err != nil {
				w.fatalf("find: %v", err)
			}
			if !rec.MaybePaid {
				w.fatalf("after a lagging lookup's 404 the record no longer says it may have been paid")
			}
			// The user cancels.
			w.finish(w.spawn("cancel", func(ctx context.Context) error {
				_, err := w.svc.Cancel(ctx, "ann", id)
				return err
			}))
			w.verify()
			if rec, _ := w.led.Find(ctx, id); rec.Status == withdrawal.Cancelled {
				w.fatalf("cancelled after the provider paid")
			}
			w.s.FinishAll()
			w.reap()
			w.drain()
		})
	}
}
