// Command bench measures every performance target of SPEC.md against its
// baseline, in one run on this machine, with its own redis-server: `make
// bench`. It prints a table and writes bench/results.json and
// bench/results.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/redisconn"
)

// row is one figure of the report.
type row struct {
	Key      string  // results.json key, with its unit
	Figure   string  // what was measured
	Value    float64 // the measurement
	Baseline string  // what it is compared with
	Base     float64 // the baseline's value (0: none measured)
	Target   string  // SPEC.md's target, in words
	Met      *bool   // nil: no target
	Note     string
}

type report struct {
	rows  []row
	facts map[string]string
	// extra are markdown sections printed after the figures.
	extra []string
}

func (r *report) add(x row) {
	r.rows = append(r.rows, x)
	fmt.Fprintf(os.Stderr, "  %-34s %12.2f  %s\n", x.Key, x.Value, x.Note)
}

func met(ok bool) *bool { return &ok }

func main() {
	out := flag.String("out", "bench", "directory of results.json and results.md")
	quick := flag.Bool("quick", false, "smaller runs, for a smoke test (figures are not comparable)")
	skip := flag.String("skip", "", "comma-separated sections to skip: queue,lag,burst,backlog,admit,handler,memory,lambda,cost,capacity")
	cpuprofile := flag.String("cpuprofile", "", "write the benchmark's Go CPU profile to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	redis.SetLogger(quietRedis{})

	srv, err := startRedis()
	if err != nil {
		fail(err)
	}
	defer srv.stop()
	atFail = srv.stop // os.Exit runs no defer: a failed run must not leave a 1.3 GB redis-server behind
	// The client the functions use (RESP2, short timeouts), with a pool for
	// the benchmark's 50 concurrent clients.
	rdb, err := redisconn.New("redis://"+srv.addr, redisconn.Options{PoolSize: 128})
	if err != nil {
		fail(err)
	}
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()

	rep := &report{facts: machineFacts(ctx, rdb)}
	skipped := map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		skipped[strings.TrimSpace(s)] = true
	}
	sections := []struct {
		name string
		run  func(context.Context, redis.UniversalClient, *server, *report, bool) error
	}{
		{"queue", benchQueue}, {"lag", benchLag}, {"burst", benchBurst}, {"backlog", benchBacklog},
		{"admit", benchAdmission}, {"handler", benchHandler}, {"memory", benchMemory}, {"lambda", benchLambda}, {"capacity", benchCapacity},
		{"cost", benchCost},
	}
	start := time.Now()
	for _, s := range sections {
		if skipped[s.name] {
			continue
		}
		fmt.Fprintf(os.Stderr, "%s:\n", s.name)
		if err := flushAndWait(ctx, rdb); err != nil {
			fail(err)
		}
		if err := s.run(ctx, rdb, srv, rep, *quick); err != nil {
			fail(fmt.Errorf("%s: %w", s.name, err))
		}
	}
	rep.facts["duration"] = time.Since(start).Round(time.Second).String()
	if err := rep.write(*out); err != nil {
		fail(err)
	}
	fmt.Print(rep.markdown())
}

// atFail stops what fail would otherwise leave running.
var atFail = func() {}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	atFail()
	os.Exit(1)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func machineFacts(ctx context.Context, rdb redis.UniversalClient) map[string]string {
	facts := map[string]string{
		"date":  time.Now().UTC().Format(time.RFC3339),
		"go":    runtime.Version(),
		"os":    runtime.GOOS + "/" + runtime.GOARCH,
		"cores": fmt.Sprint(runtime.NumCPU()),
		"loadavg": func() string {
			b, _ := os.ReadFile("/proc/loadavg")
			return strings.TrimSpace(string(b))
		}(),
	}
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				facts["redis"] = v
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				facts["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return facts
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	values := map[string]any{}
	for _, x := range r.rows {
		values[x.Key] = x.Value
	}
	js, _ := json.MarshalIndent(map[string]any{"machine": r.facts, "results": values}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644)
}

func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString("# Benchmark results\n\n")
	b.WriteString("Written by `make bench` (bench/main.go); every baseline was measured in the same run, on the same machine and Redis.\n\n")
	b.WriteString("| machine | |\n| --- | --- |\n")
	for _, k := range []string{"date", "cpu", "cores", "os", "go", "redis", "loadavg", "duration"} {
		fmt.Fprintf(&b, "| %s | %s |\n", k, r.facts[k])
	}
	b.WriteString("\n| figure | value | baseline | ratio | target | met |\n| --- | ---: | --- | ---: | --- | --- |\n")
	for _, x := range r.rows {
		ratio, base := "", x.Baseline
		if x.Base > 0 {
			ratio = fmt.Sprintf("%.2f", x.Value/x.Base)
			base = fmt.Sprintf("%s: %s", x.Baseline, num(x.Base))
		}
		m := ""
		if x.Met != nil {
			m = map[bool]string{true: "yes", false: "**no**"}[*x.Met]
		}
		fmt.Fprintf(&b, "| %s (`%s`) | %s | %s | %s | %s | %s |\n", x.Figure, x.Key, num(x.Value), base, ratio, x.Target, m)
	}
	notes := false
	for _, x := range r.rows {
		if x.Note != "" {
			if !notes {
				b.WriteString("\nNotes:\n\n")
				notes = true
			}
			fmt.Fprintf(&b, "- `%s`: %s\n", x.Key, x.Note)
		}
	}
	for _, e := range r.extra {
		b.WriteString(e)
	}
	return b.String()
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// redisBenchmark runs redis-benchmark against the server and returns its
// requests per second.
func redisBenchmark(srv *server, args ...string) (float64, error) {
	full := append([]string{"-h", "127.0.0.1", "-p", srv.port, "--csv"}, args...)
	out, err := exec.Command("redis-benchmark", full...).Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark %v: %w", args, err)
	}
	// CSV: "test","rps","avg_latency_ms",... ; the last line holds the figures.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fields := strings.Split(lines[len(lines)-1], ",")
	if len(fields) < 2 {
		return 0, fmt.Errorf("redis-benchmark: unexpected output %q", out)
	}
	var rps float64
	if _, err := fmt.Sscanf(strings.Trim(fields[1], `"`), "%f", &rps); err != nil {
		return 0, fmt.Errorf("redis-benchmark: %q: %w", fields[1], err)
	}
	return rps, nil
}
