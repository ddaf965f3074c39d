package modelcheck_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/stall"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/validation"
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
				_, err := httpapi.CreateWithdrawal(ctx, w.svc, "ann", "k-0", []byte(w.keys[0].body))
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

// createOne stores one withdrawal of ann's, due at once, and returns its id.
func (w *sworld) createOne() string {
	w.keys = append(w.keys, creation{key: "k-0", user: "ann",
		body: `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`})
	w.finish(w.spawn("create", func(ctx context.Context) error {
		_, err := httpapi.CreateWithdrawal(ctx, w.svc, "ann", "k-0", []byte(w.keys[0].body))
		return err
	}))
	return w.only()
}

// deliverDue polls and starts container c on the last message due.
func (w *sworld) deliverDue(c *container) *stall.Actor {
	w.poll()
	vis := w.visible()
	if len(vis) == 0 {
		w.fatalf("no message due")
	}
	return w.deliverTo(c, vis[len(vis)-1])
}

// stepTo steps a until it is parked at a point whose label starts with
// prefix.
func (w *sworld) stepTo(a *stall.Actor, prefix string) {
	for i := 0; !strings.HasPrefix(a.At(), prefix); i++ {
		if i == 20 || a.Done() {
			w.fatalf("%s never reached %q: %s", a.Name(), prefix, a)
		}
		w.s.Step(a)
	}
}

// A payout request sent again blind just before the provider's
// idempotency window ends (its first answer was lost, the lookup is down)
// travels for a minute, within the signature tolerance, and reaches a
// provider that has forgotten the key since: it pays a second time. The
// payout step may send again under the same key only if the request
// reaches the provider within the window: by the attempt's deadline plus
// the time a request may travel (NeverReceivedAfter), not by the send.
func TestStallNoBlindResendThatLandsPastTheWindow(t *testing.T) {
	w := stallWorld(t, "redis")
	id := w.createOne()
	w.clk.Advance(10 * time.Second)
	// c1's request pays; its answer is lost: "may have paid".
	c1 := w.deliverDue(w.cons[0])
	w.stepTo(c1, "http POST")
	w.s.LoseReply(c1)
	w.finish(c1)
	w.verify()
	rec, _ := w.led.Find(context.Background(), id)
	if !rec.MaybePaid {
		w.fatalf("a lost answer left no \"may have paid\"")
	}
	// The lookup is down; 10 s before the window ends c2 asks again, and
	// its request is held on the way for a minute.
	w.prov.mu.Lock()
	w.prov.lookDown = true
	w.prov.mu.Unlock()
	w.clk.Set(rec.FirstSentAt.Add(stallWindow - 10*time.Second))
	c2 := w.deliverDue(w.cons[1])
	for i := 0; !c2.Done() && !strings.HasPrefix(c2.At(), "http POST"); i++ {
		if i == 20 {
			w.fatalf("c2 does not end: %s", c2)
		}
		w.s.Step(c2)
	}
	if c2.Done() {
		w.logf("c2 sent nothing: %v", c2.Err())
	} else {
		l := w.s.GiveUp(c2)
		w.finish(c2)
		w.clk.Advance(time.Minute)
		w.s.DeliverLate(l.ID)
		w.logf("c2's request arrives at %s", w.clk.Now().Sub(t0))
	}
	w.verify()
	w.drain()
}

// An operator reads the unresolved list (the withdrawal may have been
// paid: a request whose answer never came, more than 6 minutes ago), sees
// nothing at the provider and decides "failed", then stalls. Meanwhile the
// payout step's lookup proves the provider never got the request, sends
// it again, and the provider pays; the answer is lost, so the record is
// "may have paid" again, and the operator's stale "failed" would be taken
// (Unresolvable judges the record as it stands: "may have paid", no
// attempt running): the ledger failed, finance told failed, the money
// gone. The checker found it (a careless operator's variant: a withdrawal
// never sent when read) after 6,221 runs. A resolution that names the
// revision judged (Resolution.IfRevision) is refused and changes nothing.
func TestStallStaleResolutionNeverFailsAPayout(t *testing.T) {
	staleResolution(t, true)
}

// The same resolution naming no revision, as hourglass payouts resolve
// sent it before: it was taken. The service now refuses any resolution
// that does not name the revision judged (a validation error on
// "revision"), and the CLI requires --revision.
func TestStallStaleResolutionWithoutRevision(t *testing.T) {
	staleResolution(t, false)
}

func staleResolution(t *testing.T, judged bool) {
	w := stallWorld(t, "redis")
	id := w.createOne()
	w.clk.Advance(10 * time.Second)
	// c1's request is held and never arrives: "may have paid".
	c1 := w.deliverDue(w.cons[0])
	w.stepTo(c1, "http POST")
	w.s.GiveUp(c1)
	w.finish(c1)
	w.verify()
	// Past the time a 404 proves anything, the operator decides.
	w.clk.Advance(7 * time.Minute)
	var decided *withdrawal.Resolution
	op := w.spawn("resolve", func(ctx context.Context) error {
		return w.operate(ctx, id, false, judged, func(r withdrawal.Resolution) { decided = &r })
	})
	for i := 0; decided == nil; i++ {
		if i == 20 || op.Done() {
			w.fatalf("the operator decided nothing: %s %v", op, op.Err())
		}
		w.s.Step(op)
	}
	w.logf("the operator decided %s and stalls at %s", decided.Status, op.At())
	// c2: the lookup's 404 is proof now; it sends again, the provider
	// pays, the answer is lost.
	c2 := w.deliverDue(w.cons[1])
	w.stepTo(c2, "http POST")
	w.s.LoseReply(c2)
	w.finish(c2)
	w.verify()
	err := w.s.Finish(op)
	var verr *validation.Error
	switch {
	case judged && !errors.Is(err, withdrawal.ErrPreconditionFailed):
		w.fatalf("a resolution judged on an older revision: %v, want a refusal", err)
	case !judged && (!errors.As(err, &verr) || verr.Errors[0].Field != "revision"):
		w.fatalf("a resolution naming no revision: %v, want a validation error on revision", err)
	}
	w.reap()
	w.verify()
	w.drain()
}
