package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/rie"
)

// The functions' memory as infra/functions.go configures it, and the share
// of a vCPU Lambda gives a function: memory/1769 MB (one full vCPU at
// 1,769 MB).
const (
	seckillMemoryMB = 1024
	enqueueMemoryMB = 512
	mbPerVCPU       = 1769
)

// A phase of the handler section measures a few parties side by side: the
// service called in this process and the functions under the emulator.
// They take turns in rounds of a block each, so that a machine shared
// with other work loads them alike.

// party is one side of a phase: step serves n requests and returns the
// CPU (and the wall time) they took.
type party struct {
	name string
	step func(n int) (cpu, wall time.Duration, err error)
	n    int
	cpu  time.Duration
	wall time.Duration
}

func (p *party) cpuUS() float64  { return float64(p.cpu.Microseconds()) / float64(p.n) }
func (p *party) wallUS() float64 { return float64(p.wall.Microseconds()) / float64(p.n) }

// takeTurns runs rounds of a block of perRound requests from each party.
func takeTurns(parties []*party, rounds, perRound int) error {
	for range rounds {
		for _, p := range parties {
			cpu, wall, err := p.step(perRound)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			p.n += perRound
			p.cpu += cpu
			p.wall += wall
		}
	}
	return nil
}

// inProcess is a party that calls f in this process: its CPU is the
// process's (getrusage), the go-redis client's included.
func inProcess(name string, f func(i int64) error) *party {
	var next atomic.Int64
	return &party{name: name, step: func(n int) (time.Duration, time.Duration, error) {
		cpu0, t0 := processCPU(), time.Now()
		for range n {
			if err := f(next.Add(1)); err != nil {
				return 0, 0, err
			}
		}
		return processCPU() - cpu0, time.Since(t0), nil
	}}
}

// function is a function's bootstrap under the emulator.
type function struct {
	f        *rie.Function
	pid      int
	reports0 int
	send     func(i int64) error
}

// startFunction starts boot under the emulator with env and warms it with
// warm requests; event builds request i, every answer must be a 202.
func startFunction(ctx context.Context, h *harness, name, boot string, env []string,
	event func(buf []byte, i int64) []byte, warm int) (*function, error) {
	f, err := rie.Start(name, rie.Options{Emulator: *emulator, Bootstrap: boot, Env: env, Timeout: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	h.Cleanup(f.Stop)
	var buf []byte
	fn := &function{f: f}
	fn.send = func(i int64) error {
		buf = event(buf[:0], i)
		out, err := f.Invoke(ctx, buf)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, tail(f.Log(), 2000))
		}
		if !bytes.HasPrefix(out, accepted) {
			return fmt.Errorf("not accepted: %.300s", out)
		}
		return nil
	}
	for i := range warm {
		if err := fn.send(int64(-1 - i)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if fn.pid, err = f.Bootstrap(); err != nil {
		return nil, err
	}
	fn.reports0 = len(f.Reports())
	return fn, nil
}

// party is the function as a party: its CPU is the bootstrap's (user +
// system, all its threads, from /proc): the handler, go-redis, the logs
// and metrics, and the runtime client's calls to the Runtime API.
func (fn *function) party(name string) *party {
	var next atomic.Int64
	return &party{name: name, step: func(n int) (time.Duration, time.Duration, error) {
		cpu0, err := pidCPU(fn.pid)
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		for range n {
			if err := fn.send(next.Add(1)); err != nil {
				return 0, 0, err
			}
		}
		wall := time.Since(t0)
		cpu1, err := pidCPU(fn.pid)
		return cpu1 - cpu0, wall, err
	}}
}

// durations are the emulator's REPORT durations (ms) since the warm-up:
// mean, p50, p99.
func (fn *function) durations(n int) (mean, p50, p99 float64) {
	var reps []rie.Report
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) { // each follows its answer by a moment
		if reps = fn.f.Reports(); len(reps) >= fn.reports0+n || time.Now().After(deadline) {
			break
		}
	}
	durs := make([]float64, 0, n)
	for _, r := range reps[fn.reports0:] {
		durs = append(durs, float64(r.Duration.Microseconds())/1000)
	}
	if len(durs) == 0 {
		return 0, 0, 0
	}
	var sum float64
	for _, d := range durs {
		sum += d
	}
	slices.Sort(durs)
	return sum / float64(len(durs)), percentile(durs, 50), percentile(durs, 99)
}

// redisCost is what Redis spent on the requests of a phase: the
// commandstats time of the commands the clients sent (scripts with what
// they ran) and redis-server's CPU (INFO cpu), per request.
type redisCost struct {
	cmdUS, cpuUS float64
	note         string
}

// measureRedis resets Redis's statistics, runs f, which sends n requests,
// and returns their cost; top has recorded the commands the client sends.
func measureRedis(ctx context.Context, rdb redis.UniversalClient, top *topLevel, f func() (n int, err error)) (redisCost, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return redisCost{}, err
	}
	cpu0, err := serverCPU(ctx, rdb)
	if err != nil {
		return redisCost{}, err
	}
	n, err := f()
	if err != nil {
		return redisCost{}, err
	}
	cpu1, err := serverCPU(ctx, rdb)
	if err != nil {
		return redisCost{}, err
	}
	stats, err := commandStats(ctx, rdb)
	if err != nil {
		return redisCost{}, err
	}
	cmdUS, note := topLevelStats(stats, top.seen(), n)
	return redisCost{cmdUS: cmdUS, cpuUS: (cpu1 - cpu0) * 1e6 / float64(n), note: note}, nil
}

