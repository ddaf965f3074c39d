package ops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ops"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// deadQueue is a queue of shards shards with n dead jobs, dead one
// millisecond apart, spread over the shards.
func deadQueue(t *testing.T, b redistest.Backend, shards, n int) (*delayq.Queue, []string) {
	t.Helper()
	ctx := context.Background()
	q, err := delayq.New(b.Client, delayq.Options{Name: "withdrawals", Kind: "withdrawal.payout", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		id, shard, at := fmt.Sprintf("wd_%03d", i), i%shards, t0.Add(time.Duration(i)*time.Millisecond)
		ids = append(ids, id)
		if err := q.Add(ctx, shard, id, at); err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, shard, at, time.Minute, 1)
		if err != nil || len(c.Jobs) != 1 {
			t.Fatalf("claim %s: %+v %v", id, c, err)
		}
		if err := q.Kill(ctx, shard, id, c.Lease, at); err != nil {
			t.Fatal(err)
		}
	}
	return q, ids
}

// TestMoveDead: named jobs move wherever their shard, ids not dead are
// reported and untouched; all moves every dead job in bounded batches.
func TestMoveDead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q, ids := deadQueue(t, b, 3, 7)
		list, err := ops.ListDead(ctx, []*delayq.Queue{q}, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got := []string{list[0].ID, list[1].ID, list[2].ID}; !slices.Equal(got, ids[:3]) {
			t.Errorf("longest dead first: %v, want %v", got, ids[:3])
		}
		var steps []int
		m, err := ops.MoveDead(ctx, q, ops.Requeue, t0, 2, []string{ids[4], "wd_none", ids[4], ids[0]},
			func(n int) { steps = append(steps, n) })
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(m.IDs)
		if diff := cmp.Diff(ops.Moved{IDs: []string{ids[0], ids[4]}, NotDead: []string{"wd_none"}}, m); diff != "" {
			t.Errorf("requeue named (-want +got):\n%s", diff)
		}
		if n, _ := q.DeadCount(ctx); n != 5 {
			t.Errorf("%d dead after requeueing 2 of 7", n)
		}
		steps = nil
		m, err = ops.MoveDead(ctx, q, ops.Purge, t0, 2, nil, func(n int) { steps = append(steps, n) })
		if err != nil {
			t.Fatal(err)
		}
		if len(m.IDs) != 5 || len(m.NotDead) != 0 || slices.Max(steps) > 2 {
			t.Errorf("purge all: %+v in steps %v (at most 2 each)", m, steps)
		}
		if n, _ := q.DeadCount(ctx); n != 0 {
			t.Errorf("%d dead after a purge of all", n)
		}
		if _, err := ops.MoveDead(ctx, q, "bury", t0, 2, nil, nil); err == nil {
			t.Error("an unknown move was taken")
		}
		if _, err := ops.MoveDead(ctx, q, ops.Purge, t0, 0, nil, nil); err == nil {
			t.Error("a batch of 0 was taken")
		}
	})
}

func TestFindQueueNamesTheQueues(t *testing.T) {
	b := redistest.Backends(t)[0]
	var qs []*delayq.Queue
	for _, name := range []string{"sk:b", "withdrawals", "seckill-events"} {
		q, err := delayq.New(b.Client, delayq.Options{Name: name, Kind: "k", Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	if q, err := ops.FindQueue(qs, "sk:b"); err != nil || q.Name() != "sk:b" {
		t.Errorf("find sk:b: %v %v", q, err)
	}
	_, err := ops.FindQueue(qs, "sk:a")
	var nq *ops.NoQueueError
	if !errors.Is(err, ops.ErrNoQueue) || !errors.As(err, &nq) ||
		err.Error() != `no queue "sk:a" (queues: withdrawals, seckill-events, sk:b)` {
		t.Errorf("find sk:a: %v", err)
	}
}

func TestRecordID(t *testing.T) {
	for job, want := range map[string]string{
		"wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z": "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z",
		"pu_01KB|1|0|ann":               "pu_01KB",
		"ex|pu_01KB|1|0|ann":            "pu_01KB",
		"ev|order.created|1795946400000|9.99|CNY||pu_01KB|1|0|ann": "pu_01KB",
	} {
		if got := ops.RecordID(job); got != want {
			t.Errorf("RecordID(%q) = %q, want %q", job, got, want)
		}
	}
}
