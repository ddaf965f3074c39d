package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/apievent"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/seckill"
)

// benchHandler: purchases and withdrawal creates through the real handler,
// as functions/seckill and functions/enqueue run it (lambda.Start(router)):
// the API Gateway v2 event as JSON bytes into lambda.NewHandler(router),
// the router's decoding, routing, the service, Redis, and the response
// encoded to JSON; 50 concurrent callers, every purchase a new buyer (the JWT sub
// of the authorizer's claims), every create a new user and Idempotency-Key;
// against redis-benchmark's EVALSHA of `return 1` at the same concurrency.
// Then the handler's CPU and allocations per request, and the same of the
// service called directly (the store-level path, its baseline).
func benchHandler(ctx context.Context, rdb redis.UniversalClient, srv *server, rep *report, quick bool) error {
	const clients = 50
	users := 100_000
	if quick {
		users = 20_000
	}
	evalsha, err := evalshaBaseline(ctx, rdb, srv, 2*users, clients)
	if err != nil {
		return err
	}
	a, err := lambdaApp(rdb, srv)
	if err != nil {
		return err
	}
	// Stock for every purchase of the run and of the Go benchmarks after it.
	sale := seckill.Sale{ItemID: "bench-item", Stock: 10_000_000, EndsAt: time.Now().Add(time.Hour)}
	if _, err := a.Seckill.Preheat(ctx, sale); err != nil {
		return err
	}
	purchase := lambda.NewHandler(a.SeckillAPI())
	create := lambda.NewHandler(a.WithdrawalAPI())
	purchaseEvent := func(buf []byte, run string, i int64) []byte {
		id := run + strconv.FormatInt(i, 10)
		return apievent.Purchase(buf, "bench-item", "user-"+id, "req-"+id)
	}
	createEvent := func(buf []byte, run string, i int64) []byte {
		id := run + strconv.FormatInt(i, 10)
		return apievent.Create(buf, "user-"+id, "key-"+id, "req-"+id)
	}

	// As in the admission section, the callers run on one OS thread, so
	// that Redis keeps a core of its own on a 2-core machine.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p, err := concurrent(ctx, rdb, purchase, purchaseEvent, users, clients)
	if err != nil {
		return fmt.Errorf("purchases: %w", err)
	}
	c, err := concurrent(ctx, rdb, create, createEvent, users, clients)
	if err != nil {
		return fmt.Errorf("creates: %w", err)
	}
	// One caller, testing.Benchmark: allocations per request, and the CPU
	// of the whole process per request (so the go-redis client's too, not
	// redis-server's) beside the wall time, which includes the round trip.
	var buf []byte
	pb := serial(func(i int64) error {
		buf = purchaseEvent(buf[:0], "s", i)
		return invoke(ctx, purchase, buf)
	})
	cb := serial(func(i int64) error {
		buf = createEvent(buf[:0], "s", i)
		return invoke(ctx, create, buf)
	})
	// The service called directly, as the admission section does: what the
	// handler costs on top of it is the event, routing and JSON.
	sb := serial(func(i int64) error {
		_, err := a.Seckill.Purchase(ctx, "bench-item", "user-d"+strconv.FormatInt(i, 10), 1)
		return err
	})
	for _, r := range []benchRun{pb, cb, sb} {
		if r.err != nil {
			return r.err
		}
	}

	note := func(r loadRun, what string) string {
		return fmt.Sprintf("%d %s, %d clients on one OS thread: p50 %.2f ms, p99 %.2f ms; redis-server busy %.0f%% of one core, "+
			"this process %.0f%% (%.1f µs CPU a request)", r.n, what, clients, r.p50, r.p99, 100*r.redisBusy, 100*r.cpuUS*r.rate/1e6, r.cpuUS)
	}
	rep.add(row{Key: "handler_purchase_per_s", Figure: "purchases through the seckill handler, API Gateway v2 event JSON in and out, 50 clients (requests/s)",
		Value: p.rate, Baseline: "redis-benchmark EVALSHA of `return 1`, 50 clients (calls/s)", Base: evalsha,
		Target: "≥ 0.60 of the baseline", Met: met(p.rate/evalsha >= 0.6), Note: note(p, "purchases, each a new buyer")})
	rep.add(row{Key: "handler_purchase_ratio_vs_evalsha", Figure: "handler purchases / EVALSHA rate", Value: p.rate / evalsha,
		Target: "≥ 0.60", Met: met(p.rate/evalsha >= 0.6)})
	rep.add(row{Key: "handler_purchase_p99_ms", Figure: "handler purchase latency p99, 50 clients (ms)", Value: p.p99})
	rep.add(row{Key: "handler_purchase_cpu_us", Figure: "bench process CPU per purchase, 50 clients (µs; go-redis client included, redis-server not)",
		Value: p.cpuUS})
	rep.add(row{Key: "handler_purchase_serial_cpu_us", Figure: "process CPU per purchase, one caller, testing.Benchmark (µs; go-redis included)",
		Value: pb.cpuUS, Baseline: "seckill.Service.Purchase called directly, same measure (µs)", Base: sb.cpuUS,
		Note: fmt.Sprintf("%d requests; wall %.1f µs a request with the Redis round trip; the direct call: %.1f µs wall, %.0f allocs, %.0f B",
			pb.n, pb.wallUS, sb.wallUS, sb.allocs, sb.bytes)})
	rep.add(row{Key: "handler_purchase_allocs", Figure: "allocations per purchase through the handler (testing.Benchmark)", Value: pb.allocs,
		Baseline: "seckill.Service.Purchase called directly", Base: sb.allocs})
	rep.add(row{Key: "handler_purchase_bytes", Figure: "bytes allocated per purchase through the handler (testing.Benchmark)", Value: pb.bytes,
		Baseline: "seckill.Service.Purchase called directly", Base: sb.bytes})
	rep.add(row{Key: "handler_create_per_s", Figure: "withdrawal creates through the enqueue handler, 50 clients (requests/s)",
		Value: c.rate, Baseline: "redis-benchmark EVALSHA of `return 1`, 50 clients (calls/s)", Base: evalsha,
		Note: note(c, "creates, each a new user and Idempotency-Key")})
	rep.add(row{Key: "handler_create_ratio_vs_evalsha", Figure: "handler creates / EVALSHA rate", Value: c.rate / evalsha})
	rep.add(row{Key: "handler_create_p99_ms", Figure: "handler create latency p99, 50 clients (ms)", Value: c.p99})
	rep.add(row{Key: "handler_create_cpu_us", Figure: "bench process CPU per create, 50 clients (µs; go-redis client included, redis-server not)",
		Value: c.cpuUS})
	rep.add(row{Key: "handler_create_serial_cpu_us", Figure: "process CPU per create, one caller, testing.Benchmark (µs; go-redis included)",
		Value: cb.cpuUS, Note: fmt.Sprintf("%d requests; wall %.1f µs a request with the Redis round trips", cb.n, cb.wallUS)})
	rep.add(row{Key: "handler_create_allocs", Figure: "allocations per create through the handler (testing.Benchmark)", Value: cb.allocs})
	rep.add(row{Key: "handler_create_bytes", Figure: "bytes allocated per create through the handler (testing.Benchmark)", Value: cb.bytes})
	return nil
}

