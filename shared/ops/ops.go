// Package ops gathers what operators watch: queue backlogs and lag, in-flight
// and dead jobs, and the flash-sale items on sale.
package ops

import (
	"context"
	"time"

	"github.com/hourglass/hourglass/shared/delayq"
)

// Snapshot is the body of GET /v1/admin/stats.
type Snapshot struct {
	Queues map[string]delayq.Stats `json:"queues"`
	Items  map[string]ItemStats    `json:"items"`
}

// ItemStats are a flash-sale item's counters, summed over its stock shards.
type ItemStats struct {
	StockLeft int64 `json:"stock_left"`
	Admitted  int64 `json:"admitted"`
	Confirmed int64 `json:"confirmed"`
}

// Collect reads the counters of queues at now.
func Collect(ctx context.Context, now time.Time, queues []*delayq.Queue) (Snapshot, error) {
	s := Snapshot{Queues: make(map[string]delayq.Stats, len(queues)), Items: map[string]ItemStats{}}
	for _, q := range queues {
		st, err := q.Stats(ctx, now)
		if err != nil {
			return Snapshot{}, err
		}
		s.Queues[q.Name()] = st
	}
	return s, nil
}
