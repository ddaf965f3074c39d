package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// financeSwitch is a finance endpoint that is down (503) until up is called,
// as a finance team's endpoint may be for a while.
type financeSwitch struct {
	URL string
	on  atomic.Bool
	mu  sync.Mutex
	ids map[string]int
}

func newFinanceSwitch(t *testing.T) *financeSwitch {
	f := &financeSwitch{ids: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.on.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var m struct {
			ID string `json:"withdrawal_id"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &m) != nil || m.ID == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.ids[m.ID]++
		f.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *financeSwitch) heard(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// result is what one run of the hourglass binary did.
type result struct {
	stdout, stderr string
	code           int
}

// hg runs the built hourglass binary with args, env added to the test's, and
// no terminal: standard input empty, output piped.
func hg(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, proctest.Build(t, hourglassPkg), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("hourglass %v: %v", args, err)
	}
	return r
}

// ok runs hg and wants exit 0.
func ok(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	r := hg(t, env, args...)
	if r.code != 0 {
		t.Fatalf("hourglass %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func okJSON(t *testing.T, env map[string]string, v any, args ...string) {
	t.Helper()
	out := ok(t, env, args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("hourglass %s printed no JSON (%v):\n%s", strings.Join(args, " "), err, out)
	}
}

type statsBody struct {
	Queues map[string]map[string]int64 `json:"queues"`
	Items  map[string]map[string]int64 `json:"items"`
}

func deadOf(t *testing.T, env map[string]string) int64 {
	t.Helper()
	var s statsBody
	okJSON(t, env, &s, "stats", "--json")
	return s.Queues["withdrawals"]["dead"]
}

// TestOperatorRequeuesADeadPayout follows docs/operations.md: a payout whose finance
// message cannot be delivered dies; the operator finds it with the CLI, fixes
// finance, requeues it, and finance hears of it once. Then the operator
// purges another, and preheats a sale; every command's JSON agrees with the
// API.
func TestOperatorRequeuesADeadPayout(t *testing.T) {
	rs := redistest.Start(t)
	finance := newFinanceSwitch(t)
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "FINANCE_WEBHOOK_URL": finance.URL, "HOURGLASS_MAX_RECEIVES": "1",
		"HOURGLASS_POLL_INTERVAL": "200ms", "HOURGLASS_LOG_LEVEL": "warn",
	})
	env := map[string]string{"REDIS_URL": rs.URL()}

	later := s.create("bob", "later", `{"amount":"5.00","currency":"USD","destination":"acct_2","delay_seconds":3600}`)
	now := s.create("alice", "now", `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":0}`)
	if later.status != 202 || now.status != 202 {
		t.Fatalf("create: %d %s / %d %s", later.status, later.raw, now.status, now.raw)
	}
	id, laterID := now.body["id"].(string), later.body["id"].(string)

	t.Log("finance is down: the payout is made, its finance message is not; the job dies")
	waitFor(t, 20*time.Second, "the payout job to die", func() bool { return deadOf(t, env) == 1 })
	if w := s.do("GET", "/v1/withdrawals/"+id, "alice", nil, ""); w.body["status"] != "paid" {
		t.Fatalf("withdrawal %s", w.raw)
	}

	t.Log("stats: the table, and JSON equal to GET /v1/admin/stats")
	var cli, api statsBody
	okJSON(t, env, &cli, "stats", "--json")
	r := s.do("GET", "/v1/admin/stats", "", map[string]string{"X-Admin-Token": "dev-admin"}, "")
	if err := json.Unmarshal(r.raw, &api); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(api, cli); diff != "" {
		t.Errorf("hourglass stats --json vs GET /v1/admin/stats (-api +cli):\n%s", diff)
	}
	table := ok(t, env, "stats")
	if !strings.Contains(table, "QUEUE") || !strings.Contains(table, "withdrawals") {
		t.Errorf("stats table:\n%s", table)
	}
	fields := strings.Fields(lineOf(table, "withdrawals"))
	if diff := cmp.Diff([]string{"withdrawals", "1", "0", "0s", "0", "1"}, fields); diff != "" {
		t.Errorf("withdrawals row (-want +got):\n%s\n%s", diff, table)
	}

	t.Log("peek: the later withdrawal is next, due when the API said")
	var peek struct {
		Queue string `json:"queue"`
		Jobs  []struct {
			Shard int    `json:"shard"`
			ID    string `json:"id"`
			DueAt string `json:"due_at"`
		} `json:"jobs"`
	}
	okJSON(t, env, &peek, "peek", "withdrawals", "--json")
	if len(peek.Jobs) != 1 || peek.Jobs[0].ID != laterID || peek.Jobs[0].DueAt != later.body["due_at"] {
		t.Errorf("peek: %+v, want %s due %v", peek, laterID, later.body["due_at"])
	}
	if out := ok(t, env, "peek", "withdrawals"); !strings.Contains(out, laterID) || !strings.Contains(out, "in 59m") {
		t.Errorf("peek table:\n%s", out)
	}

	t.Log("dead list: the payout job, by withdrawal id")
	var dead struct {
		Jobs []struct {
			Queue  string `json:"queue"`
			ID     string `json:"id"`
			DiedAt string `json:"died_at"`
		} `json:"jobs"`
	}
	okJSON(t, env, &dead, "dead", "list", "--json")
	if len(dead.Jobs) != 1 || dead.Jobs[0].ID != id || dead.Jobs[0].Queue != "withdrawals" {
		t.Fatalf("dead list: %+v", dead)
	}
	if out := ok(t, env, "dead", "list", "--queue", "withdrawals"); !strings.Contains(out, id) {
		t.Errorf("dead list table:\n%s", out)
	}

	t.Log("requeue of a job that is not dead: exit 1, nothing moves")
	if r := hg(t, env, "dead", "requeue", "--queue", "withdrawals", "wd_nope"); r.code != 1 || !strings.Contains(r.stderr, "not in the dead set") {
		t.Errorf("requeue wd_nope: exit %d, stderr %s", r.code, r.stderr)
	}

	t.Log("finance is back: requeue the dead payout; finance hears of it once, the provider is not asked again")
	finance.on.Store(true)
	r2 := hg(t, env, "dead", "requeue", "--queue", "withdrawals", id, "--json")
	if r2.code != 0 {
		t.Fatalf("requeue: exit %d %s %s", r2.code, r2.stdout, r2.stderr)
	}
	if diff := cmp.Diff(`{"not_dead":[],"queue":"withdrawals","requeued":["`+id+`"]}`+"\n", r2.stdout); diff != "" {
		t.Errorf("requeue output (-want +got):\n%s", diff)
	}
	if want := "hourglass: acting on " + redisconn.Redacted(env["REDIS_URL"]) + ` (REDIS_URL), prefix "hg:"` + "\n"; r2.stderr != want {
		t.Errorf("requeue's piped stderr is %q, want only which stack it acted on (no progress off a terminal): %q", r2.stderr, want)
	}
	waitFor(t, 20*time.Second, "finance to hear of the payout", func() bool { return finance.heard(id) == 1 })
	waitFor(t, 10*time.Second, "the job to be done", func() bool {
		var st statsBody
		okJSON(t, env, &st, "stats", "--json")
		w := st.Queues["withdrawals"]
		return w["dead"] == 0 && w["inflight"] == 0 && w["due_now"] == 0
	})
	if w := s.do("GET", "/v1/withdrawals/"+id, "alice", nil, ""); w.body["status"] != "paid" || w.body["attempts"] != float64(1) {
		t.Errorf("after the requeue: %s (want paid, one provider call)", w.raw)
	}

	t.Log("purge: needs --yes off a terminal, then forgets the dead job")
	finance.on.Store(false)
	other := s.create("carol", "other", `{"amount":"1.00","currency":"EUR","destination":"acct_3","delay_seconds":0}`)
	otherID := other.body["id"].(string)
	waitFor(t, 20*time.Second, "the second payout job to die", func() bool { return deadOf(t, env) == 1 })
	if r := hg(t, env, "dead", "purge", "--all"); r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("purge without --yes: exit %d, stderr %s", r.code, r.stderr)
	}
	if deadOf(t, env) != 1 {
		t.Fatal("a refused purge purged")
	}
	var purged struct {
		Purged []string `json:"purged"`
	}
	okJSON(t, env, &purged, "dead", "purge", "--all", "--yes", "--json")
	if diff := cmp.Diff([]string{otherID}, purged.Purged); diff != "" {
		t.Errorf("purged (-want +got):\n%s", diff)
	}
	if n := deadOf(t, env); n != 0 {
		t.Errorf("%d dead after purge", n)
	}

	t.Log("preheat through the same service as PUT /v1/seckill/items/{id}")
	var st map[string]any
	okJSON(t, env, &st, "preheat", "phone-9", "--stock", "3", "--ends", "1h", "--shards", "2", "--json")
	if st["item_id"] != "phone-9" || st["status"] != "live" || st["stock_left"] != float64(3) {
		t.Errorf("preheat: %v", st)
	}
	// The sale's terms: no price, no payment window.
	for k, want := range map[string]any{"per_user_limit": float64(1), "price": nil, "currency": nil, "payment_window_seconds": nil} {
		if v, ok := st[k]; !ok || v != want {
			t.Errorf("preheat: %s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if got := s.do("GET", "/v1/seckill/items/phone-9", "", nil, ""); !cmp.Equal(got.body, st) {
		t.Errorf("item after preheat: %s, want what preheat printed: %v", got.raw, st)
	}
	okJSON(t, env, &st, "preheat", "tea-9", "--stock", "2", "--ends", "1h", "--price", "9.9", "--currency", "CNY",
		"--payment-window", "30s", "--json")
	if st["item_id"] != "tea-9" || st["stock_left"] != float64(2) || st["per_user_limit"] != float64(1) ||
		st["price"] != "9.90" || st["currency"] != "CNY" || st["payment_window_seconds"] != float64(30) {
		t.Errorf("preheat with a price and a payment window: %v", st)
	}
	if got := s.do("GET", "/v1/seckill/items/tea-9", "", nil, ""); !cmp.Equal(got.body, st) {
		t.Errorf("item after preheat: %s, want what preheat printed: %v", got.raw, st)
	}
	// For people: the same terms in one line.
	line := ok(t, env, "preheat", "tea-10", "--stock", "4", "--ends", "2030-01-01T00:00:00Z", "--per-user-limit", "2",
		"--price", "1200", "--currency", "JPY", "--payment-window", "15m")
	if want := regexp.MustCompile(`^tea-10: live, 4 left, on sale \S+ \.\. 2030-01-01T00:00:00\.000Z, 2 per buyer, ` +
		`1200 JPY each, to be paid within 15m0s\n$`); !want.MatchString(line) {
		t.Errorf("preheat printed %q, want %s", line, want)
	}
	if line := ok(t, env, "preheat", "phone-10", "--stock", "1", "--ends", "1h"); !strings.HasSuffix(line, ", 1 per buyer\n") {
		t.Errorf("preheat without a price printed %q, want it to end with the limit", line)
	}
	for _, args := range [][]string{
		{"preheat", "phone-9", "--stock", "0", "--ends", "1h"},
		{"preheat", "phone-9", "--stock", "3", "--ends", "-1h"},
		{"preheat", "phone-9", "--stock", "3", "--ends", "yesterday"},
		{"preheat", "bad item", "--stock", "3", "--ends", "1h"},
		{"preheat", "phone-9", "--stock", "3", "--ends", "1h", "--payment-window", "30s"},
		{"preheat", "phone-9", "--stock", "3", "--ends", "1h", "--price", "9.999", "--currency", "CNY"},
		{"preheat", "phone-9", "--stock", "3", "--ends", "1h", "--price", "9.99", "--currency", "CNY", "--payment-window", "1.5s"},
	} {
		if r := hg(t, env, args...); r.code != 2 {
			t.Errorf("hourglass %v: exit %d, want 2 (usage); stderr %s", args, r.code, r.stderr)
		}
	}
	var after statsBody
	okJSON(t, env, &after, "stats", "--json")
	if diff := cmp.Diff(map[string]int64{"stock_left": 3, "admitted": 0, "confirmed": 0, "awaiting_payment": 0, "paid": 0, "expired": 0},
		after.Items["phone-9"]); diff != "" {
		t.Errorf("stats of phone-9 (-want +got):\n%s", diff)
	}
}

func lineOf(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestExitCodes: 2 for every mistake on the command line or in the
// environment, 1 for a command that ran and failed; --help works everywhere.
func TestExitCodes(t *testing.T) {
	mr := miniredis.RunT(t)
	t.Setenv("REDIS_URL", "redis://"+mr.Addr())
	t.Setenv("HOURGLASS_LOG_LEVEL", "error")
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		says string
	}{
		{args: []string{"frob"}, code: 2, says: "unknown command"},
		{args: []string{"stat"}, code: 2, says: `unknown command "stat" for "hourglass"; did you mean stats?`},
		{args: []string{"dead", "lsit"}, code: 2, says: "did you mean list?"},
		{args: []string{"payouts", "resolv"}, code: 2, says: "did you mean resolve?"},
		{args: []string{"stats", "--frob"}, code: 2, says: "unknown flag"},
		{args: []string{"stats", "extra"}, code: 2},
		{args: []string{"stats", "--interval", "0s"}, code: 2},
		{args: []string{"peek"}, code: 2, says: "accepts 1 arg"},
		{args: []string{"peek", "withdrawals", "--limit", "0"}, code: 2},
		{args: []string{"dead", "frob"}, code: 2, says: "unknown command"},
		{args: []string{"dead", "requeue"}, code: 2, says: "--all"},
		{args: []string{"dead", "requeue", "--all", "wd_1"}, code: 2, says: "not both"},
		{args: []string{"dead", "purge", "--batch", "0", "--all"}, code: 2},
		{args: []string{"preheat"}, code: 2},
		{args: []string{"preheat", "x", "--ends", "1h"}, code: 2, says: "--stock"},
		{args: []string{"preheat", "x", "--stock", "1"}, code: 2, says: "--ends"},
		{args: []string{"preheat", "x", "--stock", "ten", "--ends", "1h"}, code: 2},
		{args: []string{"stats"}, env: map[string]string{"REDIS_URL": ""}, code: 2, says: "REDIS_URL"},
		{args: []string{"stats"}, env: map[string]string{"HOURGLASS_QUEUE_SHARDS": "zero"}, code: 2, says: "HOURGLASS_QUEUE_SHARDS"},
		{args: []string{"stats"}, env: map[string]string{"REDIS_URL": "redis://127.0.0.1:1"}, code: 1, says: "not answering"},
		{args: []string{"peek", "sk:nothing"}, code: 1, says: "no queue"},
		{args: []string{"dead", "purge", "--queue", "withdrawals", "wd_1", "--yes"}, code: 1, says: "not in the dead set"},
		{args: []string{"stats"}, code: 0},
		{args: []string{"dead", "list"}, code: 0, says: ""},
		{args: nil, code: 0},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, strings.NewReader(""), &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out.String(), errb.String())
			}
			if tc.says != "" && !strings.Contains(errb.String(), tc.says) {
				t.Errorf("stderr %q does not say %q", errb.String(), tc.says)
			}
		})
	}

	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(strings.Join(append(path, "--help"), " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), append(path, "--help"), nil, &out, &errb); code != 0 {
				t.Errorf("exit %d: %s", code, errb.String())
			}
			if !strings.Contains(out.String(), "Usage:") || c.Short == "" {
				t.Errorf("no usage, or no short description:\n%s", out.String())
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root())
}

