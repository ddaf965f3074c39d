package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// backlogSpan is how far ahead the backlog's withdrawals fall due, and
// backlogFrom when the first of them does: after the measurements, so that
// the poller's work is exactly the jobs measured (a real 10^7 backlog has
// ~4 jobs/s falling due, noise beside 5,000/s).
const (
	backlogSpan = 30 * 24 * time.Hour
	backlogFrom = 10 * time.Minute
)

// benchBacklog: the burst and lag targets with 10^4, 10^6 and 10^7
// withdrawals pending over 30 days on the shard, side by side, with the
// backlog's Redis memory and the claim script's time per call, so that the
// growth of cost with the backlog shows. Redis holds the schedule only: the
// claim touches the due set, the inflight set and the lease token, never a
// record, and the schedule is all the DynamoDB ledger keeps in Redis (with
// HOURGLASS_REDIS_HORIZON at 30 days; the default hour holds ~1/720 of it).
func benchBacklog(ctx context.Context, rdb redis.UniversalClient, _ *server, rep *report, quick bool) error {
	sizes, burst, rate, secs := []int{10_000, 1_000_000, 10_000_000}, 100_000, 5000, 10
	if quick {
		sizes, burst, secs = []int{10_000, 100_000, 1_000_000}, 20_000, 4
	}
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 1})
	if err != nil {
		return err
	}
	// Load the claim script, so that the figures count no NOSCRIPT round.
	if _, err := q.Claim(ctx, 0, time.UnixMilli(0), time.Second, 1); err != nil {
		return err
	}
	var base map[string]float64 // the smallest backlog's figures, the baseline of the others
	for _, b := range sizes {
		figs, err := backlogAt(ctx, rdb, q, b, burst, rate, secs, rep, sizeName(sizes[0]), base)
		if err != nil {
			return fmt.Errorf("backlog %d: %w", b, err)
		}
		if base == nil {
			base = figs
		}
		if err := flushAndWait(ctx, rdb); err != nil {
			return err
		}
	}
	return nil
}

