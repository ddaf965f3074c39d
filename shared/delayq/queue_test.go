package delayq_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)

func newQueue(t *testing.T, b redistest.Backend, shards int) *delayq.Queue {
	t.Helper()
	q, err := delayq.New(b.Client, delayq.Options{Name: "withdrawals", Kind: "withdrawal.payout", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func ids(jobs []delayq.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestClaimTakesOnlyDueJobsInDueOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		for i, off := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second, time.Millisecond} {
			if err := q.Add(ctx, 0, fmt.Sprintf("j%d", i), t0.Add(off)); err != nil {
				t.Fatal(err)
			}
		}
		// One millisecond before j3 is due nothing is claimed, and Next says when.
		c, err := q.Claim(ctx, 0, t0, 30*time.Second, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Jobs) != 0 || !c.Next.Equal(t0.Add(time.Millisecond)) {
			t.Fatalf("claim before due: jobs %v next %v", ids(c.Jobs), c.Next)
		}
		c, err = q.Claim(ctx, 0, t0.Add(2*time.Second), 30*time.Second, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"j3", "j1", "j2"}, ids(c.Jobs)); diff != "" {
			t.Fatalf("claimed (-want +got):\n%s", diff)
		}
		want := delayq.Job{Kind: "withdrawal.payout", Queue: "withdrawals", Shard: 0, ID: "j1",
			Due: t0.Add(time.Second).UnixMilli(), Lease: t0.Add(32 * time.Second).UnixMilli()}
		if diff := cmp.Diff(want, c.Jobs[1]); diff != "" {
			t.Fatalf("job (-want +got):\n%s", diff)
		}
		if !c.Next.Equal(t0.Add(3 * time.Second)) {
			t.Fatalf("next = %v", c.Next)
		}
		st, err := q.Stats(ctx, t0.Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Stats{Due: 1, DueNow: 1, OldestDueLagMS: 2000, Inflight: 3}, st); diff != "" {
			t.Fatalf("stats (-want +got):\n%s", diff)
		}
	})
}

func TestClaimIsBoundedByLimit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		for i := range 25 {
			if err := q.Add(ctx, 0, fmt.Sprintf("j%02d", i), t0); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for {
			c, err := q.Claim(ctx, 0, t0, time.Minute, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Jobs) > 10 {
				t.Fatalf("claimed %d > limit", len(c.Jobs))
			}
			if len(c.Jobs) == 0 {
				break
			}
			got = append(got, ids(c.Jobs)...)
		}
		if len(got) != 25 {
			t.Fatalf("claimed %d jobs, want 25", len(got))
		}
		if _, err := q.Claim(ctx, 0, t0, time.Minute, delayq.MaxBatch+1); err == nil {
			t.Fatal("claim above MaxBatch was accepted")
		}
	})
}

func TestExpiredLeaseComesBackAndIsClaimedAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		for _, id := range []string{"a", "b"} {
			if err := q.Add(ctx, 0, id, t0); err != nil {
				t.Fatal(err)
			}
		}
		first, err := q.Claim(ctx, 0, t0, 30*time.Second, 10)
		if err != nil || len(first.Jobs) != 2 {
			t.Fatalf("first claim: %v %v", first.Jobs, err)
		}
		// The claimer dies. Until the lease runs out nobody else gets the jobs.
		c, err := q.Claim(ctx, 0, t0.Add(29*time.Second), 30*time.Second, 10)
		if err != nil || len(c.Jobs) != 0 {
			t.Fatalf("claim within lease: %v %v", c.Jobs, err)
		}
		second, err := q.Claim(ctx, 0, t0.Add(30*time.Second), 30*time.Second, 10)
		if err != nil {
			t.Fatal(err)
		}
		if second.Reaped != 2 || len(second.Jobs) != 2 {
			t.Fatalf("after lease: reaped %d claimed %v", second.Reaped, ids(second.Jobs))
		}
		// The dead claimer's late ack must not take the jobs from the new lease.
		if n, err := q.Ack(ctx, 0, first.Lease, "a", "b"); err != nil || n != 0 {
			t.Fatalf("stale ack acked %d (%v)", n, err)
		}
		if n, err := q.Ack(ctx, 0, second.Lease, "a", "b"); err != nil || n != 2 {
			t.Fatalf("ack acked %d (%v)", n, err)
		}
		st, err := q.Stats(ctx, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if st != (delayq.Stats{}) {
			t.Fatalf("queue not empty after ack: %+v", st)
		}
	})
}

