package delayq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
)

// killAt claims every job due at at on shard n and kills those named, at at.
func killAt(t *testing.T, q *delayq.Queue, n int, at time.Time, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if err := q.Add(ctx, n, id, at); err != nil {
			t.Fatal(err)
		}
	}
	c, err := q.Claim(ctx, n, at, time.Minute, delayq.MaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range c.Jobs {
		if slices.Contains(ids, j.ID) {
			if err := q.Kill(ctx, n, j.ID, c.Lease, at); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestPeekListsTheNextDueJobsOverShards(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 3)
		for i, at := range []struct {
			shard int
			off   time.Duration
		}{{0, 3 * time.Second}, {1, time.Second}, {2, 2 * time.Second}, {1, 4 * time.Second}, {0, 250 * time.Millisecond}} {
			if err := q.Add(ctx, at.shard, fmt.Sprintf("j%d", i), t0.Add(at.off)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := q.Peek(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		want := []delayq.Scheduled{
			{Shard: 0, ID: "j4", Due: t0.Add(250 * time.Millisecond)},
			{Shard: 1, ID: "j1", Due: t0.Add(time.Second)},
			{Shard: 2, ID: "j2", Due: t0.Add(2 * time.Second)},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("peek (-want +got):\n%s", diff)
		}
		if all, _ := q.Peek(ctx, 100); len(all) != 5 {
			t.Errorf("peek 100 of 5 jobs gave %d", len(all))
		}
		if none, err := q.Peek(ctx, 0); err != nil || len(none) != 0 {
			t.Errorf("peek 0: %v %v", none, err)
		}
		st, err := q.Stats(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Due != 5 || st.Inflight != 0 {
			t.Errorf("peek changed the queue: %+v", st)
		}
	})
}

func TestDeadJobsListOldestFirst(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 2)
		killAt(t, q, 1, t0, "a")
		killAt(t, q, 0, t0.Add(time.Second), "b", "c")
		got, err := q.Dead(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []delayq.DeadJob{
			{Shard: 1, ID: "a", DiedAt: t0},
			{Shard: 0, ID: "b", DiedAt: t0.Add(time.Second)},
			{Shard: 0, ID: "c", DiedAt: t0.Add(time.Second)},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("dead (-want +got):\n%s", diff)
		}
		if n, err := q.DeadCount(ctx); err != nil || n != 3 {
			t.Errorf("dead count %d %v, want 3", n, err)
		}
	})
}

func TestRequeueNamedDeadJobs(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		killAt(t, q, 0, t0, "a", "b", "c", "d")
		now := t0.Add(time.Hour)
		got, err := q.RequeueDead(ctx, 0, now, delayq.MaxBatch, "a", "nobody", "c")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Batch{IDs: []string{"a", "c"}, Left: 2}, got); diff != "" {
			t.Errorf("requeue (-want +got):\n%s", diff)
		}
		// Requeued jobs are due now: the next claim hands them on.
		c, err := q.Claim(ctx, 0, now, time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a", "c"}, ids(c.Jobs)); diff != "" {
			t.Errorf("claimed after requeue (-want +got):\n%s", diff)
		}
		if c.Jobs[0].Due != now.UnixMilli() {
			t.Errorf("requeued job due %d, want now %d", c.Jobs[0].Due, now.UnixMilli())
		}
		// Again: nothing of it is dead any more.
		again, err := q.RequeueDead(ctx, 0, now, delayq.MaxBatch, "a", "c")
		if err != nil || len(again.IDs) != 0 || again.Left != 2 {
			t.Errorf("second requeue: %+v %v", again, err)
		}
	})
}

func TestRequeueAllIsBoundedPerCall(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		var all []string
		for i := range 25 {
			all = append(all, fmt.Sprintf("j%02d", i))
		}
		killAt(t, q, 0, t0, all...)
		var moved []string
		for calls := 1; ; calls++ {
			batch, err := q.RequeueDead(ctx, 0, t0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch.IDs) > 10 {
				t.Fatalf("one call moved %d > 10", len(batch.IDs))
			}
			moved = append(moved, batch.IDs...)
			if batch.Left != int64(25-len(moved)) {
				t.Fatalf("left %d after %d moved", batch.Left, len(moved))
			}
			if batch.Left == 0 {
				if calls != 3 {
					t.Errorf("%d calls for 25 jobs in batches of 10", calls)
				}
				break
			}
		}
		slices.Sort(moved)
		if diff := cmp.Diff(all, moved); diff != "" {
			t.Errorf("moved (-want +got):\n%s", diff)
		}
		st, err := q.Stats(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Stats{Due: 25, DueNow: 25}, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
		if _, err := q.RequeueDead(ctx, 0, t0, delayq.MaxBatch+1); err == nil {
			t.Error("a limit above MaxBatch was accepted")
		}
		if _, err := q.RequeueDead(ctx, 0, t0, 0); err == nil {
			t.Error("a limit of 0 was accepted")
		}
	})
}

