package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/history"
	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// hourglassPkg is the program the runs drive.
const hourglassPkg = "github.com/hourglass/hourglass/cmd/hourglass"

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	os.Exit(code)
}

// serveProc is one `hourglass serve` process.
type serveProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// serve starts `hourglass serve` on addr with env, logging to log, and
// waits until it answers /healthz (200, or 503 while Redis is away).
func serve(t *testing.T, addr string, env map[string]string, log *os.File) *serveProc {
	t.Helper()
	cmd := exec.Command(proctest.Build(t, hourglassPkg), "serve")
	cmd.Env = append(os.Environ(), "HOURGLASS_ADDR="+addr)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(p.kill)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			_ = resp.Body.Close()
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("serve exited at start; see %s", log.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("serve did not answer within 30s")
	return nil
}

// kill ends the process with SIGKILL, as a crash would, and reaps it.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// serveRun is a scenario on `hourglass serve` against its own redis-server,
// fake provider and finance.
type serveRun struct {
	*load
	addr  string
	env   map[string]string
	log   *os.File
	redis *redistest.Server
}

func newServeRun(t *testing.T, name string, redis *redistest.Server, extra map[string]string) *serveRun {
	t.Helper()
	proctest.Build(t, hourglassPkg) // build before the clock starts
	provider := fakes.NewProvider(t, "pay-secret")
	provider.Decide(refuseRejects(nil))
	finance := fakes.NewFinance(t, "fin-secret")
	env := map[string]string{
		"REDIS_URL": redis.URL(), "PAYOUT_URL": provider.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": finance.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
		"HOURGLASS_LEASE": "2s", "HOURGLASS_VISIBILITY_TIMEOUT": "300ms", "PAYOUT_TIMEOUT": "1s",
		"HOURGLASS_POLL_INTERVAL": "100ms", "HOURGLASS_RETRY_BASE": "100ms", "HOURGLASS_RETRY_CAP": "400ms",
		"HOURGLASS_MAX_ATTEMPTS": "8", "HOURGLASS_LOG_LEVEL": "warn",
		// Every time is compressed, the reconciler's too: a job that failed
		// each of its deliveries while Redis cut every connection (so
		// moved to the dead set) is given back within the run's settling
		// window (in production the 2 m default does it within minutes).
		"HOURGLASS_RECONCILE_INTERVAL": "5s",
		// Every command serve sends passes the ElastiCache Serverless guard.
		"HOURGLASS_REDIS_COMMANDS": redistest.ServerlessCommands,
	}
	for k, v := range extra {
		env[k] = v
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			if len(out) > 6000 {
				out = out[len(out)-6000:]
			}
			t.Logf("serve log (tail):\n%s", out)
		}
	})
	redistest.AssertNoRefusals(t, log.Name())
	addr := proctest.FreeAddr(t)
	return &serveRun{load: newLoad(t, name, newHTTPAPI(addr), provider, finance), addr: addr, env: env, log: log, redis: redis}
}

func (r *serveRun) start() *serveProc { return serve(r.t, r.addr, r.env, r.log) }

// TestFaultServeKilled kills `hourglass serve` (poller and consumer in one
// process) with SIGKILL four times during a load run, each time while jobs
// are claimed and not acked, and restarts it.
func TestFaultServeKilled(t *testing.T) {
	faultRun(t)
	redis := redistest.Start(t)
	r := newServeRun(t, "serve SIGKILL", redis, nil)
	r.provider.Slow(40 * time.Millisecond) // payouts take a while, so claims are in flight
	proc := r.start()
	inflight := delayq.KeysOf("hg:", withdrawal.QueueName, 0).Inflight
	rdb := redis.Client(t)

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.run(ctx); close(loaded) }()
	kills, claimedAtKills := 0, int64(0)
	for range 4 {
		time.Sleep(2500 * time.Millisecond)
		// Kill between claim and ack: wait for claimed, unacked jobs.
		var n int64
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if n = rdb.ZCard(context.Background(), inflight).Val(); n > 0 {
				break
			}
		}
		proc.kill()
		kills++
		claimedAtKills += n
		t.Logf("kill %d at %s: %d jobs claimed and not acked, %d paid so far", kills,
			time.Since(began).Round(100*time.Millisecond), n, r.provider.Paid())
		time.Sleep(300 * time.Millisecond) // down for a moment: requests meanwhile get no answer
		proc = r.start()
	}
	time.Sleep(time.Second)
	stop()
	<-loaded
	finals := r.settle(90 * time.Second)
	rep := r.check(finals, history.Options{MaxAttempts: 8, LateAfter: 1500 * time.Millisecond})
	t.Logf("%s: %d kills with %d claimed-unacked jobs in all; run took %s", r.name, kills, claimedAtKills, time.Since(began).Round(100*time.Millisecond))
	if claimedAtKills == 0 {
		t.Errorf("no kill hit a claimed, unacked job: the run proved nothing")
	}
	_ = rep
}

// TestFaultRedisKilledWithAOF kills the redis-server (appendonly yes, fsync
// every write) twice during a load run and restarts it from its AOF; the
// API answers 503 meanwhile and `hourglass serve` reconnects by itself.
func TestFaultRedisKilledWithAOF(t *testing.T) {
	faultRun(t)
	redis := redistest.Start(t, redistest.WithAOF())
	r := newServeRun(t, "redis SIGKILL (AOF)", redis, nil)
	r.provider.Slow(20 * time.Millisecond)
	r.start()

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.run(ctx); close(loaded) }()
	for i := range 2 {
		time.Sleep(3 * time.Second)
		redis.Kill()
		acked := len(r.h.Acknowledged())
		time.Sleep(time.Second)
		redis.Restart()
		t.Logf("redis kill %d at %s with %d acknowledged; restarted after 1s", i+1, time.Since(began).Round(100*time.Millisecond), acked)
	}
	time.Sleep(2 * time.Second)
	stop()
	<-loaded
	finals := r.settle(90 * time.Second)
	r.check(finals, history.Options{MaxAttempts: 8, LateAfter: 1500 * time.Millisecond})
	t.Logf("%s: run took %s", r.name, time.Since(began).Round(100*time.Millisecond))
}

