package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/rie"
	"github.com/hourglass/hourglass/internal/sqsfake"
)

// pollerNeed is what the poller measurably needs: its bootstrap's peak
// memory and CPU, idle and per job claimed and handed to SQS.
type pollerNeed struct {
	peakRSS     int64   // bytes
	idleCPUPerS float64 // CPU seconds per second of the loop with nothing due
	cpuPerJobUS float64
	jobs        int
	loopSeconds float64
}

// capacity is the jobs a second a poller of memoryMB can claim and hand
// over with the CPU share Lambda gives it, after its idle loop's own use.
func (n pollerNeed) capacity(memoryMB float64) float64 {
	if n.cpuPerJobUS <= 0 {
		return 0
	}
	return (memoryMB/float64(mbPerVCPU) - n.idleCPUPerS) * 1e6 / n.cpuPerJobUS
}

// measurePoller runs the poller's bootstrap under the Lambda runtime
// interface emulator as EventBridge starts it, on the benchmark's Redis and
// an SQS stand-in: once idle, then with jobs withdrawals due, and reads the
// process's CPU time and peak memory from /proc.
func measurePoller(ctx context.Context, h *harness, rdb redis.UniversalClient, srv *server, jobs int) (pollerNeed, error) {
	var need pollerNeed
	boot := filepath.Join(*bootstraps, "poller", "bootstrap")
	if _, err := os.Stat(boot); err != nil {
		return need, fmt.Errorf("poller: %w (make bench builds it)", err)
	}
	event, err := os.ReadFile("events/poller-scheduled.json")
	if err != nil {
		return need, err
	}
	sqs := sqsfake.New(h)
	const timeout, margin = 8 * time.Second, 2 * time.Second
	// As deployed, with the work queue on the SQS stand-in (os/exec keeps
	// the last value of a variable set twice).
	env := append(functionEnv(h, srv), "AWS_ENDPOINT_URL_SQS="+sqs.URL,
		"WORK_QUEUE_URL="+sqsfake.QueueURL, "HOURGLASS_POLLER_MARGIN="+margin.String())
	f, err := rie.Start("poller", rie.Options{Emulator: *emulator, Bootstrap: boot, Env: env, Timeout: timeout})
	if err != nil {
		return need, err
	}
	defer f.Stop()
	invoke := func() (rie.Usage, time.Duration, error) {
		start := time.Now()
		if _, err := f.Invoke(ctx, event); err != nil {
			return rie.Usage{}, 0, fmt.Errorf("poller: %w\n%s", err, f.Log())
		}
		took := time.Since(start)
		u, err := f.Usage()
		return u, took, err
	}
	// The first run carries the cold start; the second is the idle loop.
	u0, _, err := invoke()
	if err != nil {
		return need, err
	}
	u1, idle, err := invoke()
	if err != nil {
		return need, err
	}
	need.idleCPUPerS = (u1.CPU - u0.CPU).Seconds() / idle.Seconds()
	if err := createWithdrawals(ctx, rdb, jobs, func(u int64) string { return "poller-" + strconv.FormatInt(u, 10) }, 0); err != nil {
		return need, err
	}
	before := sqs.Calls.Load()
	u2, busy, err := invoke()
	if err != nil {
		return need, err
	}
	for _, r := range sqs.Requests() {
		need.jobs += len(r.Entries)
	}
	if need.jobs < jobs {
		return need, fmt.Errorf("poller: handed %d of %d due jobs to SQS in one run (%d calls)", need.jobs, jobs, sqs.Calls.Load()-before)
	}
	work := (u2.CPU - u1.CPU).Seconds() - need.idleCPUPerS*busy.Seconds()
	need.cpuPerJobUS = work * 1e6 / float64(need.jobs)
	need.peakRSS = max(u0.PeakRSS, u1.PeakRSS, u2.PeakRSS)
	need.loopSeconds = idle.Seconds()
	return need, nil
}

// reportPoller adds the poller's rows and returns a phrase for the cost
// table's notes.
func reportPoller(rep *report, need pollerNeed, profiles []costProfile) {
	rep.add(row{Key: "poller_peak_rss_mib", Figure: "poller: peak resident memory of its bootstrap under the emulator (MiB)",
		Value: float64(need.peakRSS) / (1 << 20),
		Note:  fmt.Sprintf("cold start, an idle run and a run handing %d due withdrawals to SQS; Lambda's least memory is 128 MB", need.jobs)})
	rep.add(row{Key: "poller_idle_cpu_ms_per_s", Figure: "poller: CPU of its loop with nothing due (ms a second)",
		Value: need.idleCPUPerS * 1000, Note: fmt.Sprintf("a %.1f s run; x86_64 here, Lambda runs arm64", need.loopSeconds)})
	rep.add(row{Key: "poller_cpu_us_per_job", Figure: "poller: CPU per job claimed and sent to SQS (µs)", Value: need.cpuPerJobUS,
		Note: fmt.Sprintf("%d jobs in one run, the idle loop's CPU taken off", need.jobs)})
	for _, p := range profiles {
		rep.add(row{Key: "poller_capacity_jobs_per_s_" + p.Name,
			Figure: fmt.Sprintf("poller: jobs a second one run can hand over at the %s profile's %.0f MB (%.3f vCPU)", p.Name, p.PollerMemoryMB, p.PollerMemoryMB/float64(mbPerVCPU)),
			Value:  need.capacity(p.PollerMemoryMB),
			Note:   "the CPU share Lambda gives the memory, less the idle loop's, over the CPU per job: Redis and SQS round trips overlap in batches"})
	}
}
