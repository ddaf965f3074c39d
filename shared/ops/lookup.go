package ops

import (
	"context"
	"errors"
	"strings"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// ErrNotFound: no withdrawal, order or purchase has the id looked up.
var ErrNotFound = errors.New("ops: nothing has this id")

// Finder looks records up by id, with where their jobs are.
type Finder struct {
	Ledger      withdrawal.Ledger
	Withdrawals *delayq.Queue
	Orders      seckill.OrderLedger
	// Queues lists every queue (App.Queues), to find an item's.
	Queues func(ctx context.Context) ([]*delayq.Queue, error)
}

// Found is a record looked up by id: a withdrawal or a flash-sale order,
// and its jobs in the delay queues.
type Found struct {
	// Kind is "withdrawal" or "order".
	Kind       string
	Withdrawal withdrawal.Withdrawal
	Order      seckill.Order
	// Jobs are the record's jobs: scheduled, in flight, dead. None once it
	// is processed (or, for an order, before its job is made).
	Jobs []delayq.Place
}

// maxJobs bounds the jobs a look-up lists.
const maxJobs = 20

// Find looks id up: a withdrawal id (wd_…), an order id (or_…) or the
// purchase id (pu_…) of an order.
func (f Finder) Find(ctx context.Context, id string) (Found, error) {
	switch {
	case strings.HasPrefix(id, "wd_"):
		w, err := f.Ledger.Find(ctx, id)
		if errors.Is(err, withdrawal.ErrNotFound) {
			return Found{}, ErrNotFound
		}
		if err != nil {
			return Found{}, err
		}
		jobs, err := f.Withdrawals.Locate(ctx, delayq.Ref{Shard: w.Shard, ID: w.ID})
		return Found{Kind: "withdrawal", Withdrawal: w, Jobs: jobs}, err
	case strings.HasPrefix(id, "or_"), strings.HasPrefix(id, "pu_"):
		pid := "pu_" + id[3:]
		o, err := f.Orders.FindOrder(ctx, seckill.Order{ID: seckill.OrderID(pid)})
		if errors.Is(err, seckill.ErrNoOrder) {
			return Found{}, ErrNotFound
		}
		if err != nil {
			return Found{}, err
		}
		found := Found{Kind: "order", Order: o}
		qs, err := f.Queues(ctx)
		if err != nil {
			return Found{}, err
		}
		// An order's jobs (its order job, its expiry job "ex|…", its
		// events "ev|…") carry its purchase id.
		for _, q := range qs {
			if q.Name() != seckill.QueueName(o.ItemID) && q.Name() != seckill.EventsQueue {
				continue
			}
			jobs, err := q.Search(ctx, "*"+globEscape(pid)+"*", maxJobs-len(found.Jobs))
			if err != nil {
				return Found{}, err
			}
			found.Jobs = append(found.Jobs, jobs...)
		}
		return found, nil
	}
	return Found{}, ErrNotFound
}

// globEscape quotes the characters ZSCAN MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// RecordID is the id of the record a job is about: a withdrawal job's id
// is the withdrawal id; a flash-sale job (an order job "pu_…|…", its
// expiry "ex|pu_…|…", an event "ev|…|pu_…|…") names its purchase.
func RecordID(jobID string) string {
	if i := strings.Index(jobID, "pu_"); i >= 0 {
		pid, _, _ := strings.Cut(jobID[i:], "|")
		return pid
	}
	return jobID
}