// A dead job may meanwhile have been scheduled again (the reconciler puts
// back what the ledger says is on its way) or even claimed: requeueing must
// not make a second copy of it, nor push back an earlier schedule.
func TestRequeueKeepsOneCopyOfAJob(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		killAt(t, q, 0, t0, "later", "earlier", "leased")
		now := t0.Add(time.Minute)
		for id, at := range map[string]time.Time{"later": now.Add(time.Hour), "earlier": now.Add(-time.Second), "leased": now} {
			if err := q.Add(ctx, 0, id, at); err != nil {
				t.Fatal(err)
			}
		}
		c, err := q.Claim(ctx, 0, now, time.Minute, 10)
		if err != nil || len(c.Jobs) != 2 { // earlier and leased
			t.Fatalf("claim: %v %v", ids(c.Jobs), err)
		}
		if err := q.RetryAt(ctx, 0, "earlier", c.Lease, now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		batch, err := q.RequeueDead(ctx, 0, now, delayq.MaxBatch)
		if err != nil {
			t.Fatal(err)
		}
		if batch.Left != 0 || len(batch.IDs) != 3 {
			t.Fatalf("requeue: %+v", batch)
		}
		sched, err := q.Peek(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []delayq.Scheduled{{ID: "earlier", Due: now.Add(-time.Second)}, {ID: "later", Due: now}}
		if diff := cmp.Diff(want, sched); diff != "" {
			t.Errorf("scheduled after requeue (-want +got):\n%s", diff)
		}
		st, err := q.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if st.Inflight != 1 || st.Dead != 0 || st.Due != 2 {
			t.Errorf("stats %+v, want the leased job left alone in flight", st)
		}
	})
}

func TestPurgeDeadJobs(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 2)
		killAt(t, q, 0, t0, "a", "b", "c")
		killAt(t, q, 1, t0, "d")
		got, err := q.PurgeDead(ctx, 0, delayq.MaxBatch, "b", "d", "nobody")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Batch{IDs: []string{"b"}, Left: 2}, got); diff != "" {
			t.Errorf("purge of named ids on shard 0 (-want +got):\n%s", diff)
		}
		if got, err = q.PurgeDead(ctx, 0, 1); err != nil || len(got.IDs) != 1 || got.Left != 1 {
			t.Errorf("purge of one: %+v %v", got, err)
		}
		if got, err = q.PurgeDead(ctx, 1, delayq.MaxBatch); err != nil || !slices.Equal(got.IDs, []string{"d"}) || got.Left != 0 {
			t.Errorf("purge of shard 1: %+v %v", got, err)
		}
		st, err := q.Stats(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Stats{Dead: 1}, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
		if _, err := q.PurgeDead(ctx, 2, 10); err == nil {
			t.Error("a shard the queue does not have was accepted")
		}
	})
}

// TestLocateAndSearchTellWhereJobsAre: a job scheduled, one in flight and
// one dead, each found where it is (by id on its shard, or by pattern over
// every shard), with its time; a job the queue does not hold is nowhere.
func TestLocateAndSearchTellWhereJobsAre(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 2)
		killAt(t, q, 1, t0, "pu_1|1|0|ann")
		if err := q.Add(ctx, 0, "ex|pu_1|1|0|ann", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := q.Add(ctx, 0, "pu_2|1|0|bob", t0); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Claim(ctx, 0, t0, time.Minute, 1); err != nil { // pu_2 is due first
			t.Fatal(err)
		}
		name := q.Name()
		got, err := q.Locate(ctx, delayq.Ref{Shard: 1, ID: "pu_1|1|0|ann"}, delayq.Ref{Shard: 0, ID: "ex|pu_1|1|0|ann"},
			delayq.Ref{Shard: 0, ID: "pu_2|1|0|bob"}, delayq.Ref{Shard: 0, ID: "nothing"}, delayq.Ref{Shard: 7, ID: "pu_2|1|0|bob"})
		if err != nil {
			t.Fatal(err)
		}
		want := []delayq.Place{
			{Queue: name, Shard: 1, ID: "pu_1|1|0|ann", State: delayq.StateDead, At: t0},
			{Queue: name, Shard: 0, ID: "ex|pu_1|1|0|ann", State: delayq.StateScheduled, At: t0.Add(time.Hour)},
			{Queue: name, Shard: 0, ID: "pu_2|1|0|bob", State: delayq.StateInFlight, At: t0.Add(time.Minute)},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("locate (-want +got):\n%s", diff)
		}
		found, err := q.Search(ctx, "*pu_1|*", 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]delayq.Place{want[1], want[0]}, found); diff != "" {
			t.Errorf("search (-want +got):\n%s", diff)
		}
		if found, err := q.Search(ctx, "*", 1); err != nil || len(found) != 1 {
			t.Errorf("search bounded by 1: %v %v", found, err)
		}
	})
}
