package withdrawal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

type env struct {
	svc    *withdrawal.Service
	ledger *ledger.Redis
	queue  *delayq.Queue
	clock  *clock.Fake
}

func newEnv(t *testing.T, b redistest.Backend, clk *clock.Fake) env {
	t.Helper()
	q, err := delayq.New(b.Client, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.NewRedis(b.Client, q)
	svc, err := withdrawal.NewService(withdrawal.Config{Ledger: l, Clock: clk, Rules: rules(), ShardFor: q.ShardFor})
	if err != nil {
		t.Fatal(err)
	}
	return env{svc: svc, ledger: l, queue: q, clock: clk}
}

const body = `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`

func TestCreateSchedulesAndAnswers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b, clock.NewFake(t0))
		c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		var v httpapi.View
		if err := json.Unmarshal(httpapi.CreatedBody(c.Withdrawal), &v); err != nil {
			t.Fatal(err)
		}
		want := httpapi.View{ID: c.ID, Status: withdrawal.Scheduled, Amount: "125.50", Currency: "CNY",
			Destination: "bank_6222", DueAt: "2026-11-29T10:30:00.250Z", CreatedAt: "2026-11-29T10:00:00.250Z",
			UpdatedAt: "2026-11-29T10:00:00.250Z"}
		if v != want {
			t.Fatalf("response %+v\nwant %+v", v, want)
		}
		next, ok, err := e.queue.NextDue(ctx, e.queue.ShardFor("alice"))
		if err != nil || !ok || next.UnixMilli() != t0.Add(30*time.Minute).UnixMilli() {
			t.Fatalf("scheduled at %v %v %v", next, ok, err)
		}
	})
}

func TestIdempotency(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		e := newEnv(t, b, clk)
		first, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1", []byte(body))
		if err != nil {
			t.Fatal(err)
		}

		t.Run("replay answers the first response", func(t *testing.T) {
			clk.Advance(time.Minute)
			// The same request, spelled differently and a minute later.
			again, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1",
				[]byte(`{"delay_seconds":1800, "destination":"bank_6222","currency":"CNY","amount":"125.5"}`))
			if err != nil {
				t.Fatal(err)
			}
			if !again.Replayed || again.ID != first.ID || string(httpapi.CreatedBody(again.Withdrawal)) != string(httpapi.CreatedBody(first.Withdrawal)) {
				t.Fatalf("replay = %+v, want the first response", again)
			}
		})
		t.Run("another body conflicts", func(t *testing.T) {
			_, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1", []byte(`{"amount":"1","currency":"CNY","destination":"bank_6222"}`))
			if !errors.Is(err, withdrawal.ErrIdempotencyConflict) {
				t.Fatalf("got %v, want ErrIdempotencyConflict", err)
			}
		})
		t.Run("keys are scoped per user", func(t *testing.T) {
			bob, err := httpapi.CreateWithdrawal(ctx, e.svc, "bob", "k1", []byte(body))
			if err != nil || bob.Replayed || bob.ID == first.ID {
				t.Fatalf("bob's create with alice's key: %+v %v", bob, err)
			}
		})
		t.Run("in flight", func(t *testing.T) {
			// A first request holds the key (it reserved and has not finished).
			key := withdrawal.IdemKey{UserID: "alice", Key: "k2", Shard: e.queue.ShardFor("alice")}
			fp, err := httpapi.ParseWithdrawal(rules(), []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			now := clk.Now()
			if _, err := e.ledger.Reserve(ctx, withdrawal.Reservation{Key: key, Fingerprint: fp.Fingerprint(),
				ID: withdrawal.NewID(now), Now: now, LockUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if _, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k2", []byte(body)); !errors.Is(err, withdrawal.ErrIdempotencyInFlight) {
				t.Fatalf("got %v, want ErrIdempotencyInFlight", err)
			}
			// The first request died: after the lock the retry completes it.
			clk.Advance(31 * time.Second)
			c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k2", []byte(body))
			if err != nil || c.Replayed {
				t.Fatalf("takeover: %+v %v", c, err)
			}
		})
		page, err := e.svc.List(ctx, "alice", 100, "")
		if err != nil || len(page.Items) != 2 {
			t.Fatalf("alice has %d withdrawals (%v), want 2", len(page.Items), err)
		}
	})
}