func TestReapKeepsARetryAlreadyScheduled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		if err := q.Add(ctx, 0, "a", t0); err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, 0, t0, 10*time.Second, 10)
		if err != nil || len(c.Jobs) != 1 {
			t.Fatalf("claim: %v %v", c.Jobs, err)
		}
		// A consumer scheduled a retry for a minute later without clearing the
		// lease (it died before its ack): reaping must not pull the retry forward.
		if err := q.Add(ctx, 0, "a", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		n, err := q.Reap(ctx, 0, t0.Add(10*time.Second), 100)
		if err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
		next, ok, err := q.NextDue(ctx, 0)
		if err != nil || !ok || !next.Equal(t0.Add(time.Minute)) {
			t.Fatalf("next due = %v %v %v, want the retry time", next, ok, err)
		}
	})
}

func TestRetryAtAndKillRespectTheLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		for _, id := range []string{"a", "b"} {
			if err := q.Add(ctx, 0, id, t0); err != nil {
				t.Fatal(err)
			}
		}
		c, err := q.Claim(ctx, 0, t0, 10*time.Second, 10)
		if err != nil || len(c.Jobs) != 2 {
			t.Fatalf("claim: %v %v", c.Jobs, err)
		}
		if err := q.RetryAt(ctx, 0, "a", c.Lease+1, t0); !errors.Is(err, delayq.ErrLeaseLost) {
			t.Fatalf("retry under a wrong lease: %v", err)
		}
		if err := q.RetryAt(ctx, 0, "a", c.Lease, t0.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := q.Kill(ctx, 0, "b", c.Lease, t0); err != nil {
			t.Fatal(err)
		}
		if err := q.Kill(ctx, 0, "b", c.Lease, t0); !errors.Is(err, delayq.ErrLeaseLost) {
			t.Fatalf("second kill: %v", err)
		}
		st, err := q.Stats(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Stats{Due: 1, Dead: 1}, st); diff != "" {
			t.Fatalf("stats (-want +got):\n%s", diff)
		}
		removed, err := q.Cancel(ctx, 0, "a")
		if err != nil || !removed {
			t.Fatalf("cancel: %v %v", removed, err)
		}
		if removed, _ := q.Cancel(ctx, 0, "a"); removed {
			t.Fatal("second cancel removed again")
		}
	})
}

func TestShardsAreSeparateSlots(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 4)
		seen := map[int]bool{}
		for i := range 200 {
			n := q.ShardFor(fmt.Sprintf("user-%d", i))
			if n != q.ShardFor(fmt.Sprintf("user-%d", i)) {
				t.Fatal("ShardFor is not stable")
			}
			seen[n] = true
			if err := q.Add(ctx, n, fmt.Sprintf("j%d", i), t0); err != nil {
				t.Fatal(err)
			}
		}
		if len(seen) != 4 {
			t.Fatalf("200 keys used shards %v, want all 4", seen)
		}
		var tags []string
		total := 0
		for n := range 4 {
			tags = append(tags, q.Keys(n).Tag)
			c, err := q.Claim(ctx, n, t0, time.Minute, delayq.MaxBatch)
			if err != nil {
				t.Fatal(err)
			}
			total += len(c.Jobs)
		}
		if total != 200 {
			t.Fatalf("claimed %d over shards, want 200", total)
		}
		sort.Strings(tags)
		want := []string{"hg:{dq:withdrawals:0}", "hg:{dq:withdrawals:1}", "hg:{dq:withdrawals:2}", "hg:{dq:withdrawals:3}"}
		if diff := cmp.Diff(want, tags); diff != "" {
			t.Fatalf("tags (-want +got):\n%s", diff)
		}
	})
}

