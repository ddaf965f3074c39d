// Package ops gathers what operators watch: queue backlogs and lag, in-flight
// and dead jobs, and the flash-sale items on sale.
package ops

import (
	"context"
	"time"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/seckill"
)

// Snapshot is the body of GET /v1/admin/stats.
type Snapshot struct {
	Queues map[string]delayq.Stats      `json:"queues"`
	Items  map[string]seckill.ItemStats `json:"items"`
	// RateLimits is each route family's rate limits and this process's
	// refusals (set by the API, which holds the limiter); absent when every
	// limit is off.
	RateLimits map[ratelimit.Family]ratelimit.FamilyStats `json:"rate_limits,omitempty"`
}

// Collect reads the counters of queues and of the flash-sale items at now.
func Collect(ctx context.Context, now time.Time, queues []*delayq.Queue, items *seckill.Store) (Snapshot, error) {
	s := Snapshot{Queues: make(map[string]delayq.Stats, len(queues))}
	var err error
	if s.Items, err = items.Stats(ctx); err != nil {
		return Snapshot{}, err
	}
	for _, q := range queues {
		st, err := q.Stats(ctx, now)
		if err != nil {
			return Snapshot{}, err
		}
		s.Queues[q.Name()] = st
	}
	return s, nil
}