// TestFaultProviderTimeoutsAnd5xx runs a load against a provider that
// answers many first calls with 503, 500 or 429, or pays but answers after
// the client's timeout (PAYOUT_TIMEOUT), and some second calls with 503;
// destinations marked for refusal get 400 and must end failed.
func TestFaultProviderTimeoutsAnd5xx(t *testing.T) {
	faultRun(t)
	redis := redistest.Start(t)
	r := newServeRun(t, "provider timeouts and 5xx", redis, map[string]string{
		"PAYOUT_TIMEOUT": "300ms", "HOURGLASS_RETRY_BASE": "50ms", "HOURGLASS_RETRY_CAP": "200ms", "HOURGLASS_MAX_ATTEMPTS": "6",
	})
	var timeouts, errors5xx, throttled sync.Map
	r.provider.Decide(refuseRejects(func(key string, _ fakes.Payout, n int) (int, time.Duration) {
		p := pct(key + "/" + fmt.Sprint(n))
		switch {
		case n == 1 && p < 20, n == 2 && p < 15:
			errors5xx.Store(key+fmt.Sprint(n), true)
			return http.StatusServiceUnavailable, 0
		case n == 1 && p < 30:
			errors5xx.Store(key+fmt.Sprint(n), true)
			return http.StatusInternalServerError, 0
		case n == 1 && p < 38:
			throttled.Store(key, true)
			return http.StatusTooManyRequests, 0
		case n <= 2 && p < 55:
			// Paid, but the answer comes after the client gave up.
			timeouts.Store(key+fmt.Sprint(n), true)
			return http.StatusOK, 700 * time.Millisecond
		}
		return http.StatusOK, 0
	}))
	r.start()
	began := time.Now()
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	r.run(ctx)
	stop()
	finals := r.settle(90 * time.Second)
	rep := r.check(finals, history.Options{MaxAttempts: 6, LateAfter: 1500 * time.Millisecond})
	t.Logf("%s: %d 5xx, %d 429, %d slow answers past the timeout; run took %s", r.name,
		count(&errors5xx), count(&throttled), count(&timeouts), time.Since(began).Round(100*time.Millisecond))
	// A call that timed out after paying is settled by the provider's
	// lookup (no second call) or, when the lookup told nothing, by a repeat
	// under the same key.
	lookups := r.provider.Lookups()
	t.Logf("%s: %d lookups settled or asked about unknown outcomes", r.name, lookups)
	if rep.Recovered == 0 || rep.SameKeyAfterPaid+lookups == 0 {
		t.Errorf("%s: recovered %d, repeats after a payout %d, lookups %d: the faults did not bite", r.name,
			rep.Recovered, rep.SameKeyAfterPaid, lookups)
	}
}

func count(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestFaultProviderPaysButAnswersLate: a provider without a status lookup
// (PAYOUT_LOOKUP=false) that pays every call but, for a while, answers each
// only after PAYOUT_TIMEOUT. Every attempt then times out: its outcome is
// unknown, so however many attempts pass (well beyond
// HOURGLASS_MAX_ATTEMPTS) no withdrawal is failed and finance is told
// nothing; once the provider answers in time, each is paid, once.
func TestFaultProviderPaysButAnswersLate(t *testing.T) {
	faultRun(t)
	redis := redistest.Start(t)
	r := newServeRun(t, "provider pays, answers late", redis, map[string]string{
		"PAYOUT_TIMEOUT": "200ms", "HOURGLASS_RETRY_BASE": "50ms", "HOURGLASS_RETRY_CAP": "100ms", "HOURGLASS_MAX_ATTEMPTS": "3",
		"PAYOUT_LOOKUP": "false",
	})
	var late atomic.Bool
	late.Store(true)
	r.provider.Decide(refuseRejects(func(string, fakes.Payout, int) (int, time.Duration) {
		if late.Load() {
			return http.StatusOK, 400 * time.Millisecond
		}
		return http.StatusOK, 0
	}))
	r.workers, r.rejectEvery, r.cancelEvery = 1, 0, 0
	r.start()
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	r.run(ctx)
	stop()
	// Long enough for several times MaxAttempts unanswered calls each.
	time.Sleep(4 * time.Second)
	finals, _ := r.snapshot()
	unanswered := 0
	for _, f := range finals {
		if f.Status == history.Failed || f.Status == history.Paid {
			t.Fatalf("%s ended %s while every call to the provider went unanswered", f.ID, f.Status)
		}
		if f.Attempts > 3 {
			unanswered++
		}
	}
	if unanswered == 0 {
		t.Fatal("no withdrawal went past MaxAttempts unanswered: the run proved nothing")
	}
	if n := len(r.finance.IDs()); n != 0 {
		t.Fatalf("finance was told of %d unresolved payouts", n)
	}
	t.Logf("%d withdrawals past MaxAttempts with every call unanswered, none failed", unanswered)
	late.Store(false)
	finals = r.settle(60 * time.Second)
	r.check(finals, history.Options{})
}