// TestWholeLeaseAck: a shard's lease tokens only grow, even when two claims
// fall in the same millisecond or a claimer's clock is behind, so a lease
// whose jobs were all handed over is acked by its token alone, and only its
// jobs go, however late the ack.
func TestWholeLeaseAck(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		for _, id := range []string{"a", "b", "c", "d"} {
			if err := q.Add(ctx, 0, id, t0); err != nil {
				t.Fatal(err)
			}
		}
		first, err := q.Claim(ctx, 0, t0, 30*time.Second, 2)
		if err != nil {
			t.Fatal(err)
		}
		second, err := q.Claim(ctx, 0, t0, 30*time.Second, 2) // same millisecond, same lease
		if err != nil {
			t.Fatal(err)
		}
		if first.Lease != t0.Add(30*time.Second).UnixMilli() || second.Lease != first.Lease+1 {
			t.Fatalf("lease tokens %d and %d, want %d and the next millisecond", first.Lease, second.Lease, t0.Add(30*time.Second).UnixMilli())
		}
		for _, j := range second.Jobs {
			if j.Lease != second.Lease {
				t.Fatalf("job %s carries lease %d, its claim %d", j.ID, j.Lease, second.Lease)
			}
		}
		if n, err := q.AckLease(ctx, 0, first.Lease); err != nil || n != 2 {
			t.Fatalf("ack of the first lease acked %d (%v), want 2", n, err)
		}
		st, err := q.Stats(ctx, t0)
		if err != nil || st.Inflight != 2 {
			t.Fatalf("after the first lease's ack: %+v %v; want the second lease's 2 jobs in flight", st, err)
		}
		// The second claimer dies; its jobs come back under a new lease, and
		// its late ack takes nothing from that one.
		third, err := q.Claim(ctx, 0, t0.Add(30*time.Second+time.Millisecond), 30*time.Second, 10)
		if err != nil || third.Reaped != 2 || len(third.Jobs) != 2 {
			t.Fatalf("after the lease: %+v %v", third, err)
		}
		if n, err := q.AckLease(ctx, 0, second.Lease); err != nil || n != 0 {
			t.Fatalf("stale lease ack acked %d (%v)", n, err)
		}
		if n, err := q.AckLease(ctx, 0, third.Lease); err != nil || n != 2 {
			t.Fatalf("ack of the third lease acked %d (%v)", n, err)
		}
		if st, err := q.Stats(ctx, t0.Add(time.Hour)); err != nil || st != (delayq.Stats{}) {
			t.Fatalf("queue not empty: %+v %v", st, err)
		}
		// A claimer whose clock is a minute behind still gets a newer token.
		if err := q.Add(ctx, 0, "e", t0.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		behind, err := q.Claim(ctx, 0, t0.Add(-time.Minute), 30*time.Second, 10)
		if err != nil || len(behind.Jobs) != 1 || behind.Lease <= third.Lease {
			t.Fatalf("claim by a clock behind: %+v %v; want a token past %d", behind, err, third.Lease)
		}
	})
}

// TestAckClaim: the ack of one batch and the claim of the next in one round
// trip, by the whole lease or by ids, also when Redis lost its scripts (a
// restart, a failover) and must be given them again.
func TestAckClaim(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, b, 1)
		for i := range 7 {
			if err := q.Add(ctx, 0, fmt.Sprintf("j%d", i), t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		now := t0.Add(time.Second)
		c, err := q.Claim(ctx, 0, now, time.Minute, 3)
		if err != nil {
			t.Fatal(err)
		}
		acked, c2, err := q.AckClaim(ctx, 0, c.Lease, true, nil, now, time.Minute, 3)
		if err != nil || acked != 3 {
			t.Fatalf("whole-lease ack + claim: acked %d (%v)", acked, err)
		}
		if diff := cmp.Diff([]string{"j3", "j4", "j5"}, ids(c2.Jobs)); diff != "" {
			t.Fatalf("claimed with the ack (-want +got):\n%s", diff)
		}
		if c2.Lease <= c.Lease {
			t.Fatalf("the next claim's token %d is not past the acked lease's %d", c2.Lease, c.Lease)
		}
		// The pipeline's ack repeated (a client library retrying after a lost
		// reply) finishes nothing of the lease claimed with it.
		if n, err := q.AckLease(ctx, 0, c.Lease); err != nil || n != 0 {
			t.Fatalf("repeated ack of the acked lease acked %d (%v)", n, err)
		}
		if err := b.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// j4 was refused and scheduled again: only j3 and j5 are acked.
		if err := q.RetryAt(ctx, 0, "j4", c2.Lease, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		acked, c3, err := q.AckClaim(ctx, 0, c2.Lease, false, []string{"j3", "j5"}, now, time.Minute, 3)
		if err != nil || acked != 2 {
			t.Fatalf("ack by ids + claim after SCRIPT FLUSH: acked %d (%v)", acked, err)
		}
		if diff := cmp.Diff([]string{"j6"}, ids(c3.Jobs)); diff != "" {
			t.Fatalf("claimed (-want +got):\n%s", diff)
		}
		st, err := q.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(delayq.Stats{Due: 1, Inflight: 1}, st); diff != "" {
			t.Fatalf("stats (-want +got):\n%s", diff)
		}
		if _, _, err := q.AckClaim(ctx, 0, c3.Lease, true, nil, now, time.Minute, delayq.MaxBatch+1); err == nil {
			t.Fatal("claim above MaxBatch was accepted")
		}
	})
}