// brokenPipe is a standard output whose reader went away.
type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// TestOutputThatFailsFailsTheCommand: a command whose output cannot be
// written exits 1 and says why, rather than 0 with the output lost; text
// and JSON alike.
func TestOutputThatFailsFailsTheCommand(t *testing.T) {
	mr := miniredis.RunT(t)
	t.Setenv("REDIS_URL", "redis://"+mr.Addr())
	t.Setenv("HOURGLASS_LOG_LEVEL", "error")
	for _, args := range [][]string{
		{"stats"},
		{"stats", "--json"},
		{"dead", "list"},
		{"peek", "withdrawals"},
		{"payouts", "unresolved"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var errb bytes.Buffer
			if code := run(context.Background(), args, strings.NewReader(""), brokenPipe{}, &errb); code != exitFailure {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitFailure, errb.String())
			}
			if !strings.Contains(errb.String(), "broken pipe") {
				t.Errorf("stderr %q does not say the output failed", errb.String())
			}
		})
	}
}

// TestProgressOnATerminal: a long command shows progress when standard error
// is a terminal (here a pseudo-terminal made by script(1)), and nothing when
// it is piped.
func TestProgressOnATerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("script(1) (util-linux) is needed to give the command a terminal: %v", err)
	}
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	// 3000 dead payout jobs: requeue moves them 500 a script.
	p := rdb.Pipeline()
	for i := range 3000 {
		p.ZAdd(ctx, "hg:{dq:withdrawals:0}:dead", redis.Z{Score: float64(i), Member: fmt.Sprintf("wd_%05d", i)})
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "-qfec", proctest.Build(t, hourglassPkg)+" dead requeue --all --batch 100", "/dev/null")
	cmd.Env = append(os.Environ(), "REDIS_URL="+rs.URL(), "TERM=xterm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("requeue on a terminal: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "requeue withdrawals") || !strings.Contains(string(out), "/3000)") {
		t.Errorf("no progress on a terminal:\n%q", tail(out, 600))
	}
	if !strings.Contains(string(out), "requeued 3000 dead job(s) of withdrawals") {
		t.Errorf("no report:\n%s", tail(out, 600))
	}
	if n := rdb.ZCard(ctx, "hg:{dq:withdrawals:0}:due").Val(); n != 3000 {
		t.Errorf("%d due after requeue, want 3000", n)
	}
}