func TestConcurrentCreatesWithOneKeyMakeOneWithdrawal(t *testing.T) {
	s := redistest.Start(t)
	rb := redistest.Backend{Name: "redis-server", Client: s.Client(t), Real: s}
	e := newEnv(t, rb, clock.NewFake(t0))
	ctx := context.Background()
	const n = 32
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		results = map[string]int{}
	)
	release := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-release
			c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "same-key", []byte(body))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && c.Replayed:
				results["replayed"]++
				ids[c.ID]++
			case err == nil:
				results["created"]++
				ids[c.ID]++
			case errors.Is(err, withdrawal.ErrIdempotencyInFlight):
				results["in flight"]++
			default:
				t.Errorf("unexpected %v", err)
			}
		})
	}
	close(release)
	wg.Wait()
	if results["created"] != 1 || len(ids) != 1 || results["created"]+results["replayed"]+results["in flight"] != n {
		t.Fatalf("results %v, ids %v: want exactly one created withdrawal", results, ids)
	}
	page, err := e.svc.List(ctx, "alice", 100, "")
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("stored %d withdrawals (%v), want 1", len(page.Items), err)
	}
}

func TestListPagesAndCursor(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		e := newEnv(t, b, clk)
		var want []string
		for i := range 5 {
			clk.Advance(time.Millisecond)
			c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", fmt.Sprintf("k%d", i), []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			want = append([]string{c.ID}, want...)
		}
		var got []string
		cursor := ""
		for range 10 {
			p, err := e.svc.List(ctx, "alice", 2, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range p.Items {
				got = append(got, w.ID)
			}
			if p.Next == "" {
				break
			}
			cursor = p.Next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pages %v, want %v", got, want)
		}
		for _, bad := range []struct {
			limit  int
			cursor string
			field  string
		}{{0, "", "limit"}, {101, "", "limit"}, {10, "!!", "cursor"}, {10, "d2RfeA", "cursor"}} {
			_, err := e.svc.List(ctx, "alice", bad.limit, bad.cursor)
			var verr *validation.Error
			if !errors.As(err, &verr) || verr.Errors[0].Field != bad.field {
				t.Errorf("List(%d, %q) = %v, want a %s error", bad.limit, bad.cursor, err, bad.field)
			}
		}
	})
}

// TestResolveNamesTheRevisionJudged: an operator's verdict is about the
// record as it was read; one that names no revision is refused before
// anything is read or written.
func TestResolveNamesTheRevisionJudged(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b, clock.NewFake(t0))
		c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		before, err := e.ledger.Find(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := withdrawal.Resolution{Status: withdrawal.Failed, Reason: "not at the provider", By: "ops", MaxAttempts: 3}
		_, err = e.svc.Resolve(ctx, c.ID, r)
		var verr *validation.Error
		if !errors.As(err, &verr) || len(verr.Errors) != 1 || verr.Errors[0].Field != "revision" {
			t.Fatalf("a resolution naming no revision: %v, want a validation error on revision", err)
		}
		// Named, it reaches the ledger, which says why a withdrawal never
		// sent is not an operator's to settle, whatever revision was judged.
		stale := before.Revision - 1
		r.IfRevision = &stale
		if _, err := e.svc.Resolve(ctx, c.ID, r); !errors.Is(err, withdrawal.ErrNotResolvable) {
			t.Fatalf("a resolution of a scheduled withdrawal: %v, want ErrNotResolvable", err)
		}
		if after, err := e.ledger.Find(ctx, c.ID); err != nil || after.Revision != before.Revision || after.Status != before.Status {
			t.Fatalf("refused resolutions changed the record: %+v -> %+v %v", before, after, err)
		}
	})
}