// lambdaApp is the App a Lambda function builds (config.Lambda: jwt auth,
// JSON logs at info, here to io.Discard) on the benchmark's client, with
// the rate limits off (each is a Redis round trip of its own) and room in
// the order backlog for every purchase.
func lambdaApp(rdb redis.UniversalClient, srv *server) (*app.App, error) {
	// No consumer makes the orders here: the backlog must hold them all.
	vars := map[string]string{"REDIS_URL": "redis://" + srv.addr, "HOURGLASS_AUTH": "jwt", "HOURGLASS_ORDER_BACKLOG": "10000000"}
	for _, k := range []string{"HOURGLASS_RATE_PURCHASE_USER", "HOURGLASS_RATE_PURCHASE_SOURCE",
		"HOURGLASS_RATE_WITHDRAWAL_USER", "HOURGLASS_RATE_WITHDRAWAL_SOURCE"} {
		vars[k] = "off"
	}
	for k, v := range vars {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	cfg, err := config.Load(config.Lambda)
	if err != nil {
		return nil, err
	}
	return app.New(cfg, app.NewLogger(io.Discard, cfg.SlogLevel()), rdb)
}

var accepted = []byte(`{"statusCode":202,`)

func invoke(ctx context.Context, h lambda.Handler, payload []byte) error {
	out, err := h.Invoke(ctx, payload)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(out, accepted) {
		return fmt.Errorf("not accepted: %.300s", out)
	}
	return nil
}

type loadRun struct {
	n              int
	rate, p50, p99 float64
	cpuUS          float64 // this process's CPU per request
	redisBusy      float64 // share of one core
}

// concurrent sends n requests from clients callers and measures them.
func concurrent(ctx context.Context, rdb redis.UniversalClient, h lambda.Handler,
	event func([]byte, string, int64) []byte, n, clients int) (loadRun, error) {
	var (
		next   atomic.Int64
		failed atomic.Pointer[error]
		wg     sync.WaitGroup
		mu     sync.Mutex
		lat    = make([]float64, 0, n)
	)
	redis0, err := serverCPU(ctx, rdb)
	if err != nil {
		return loadRun{}, err
	}
	cpu0 := processCPU()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			mine := make([]float64, 0, n/clients+1)
			var buf []byte
			for {
				i := next.Add(1)
				if i > int64(n) || failed.Load() != nil {
					break
				}
				buf = event(buf[:0], "c", i)
				t0 := time.Now()
				if err := invoke(ctx, h, buf); err != nil {
					failed.Store(&err)
				}
				mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	if e := failed.Load(); e != nil {
		return loadRun{}, *e
	}
	redis1, err := serverCPU(ctx, rdb)
	if err != nil {
		return loadRun{}, err
	}
	slices.Sort(lat)
	return loadRun{n: n, rate: float64(n) / elapsed.Seconds(), p50: percentile(lat, 50), p99: percentile(lat, 99),
		cpuUS: float64(cpu.Microseconds()) / float64(n), redisBusy: (redis1 - redis0) / elapsed.Seconds()}, nil
}

type benchRun struct {
	n             int
	wallUS, cpuUS float64
	allocs, bytes float64
	err           error
}

// serial runs f under testing.Benchmark, one caller, with the CPU time of
// the process per call as a metric of its own.
func serial(f func(i int64) error) benchRun {
	var failed error
	var i atomic.Int64
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			if err := f(i.Add(1)); err != nil {
				failed = err
				b.FailNow()
			}
		}
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	return benchRun{n: res.N, wallUS: float64(res.NsPerOp()) / 1000, cpuUS: res.Extra["cpu-µs/op"],
		allocs: float64(res.AllocsPerOp()), bytes: float64(res.AllocedBytesPerOp()), err: failed}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
