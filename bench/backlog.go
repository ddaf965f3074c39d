package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/metrics"
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
func benchBacklog(ctx context.Context, rdb redis.UniversalClient, srv *server, rep *report, quick bool) error {
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
	// All but the measured claims (q, on the functions' client) go through a
	// client of its own whose timeouts allow for a busy machine: a pipeline
	// of 20,000 members into a set of millions, INFO just after it, or the
	// COPY of settleDict can outlast the functions' 1 s read timeout when
	// other work holds the cores (at load 20-34 on two cores the COPY of
	// 10^7 took from 13 s to over a minute), and none of that is measured.
	setup := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 2,
		ReadTimeout: 10 * time.Minute, WriteTimeout: 10 * time.Minute})
	defer func() { _ = setup.Close() }()
	var base map[string]float64 // the smallest backlog's figures, the baseline of the others
	for _, b := range sizes {
		figs, err := backlogAt(ctx, setup, srv, q, b, burst, rate, secs, rep, sizeName(sizes[0]), base)
		if err != nil {
			return fmt.Errorf("backlog %d: %w", b, err)
		}
		if base == nil {
			base = figs
		}
		if err := flushAndWait(ctx, setup); err != nil {
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
	return waitLazyfree(ctx, rdb)
}

// waitLazyfree waits until Redis's lazyfree thread has nothing left to free.
func waitLazyfree(ctx context.Context, rdb redis.UniversalClient) error {
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
func backlogAt(ctx context.Context, setup redis.UniversalClient, srv *server, q *delayq.Queue, b, burst, rate, secs int, rep *report,
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

	before, err := usedMemory(ctx, setup)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	from := start.Add(backlogFrom).UnixMilli()
	step := float64(backlogSpan.Milliseconds()) / float64(b)
	rng := rand.New(rand.NewPCG(uint64(b), 16))
	if err := fillIDs(ctx, setup, q.Keys(0).Due, b, func(i int) int64 {
		// Uniform over the span, in due order: the skip list grows at
		// its tail, so the fill is quick.
		return from + int64((float64(i)+rng.Float64())*step)
	}); err != nil {
		return nil, err
	}
	filled := time.Since(start)
	settle := time.Now()
	if err := settleDict(ctx, setup, q.Keys(0).Due); err != nil {
		return nil, err
	}
	settled := time.Since(settle)
	after, err := usedMemory(ctx, setup)
	if err != nil {
		return nil, err
	}
	add("used_memory_mib", "Redis used_memory of the schedule (MiB)", float64(after-before)/(1<<20), row{
		Note: fmt.Sprintf("Redis holds the schedule alone, as with the DynamoDB ledger and HOURGLASS_REDIS_HORIZON=720h "+
			"(the default 1h holds ~1/720 of it): %d withdrawal ids (wd_<ULID>) due over 30 days from 10 min on, in %s; %.0f bytes each; "+
			"filled in %.1f s, its hash table settled in %.1f s (settleDict). The Redis ledger's records would add bytes_per_job each "+
			"and take no part in a claim",
			b, q.Keys(0).Due, float64(after-before)/float64(b), filled.Seconds(), settled.Seconds())})

	// (a) A burst due at one instant among the backlog.
	if err := setup.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	// The backlog falls due later than anything measured, so ahead's
	// clean-up of a fill done over leaves it alone.
	due, err := ahead(ctx, setup, q.Keys(0).Due, func(first int64) (int64, error) {
		return first, fillIDs(ctx, setup, q.Keys(0).Due, burst, func(int) int64 { return first })
	})
	if err != nil {
		return nil, err
	}
	bw, err := startWatch(ctx, setup, srv)
	if err != nil {
		return nil, err
	}
	drain, err := drainRun(ctx, q, burst, time.UnixMilli(due))
	if err != nil {
		return nil, err
	}
	burstSeen, err := bw.end(ctx, setup)
	if err != nil {
		return nil, err
	}
	calls, us, err := scriptStats(ctx, setup)
	if err != nil {
		return nil, err
	}
	add(fmt.Sprintf("burst_%dk_drain_s", burst/1000), fmt.Sprintf("burst of %d due at once: due to last ack (s)", burst), drain,
		row{Target: "≤ 1 s", Met: met(drain <= 1), Note: burstSeen})
	add("claim_us_burst", "claim script in the burst (µs a call)", us, row{
		Note: fmt.Sprintf("INFO commandstats: %d claims of up to %d jobs, %.1f µs each", calls, poller.DefaultBatch, us)})

	// (b) A steady rate falling due among the backlog.
	if err := setup.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	n := rate * secs
	first, err := ahead(ctx, setup, q.Keys(0).Due, func(first int64) (int64, error) {
		due := func(i int) int64 { return first + int64(i)*1000/int64(rate) }
		return due(n - 1), fillIDs(ctx, setup, q.Keys(0).Due, n, due)
	})
	if err != nil {
		return nil, err
	}
	cpu0, err := serverCPU(ctx, setup)
	if err != nil {
		return nil, err
	}
	w, err := startWatch(ctx, setup, srv)
	if err != nil {
		return nil, err
	}
	l, err := lagRun(ctx, q, n, first, secs)
	if err != nil {
		return nil, fmt.Errorf("lag at %d/s: %w", rate, err)
	}
	seen, err := w.end(ctx, setup)
	if err != nil {
		return nil, err
	}
	cpu1, err := serverCPU(ctx, setup)
	if err != nil {
		return nil, err
	}
	calls, us, err = scriptStats(ctx, setup)
	if err != nil {
		return nil, err
	}
	p50, p99, mx := l.summary()
	name := strconv.Itoa(rate/1000) + "k"
	add("lag_p50_ms_"+name, fmt.Sprintf("lag p50 at %d jobs/s (ms)", rate), p50, row{})
	add("lag_p99_ms_"+name, fmt.Sprintf("lag p99 at %d jobs/s (ms)", rate), p99, row{Target: "≤ 5 ms, none early", Met: met(p99 <= 5 && l.early == 0),
		Note: fmt.Sprintf("%d jobs over %d s among %d pending: p50 %.2f ms, p99 %.2f ms, max %.2f ms, handed over early: %d. %s",
			n, secs, b, p50, p99, mx, l.early, seen)})
	add("lag_max_ms_"+name, fmt.Sprintf("lag max at %d jobs/s (ms)", rate), mx, row{})
	add("claim_us_"+name, fmt.Sprintf("claim script at %d jobs/s (µs a call)", rate), us, row{
		Note: fmt.Sprintf("INFO commandstats: %d claims, %.1f jobs and %.1f µs each (wall time in the script: a busy machine's "+
			"preemptions count); INFO cpu: redis-server used %.1f µs of CPU a claim, its ack included",
			calls, float64(n)/float64(max(calls, 1)), us, (cpu1-cpu0)*1e6/float64(max(calls, 1)))})
	return figs, nil
}

// settleDict leaves the due set's hash table at its final size, with no
// rehash under way, as a backlog that grew over weeks has it. A sorted set
// is a skip list and a hash table; the table doubles when it is full and
// moves its entries to the new one a bucket per command on the set. At
// 10^7 the load's last doubling (at 2^23 members) leaves ~3.3 million of
// them to move when measuring starts, seconds later: every claim and every
// add then moves members written up to a minute earlier, scattered over
// 1.3 GB (the claim script cost ~94 µs a call instead of ~61, the burst
// 0.50 s instead of 0.36). In production the set grows by a few a second
// and such a rehash is a transient of one doubling, finished after as many
// commands as the table has buckets. COPY builds the copy's table at its
// full size at once (zsetDup), so the set is copied and the original
// unlinked (freed by Redis's lazyfree thread, waited for).
func settleDict(ctx context.Context, setup redis.UniversalClient, key string) error {
	tmp := key + ".settled"
	if err := setup.Copy(ctx, key, tmp, 0, true).Err(); err != nil {
		return fmt.Errorf("settle %s: %w", key, err)
	}
	if err := setup.Unlink(ctx, key).Err(); err != nil {
		return fmt.Errorf("settle %s: %w", key, err)
	}
	if err := setup.Rename(ctx, tmp, key).Err(); err != nil {
		return fmt.Errorf("settle %s: %w", key, err)
	}
	return waitLazyfree(ctx, setup)
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

// watch records, around a lag run, what else could have made its tail:
// Redis's latency monitor (events of 1 ms or more in the server: a slow
// command, a stall in its event loop), the time redis-server and the bench
// spent runnable but not running (another process had the core), the Go
// GC's pauses, and the load average.
type watch struct {
	srv           *server
	load          string
	gc            metrics.Float64Histogram
	redisQ, selfQ float64
}

func startWatch(ctx context.Context, rdb redis.UniversalClient, srv *server) (*watch, error) {
	p := rdb.Pipeline()
	p.ConfigSet(ctx, "latency-monitor-threshold", "1")
	p.Do(ctx, "LATENCY", "RESET")
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("latency monitor: %w", err)
	}
	return &watch{srv: srv, load: loadavg(), gc: gcPauses(),
		redisQ: runqueueMs(srv.cmd.Process.Pid), selfQ: runqueueMs(os.Getpid())}, nil
}

// end returns what was seen since startWatch, in words, and turns the
// latency monitor off again.
func (w *watch) end(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	redisQ, selfQ, load := runqueueMs(w.srv.cmd.Process.Pid)-w.redisQ, runqueueMs(os.Getpid())-w.selfQ, loadavg()
	pauses, longest := 0, 0.0
	for i, c := range gcPauses().Counts {
		if d := c - w.gc.Counts[i]; d > 0 && w.gc.Buckets[i] >= 1e-3 {
			pauses += int(d)
			longest = max(longest, w.gc.Buckets[i]*1000)
		}
	}
	latest, err := rdb.Do(ctx, "LATENCY", "LATEST").Slice()
	if err != nil {
		return "", fmt.Errorf("LATENCY LATEST: %w", err)
	}
	var events []string
	for _, e := range latest {
		// event, last time, last ms, max ms
		if ev, ok := e.([]any); ok && len(ev) >= 4 {
			hist, _ := rdb.Do(ctx, "LATENCY", "HISTORY", ev[0]).Slice()
			events = append(events, fmt.Sprintf("%v max %v ms (in %d s)", ev[0], ev[3], len(hist)))
		}
	}
	if err := rdb.ConfigSet(ctx, "latency-monitor-threshold", "0").Err(); err != nil {
		return "", err
	}
	redisSeen := "no event"
	if len(events) > 0 {
		slices.Sort(events)
		redisSeen = strings.Join(events, ", ")
	}
	return fmt.Sprintf("During it: Redis's latency monitor (events ≥ 1 ms): %s; runnable but not running (another process "+
		"held the core): redis-server %.0f ms, the bench's threads %.0f ms; Go GC pauses ≥ 1 ms: %d (longest ~%.1f ms); "+
		"load average %s before, %s after", redisSeen, redisQ, selfQ, pauses, longest, w.load, load), nil
}

// loadavg is the 1, 5 and 15 minute load averages ("?" if unknown).
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// runqueueMs is the time the threads of process pid have spent runnable
// but waiting for a core, from /proc/<pid>/task/*/schedstat (Linux; zero
// elsewhere).
func runqueueMs(pid int) float64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var total float64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseFloat(f[1], 64)
			total += ns / 1e6
		}
	}
	return total
}

// gcPauses is a copy of the Go runtime's histogram of GC pauses.
func gcPauses() metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/gc/pauses:seconds"}}
	metrics.Read(s)
	h := s[0].Value.Float64Histogram()
	return metrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: h.Buckets}
}
