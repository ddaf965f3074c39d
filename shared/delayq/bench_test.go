package delayq_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
)

// BenchmarkClaimAck measures claim + ack of jobs due now on a real
// redis-server, by batch size; it reports jobs/s.
func BenchmarkClaimAck(b *testing.B) {
	s := redistest.Start(b)
	rdb := s.Client(b)
	ctx := context.Background()
	q, err := delayq.New(rdb, delayq.Options{Name: "bench", Kind: "bench", Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			now := time.Now()
			fill(b, rdb, q, batch*b.N, now)
			b.ResetTimer()
			jobs := 0
			ids := make([]string, 0, batch)
			for range b.N {
				c, err := q.Claim(ctx, 0, now, time.Minute, batch)
				if err != nil {
					b.Fatal(err)
				}
				ids = ids[:0]
				for _, j := range c.Jobs {
					ids = append(ids, j.ID)
				}
				if _, err := q.Ack(ctx, 0, c.Lease, ids...); err != nil {
					b.Fatal(err)
				}
				jobs += len(c.Jobs)
			}
			b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// fill schedules n jobs due at due, pipelined.
func fill(b *testing.B, rdb *redis.Client, q *delayq.Queue, n int, due time.Time) {
	b.Helper()
	ctx := context.Background()
	const chunk = 5000
	for start := 0; start < n; start += chunk {
		p := rdb.Pipeline()
		for i := start; i < min(n, start+chunk); i++ {
			p.ZAdd(ctx, q.Keys(0).Due, redis.Z{Score: float64(due.UnixMilli()), Member: "job-" + strconv.Itoa(i)})
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
