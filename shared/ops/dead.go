package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// What operators do with dead jobs, for every front end (the CLI's
// "hourglass dead", the local dashboard): list them, and requeue or purge
// them in bounded batches.

// ErrNoQueue: no queue has the name asked for.
var ErrNoQueue = errors.New("ops: no such queue")

// NoQueueError names the queue asked for and the queues there are.
type NoQueueError struct {
	Name  string
	Known []string
}

func (e *NoQueueError) Error() string {
	return fmt.Sprintf("no queue %q (queues: %s)", e.Name, strings.Join(e.Known, ", "))
}

// Unwrap makes a NoQueueError an ErrNoQueue.
func (e *NoQueueError) Unwrap() error { return ErrNoQueue }

// FindQueue returns the queue of qs named name: withdrawals, sk:<item> of a
// flash-sale item, or the flash sale's seckill-events.
func FindQueue(qs []*delayq.Queue, name string) (*delayq.Queue, error) {
	names := make([]string, 0, len(qs))
	for _, q := range qs {
		if q.Name() == name {
			return q, nil
		}
		names = append(names, q.Name())
	}
	return nil, &NoQueueError{Name: name, Known: SortQueueNames(names)}
}

// SortQueueNames puts withdrawals first, then the rest by name.
func SortQueueNames(names []string) []string {
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == withdrawal.QueueName:
			return -1
		case b == withdrawal.QueueName:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

// DeadJob is a dead job of a named queue.
type DeadJob struct {
	Queue  string
	Shard  int
	ID     string
	DiedAt time.Time
}

// ListDead returns up to limit dead jobs of qs, longest dead first.
func ListDead(ctx context.Context, qs []*delayq.Queue, limit int) ([]DeadJob, error) {
	var out []DeadJob
	for _, q := range qs {
		jobs, err := q.Dead(ctx, limit)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			out = append(out, DeadJob{Queue: q.Name(), Shard: j.Shard, ID: j.ID, DiedAt: j.DiedAt})
		}
	}
	slices.SortStableFunc(out, func(a, b DeadJob) int {
		return cmp.Or(a.DiedAt.Compare(b.DiedAt), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(limit, len(out))], nil
}

// Move is what to do with dead jobs.
type Move string

// Moves.
const (
	// Requeue puts dead jobs back in their queue, due now: the poller hands
	// them on at once.
	Requeue Move = "requeue"
	// Purge deletes dead jobs for good; what they referred to stays as it is.
	Purge Move = "purge"
)

// Moved is what MoveDead did.
type Moved struct {
	// IDs are the jobs moved.
	IDs []string
	// NotDead are the named ids the dead sets did not hold (nothing done).
	NotDead []string
}

// MoveDead requeues (due at now) or purges dead jobs of q: the named ids,
// or every dead job when ids is empty, batch jobs per script call (one
// shard's dead set each). progress, if set, hears of each batch moved. On
// an error, Moved holds what was moved before it.
func MoveDead(ctx context.Context, q *delayq.Queue, how Move, now time.Time, batch int, ids []string,
	progress func(n int)) (Moved, error) {
	if how != Requeue && how != Purge {
		return Moved{}, fmt.Errorf("ops: unknown move %q", how)
	}
	if batch < 1 || batch > delayq.MaxBatch {
		return Moved{}, fmt.Errorf("ops: batch %d outside 1..%d", batch, delayq.MaxBatch)
	}
	step := func(n, limit int, ids []string) (delayq.Batch, error) {
		if how == Requeue {
			return q.RequeueDead(ctx, n, now, limit, ids...)
		}
		return q.PurgeDead(ctx, n, limit, ids...)
	}
	report := func(n int) {
		if progress != nil {
			progress(n)
		}
	}
	var m Moved
	if len(ids) == 0 {
		for n := range q.Shards() {
			for {
				b, err := step(n, batch, nil)
				if err != nil {
					return m, err
				}
				m.IDs = append(m.IDs, b.IDs...)
				report(len(b.IDs))
				if b.Left == 0 || len(b.IDs) == 0 {
					break
				}
			}
		}
		return m, nil
	}
	ids = Dedupe(ids)
	// A job id does not tell its shard, so each chunk of ids is offered to
	// every shard; a shard moves only the ones its dead set holds.
	for chunk := range slices.Chunk(ids, delayq.MaxBatch) {
		for n := range q.Shards() {
			b, err := step(n, delayq.MaxBatch, chunk)
			if err != nil {
				return m, err
			}
			m.IDs = append(m.IDs, b.IDs...)
			report(len(b.IDs))
		}
	}
	for _, id := range ids {
		if !slices.Contains(m.IDs, id) {
			m.NotDead = append(m.NotDead, id)
		}
	}
	return m, nil
}

// Dedupe returns ids without repeats, in their first order.
func Dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