// flushAndWait empties Redis and waits until it has freed the memory: a
// 10^7 set takes seconds to free, longer than a client's read timeout, so
// it is freed in the background (FLUSHALL ASYNC) and nothing is measured
// meanwhile.
func flushAndWait(ctx context.Context, rdb redis.UniversalClient) error {
	if err := rdb.FlushAllAsync(ctx).Err(); err != nil {
		return err
	}
	for {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "lazyfree_pending_objects:0\r\n") {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// backlogAt measures one backlog of b and returns its figures by key suffix.
// Figures at other backlogs carry those of baseName's, base, as baseline.
func backlogAt(ctx context.Context, rdb redis.UniversalClient, q *delayq.Queue, b, burst, rate, secs int, rep *report,
	baseName string, base map[string]float64) (map[string]float64, error) {
	size := sizeName(b)
	figs := map[string]float64{}
	add := func(suffix, figure string, v float64, x row) {
		figs[suffix] = v
		x.Key, x.Figure, x.Value = "backlog_"+size+"_"+suffix, fmt.Sprintf("backlog %s: %s", size, figure), v
		if bv, ok := base[suffix]; ok {
			x.Baseline, x.Base = "the same at backlog "+baseName, bv
		}
		rep.add(x)
	}

	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	from := start.Add(backlogFrom).UnixMilli()
	step := float64(backlogSpan.Milliseconds()) / float64(b)
	rng := rand.New(rand.NewPCG(uint64(b), 16))
	if err := fillIDs(ctx, rdb, q.Keys(0).Due, b, func(i int) int64 {
		// Uniform over the span, in due order: the skip list grows at
		// its tail, so the fill is quick.
		return from + int64((float64(i)+rng.Float64())*step)
	}); err != nil {
		return nil, err
	}
	filled := time.Since(start)
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	add("used_memory_mib", "Redis used_memory of the schedule (MiB)", float64(after-before)/(1<<20), row{
		Note: fmt.Sprintf("Redis holds the schedule alone, as with the DynamoDB ledger and HOURGLASS_REDIS_HORIZON=720h "+
			"(the default 1h holds ~1/720 of it): %d withdrawal ids (wd_<ULID>) due over 30 days from 10 min on, in %s; %.0f bytes each; "+
			"filled in %.1f s. The Redis ledger's records would add bytes_per_job each and take no part in a claim",
			b, q.Keys(0).Due, float64(after-before)/float64(b), filled.Seconds())})

	// (a) A burst due at one instant among the backlog.
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	// The backlog falls due later than anything measured, so ahead's
	// clean-up of a fill done over leaves it alone.
	due, err := ahead(ctx, rdb, q.Keys(0).Due, func(first int64) (int64, error) {
		return first, fillIDs(ctx, rdb, q.Keys(0).Due, burst, func(int) int64 { return first })
	})
	if err != nil {
		return nil, err
	}
	drain, err := drainRun(ctx, q, burst, time.UnixMilli(due))
	if err != nil {
		return nil, err
	}
	calls, us, err := scriptStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	add(fmt.Sprintf("burst_%dk_drain_s", burst/1000), fmt.Sprintf("burst of %d due at once: due to last ack (s)", burst), drain,
		row{Target: "≤ 1 s", Met: met(drain <= 1)})
	add("claim_us_burst", "claim script in the burst (µs a call)", us, row{
		Note: fmt.Sprintf("INFO commandstats: %d claims of up to %d jobs, %.1f µs each", calls, poller.DefaultBatch, us)})

	// (b) A steady rate falling due among the backlog.
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	n := rate * secs
	first, err := ahead(ctx, rdb, q.Keys(0).Due, func(first int64) (int64, error) {
		due := func(i int) int64 { return first + int64(i)*1000/int64(rate) }
		return due(n - 1), fillIDs(ctx, rdb, q.Keys(0).Due, n, due)
	})
	if err != nil {
		return nil, err
	}
	cpu0, err := serverCPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	l, err := lagRun(ctx, q, n, first, secs)
	if err != nil {
		return nil, fmt.Errorf("lag at %d/s: %w", rate, err)
	}
	cpu1, err := serverCPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	calls, us, err = scriptStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	p50, p99, mx := l.summary()
	name := strconv.Itoa(rate/1000) + "k"
	add("lag_p50_ms_"+name, fmt.Sprintf("lag p50 at %d jobs/s (ms)", rate), p50, row{})
	add("lag_p99_ms_"+name, fmt.Sprintf("lag p99 at %d jobs/s (ms)", rate), p99, row{Target: "≤ 5 ms, none early", Met: met(p99 <= 5 && l.early == 0),
		Note: fmt.Sprintf("%d jobs over %d s among %d pending: p50 %.2f ms, p99 %.2f ms, max %.2f ms, handed over early: %d",
			n, secs, b, p50, p99, mx, l.early)})
	add("lag_max_ms_"+name, fmt.Sprintf("lag max at %d jobs/s (ms)", rate), mx, row{})
	add("claim_us_"+name, fmt.Sprintf("claim script at %d jobs/s (µs a call)", rate), us, row{
		Note: fmt.Sprintf("INFO commandstats: %d claims, %.1f jobs and %.1f µs each (wall time in the script: a busy machine's "+
			"preemptions count); INFO cpu: redis-server used %.1f µs of CPU a claim, its ack included",
			calls, float64(n)/float64(max(calls, 1)), us, (cpu1-cpu0)*1e6/float64(max(calls, 1)))})
	return figs, nil
}

// fillIDs schedules n withdrawal ids as the ledger writes them on key, due
// at due(i) (called in order), in ZADDs of 1,000 members, pipelined, from
// two connections.
func fillIDs(ctx context.Context, rdb redis.UniversalClient, key string, n int, due func(i int) int64) error {
	const perCmd, perPipe = 1000, 20
	now := time.Now()
	var g errgroup.Group
	g.SetLimit(2)
	for start := 0; start < n; start += perCmd * perPipe {
		zs := make([]redis.Z, 0, min(n-start, perCmd*perPipe))
		for i := start; i < min(n, start+perCmd*perPipe); i++ {
			zs = append(zs, redis.Z{Score: float64(due(i)), Member: withdrawal.NewID(now)})
		}
		g.Go(func() error {
			p := rdb.Pipeline()
			for c := range slices.Chunk(zs, perCmd) {
				p.ZAdd(ctx, key, c...)
			}
			_, err := p.Exec(ctx)
			return err
		})
	}
	return g.Wait()
}

// sizeName is b as a power of ten: 1e7.
func sizeName(b int) string { return fmt.Sprintf("1e%d", int(math.Round(math.Log10(float64(b))))) }

// scriptStats is the EVALSHA calls and their mean µs since the last CONFIG
// RESETSTAT, from INFO commandstats. With the free sink every EVALSHA is a
// claim (whole leases are acked by ZREMRANGEBYSCORE).
func scriptStats(ctx context.Context, rdb redis.UniversalClient) (int64, float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		var (
			calls int64
			us    float64
		)
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls, err = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok && err == nil {
				us, err = strconv.ParseFloat(v, 64)
			}
		}
		return calls, us, err
	}
	return 0, 0, fmt.Errorf("INFO commandstats: no evalsha")
}