// buildEmptyFn builds bench/emptyfn for this machine, as make bench builds
// the functions, into a directory of h's and returns the bootstrap's path.
func buildEmptyFn(h *harness) (string, error) {
	dir, err := os.MkdirTemp("", "hourglass-emptyfn")
	if err != nil {
		return "", err
	}
	h.Cleanup(func() { _ = os.RemoveAll(dir) })
	boot := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "lambda.norpc", "-ldflags=-s -w -buildid=", "-o", boot, "./bench/emptyfn")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build bench/emptyfn: %w\n%s", err, out)
	}
	return boot, nil
}

// topLevelStats sums the commandstats time of the commands in top (those
// the client sends: a script's commands are counted inside its time as
// well as on their own lines since Redis 7) per request, and spells each
// out: calls per request and µs per call.
func topLevelStats(stats map[string]cmdStat, top map[string]bool, n int) (float64, string) {
	names := make([]string, 0, len(stats))
	for name, st := range stats {
		if st.calls > 0 && !adminCommand(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var total float64
	parts := make([]string, 0, len(names))
	for _, name := range names {
		st := stats[name]
		inside := ""
		if top[name] {
			total += st.usec
		} else {
			inside = " (inside a script)"
		}
		parts = append(parts, fmt.Sprintf("%s %.2f× %.2f µs%s", name, float64(st.calls)/float64(n), st.perCall(), inside))
	}
	return total / float64(n), strings.Join(parts, ", ")
}

// topLevel records the names of the commands a client sends while on:
// INFO commandstats counts a script's commands on their own lines too, and
// only the client knows which commands were its own.
type topLevel struct {
	on    atomic.Bool
	mu    sync.Mutex
	names map[string]bool
}

func (t *topLevel) record(cmds ...redis.Cmder) {
	if !t.on.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.names == nil {
		t.names = map[string]bool{}
	}
	for _, c := range cmds {
		t.names[c.Name()] = true
	}
}

// seen returns the names recorded so far.
func (t *topLevel) seen() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{"eval": true} // go-redis's fallback on NOSCRIPT
	for k := range t.names {
		out[k] = true
	}
	return out
}

func (t *topLevel) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *topLevel) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.record(cmd)
		return next(ctx, cmd)
	}
}

func (t *topLevel) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.record(cmds...)
		return next(ctx, cmds)
	}
}

// pidCPU is the CPU time (user + system, every thread) process pid has
// used: callers measure thousands of requests, as /proc counts in 10 ms.
func pidCPU(pid int) (time.Duration, error) {
	u, err := rie.ProcessUsage(pid)
	return u.CPU, err
}

// billedMS is the modelled billed duration of one invoke at memoryMB: the
// CPU the function spent, stretched by the share of a vCPU Lambda gives
// that memory, plus the time it waited on Redis, rounded up to Lambda's
// 1 ms billing unit. It returns the unrounded duration too.
func billedMS(cpuUS, waitUS float64, memoryMB int) (billed, modelled float64) {
	modelled = (cpuUS/(float64(memoryMB)/mbPerVCPU) + waitUS) / 1000
	return math.Max(1, math.Ceil(modelled)), modelled
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// evalshaOneClient is what Redis spends on redis-benchmark's EVALSHA of
// `return 1` from one client, n calls: commandstats µs per call and the
// server's CPU per call. The baseline of the Redis figures of requests sent
// one at a time (a Lambda container sends one request's commands at a time).
func evalshaOneClient(ctx context.Context, rdb redis.UniversalClient, srv *server, n int) (cmdUS, cpuUS float64, err error) {
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return 0, 0, err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return 0, 0, err
	}
	cpu0, err := serverCPU(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	if _, err := redisBenchmark(srv, "-q", "-n", strconv.Itoa(n), "-c", "1", "EVALSHA", sha, "0"); err != nil {
		return 0, 0, err
	}
	cpu1, err := serverCPU(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	stats, err := commandStats(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	return stats["evalsha"].perCall(), (cpu1 - cpu0) * 1e6 / float64(n), nil
}
