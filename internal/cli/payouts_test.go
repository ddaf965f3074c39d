package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
)

// TestOperatorResolvesAnUnknownPayout: a provider that pays but never
// answers in time and has no working lookup leaves a withdrawal whose payout
// may have been made; past the idempotency window it is never sent again.
// The operator lists it, settles it from the provider's records, and
// finance hears of it.
func TestOperatorResolvesAnUnknownPayout(t *testing.T) {
	var posts atomic.Int32
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusServiceUnavailable) // the lookup is down
			return
		}
		posts.Add(1)
		time.Sleep(600 * time.Millisecond) // paid, answered past PAYOUT_TIMEOUT
		_, _ = w.Write([]byte(`{"payout_id":"po_late"}`))
	}))
	t.Cleanup(provider.Close)
	rs := redistest.Start(t)
	finance := newFinanceSwitch(t)
	finance.on.Store(true)
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "FINANCE_WEBHOOK_URL": finance.URL, "PAYOUT_URL": provider.URL, "PAYOUT_TIMEOUT": "200ms",
		"PAYOUT_IDEMPOTENCY_WINDOW": "300ms", "HOURGLASS_RETRY_BASE": "100ms", "HOURGLASS_RETRY_CAP": "3s",
		"HOURGLASS_POLL_INTERVAL": "50ms", "HOURGLASS_LOG_LEVEL": "warn",
	})
	env := map[string]string{"REDIS_URL": rs.URL(), "PAYOUT_IDEMPOTENCY_WINDOW": "300ms"}
	c := s.create("alice", "k1", `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`)
	if c.status != 202 {
		t.Fatalf("create: %d %s", c.status, c.raw)
	}
	id := c.body["id"].(string)

	type unresolved struct {
		Withdrawals []struct {
			ID          string `json:"id"`
			Status      string `json:"status"`
			Revision    int64  `json:"revision"`
			MayHavePaid bool   `json:"may_have_paid"`
			Attempts    int    `json:"attempts"`
			PastWindow  bool   `json:"past_idempotency_window"`
			RequestID   string `json:"request_id"`
		} `json:"withdrawals"`
	}
	var list unresolved
	waitFor(t, 20*time.Second, "the payout to be unresolved past the window", func() bool {
		okJSON(t, env, &list, "payouts", "unresolved", "--json")
		return len(list.Withdrawals) == 1 && list.Withdrawals[0].PastWindow
	})
	// Between two lookups it is retrying; during one, processing.
	if w := list.Withdrawals[0]; w.ID != id || !w.MayHavePaid || (w.Status != "retrying" && w.Status != "processing") {
		t.Fatalf("unresolved: %+v", list)
	}
	if list.Withdrawals[0].RequestID == "" {
		t.Errorf("unresolved: no request id to search the logs by: %+v", list)
	}
	// It shows the user processing, and is not cancellable.
	if w := s.do("GET", "/v1/withdrawals/"+id, "alice", nil, ""); w.body["status"] != "processing" {
		t.Fatalf("the user sees %s", w.raw)
	}
	if r := s.do("DELETE", "/v1/withdrawals/"+id, "alice", nil, ""); r.status != 409 || r.body["code"] != "not_cancellable" {
		t.Fatalf("cancel: %d %s", r.status, r.raw)
	}
	// Past the window nothing is sent again blind.
	sent := posts.Load()
	time.Sleep(time.Second)
	if n := posts.Load(); n != sent {
		t.Fatalf("%d payout requests sent past the idempotency window", n-sent)
	}
	if table := ok(t, env, "payouts", "unresolved"); !strings.Contains(table, id) || !strings.Contains(table, "past the window") {
		t.Fatalf("unresolved table:\n%s", table)
	}

	rev := fmt.Sprint(list.Withdrawals[0].Revision)
	if r := hg(t, env, "payouts", "resolve", id, "--revision", rev); r.code != 2 {
		t.Fatalf("resolve without a verdict: exit %d, want 2\n%s", r.code, r.stderr)
	}
	if r := hg(t, env, "payouts", "resolve", id, "--revision", rev, "--paid", "po_late", "--failed", "x"); r.code != 2 {
		t.Fatalf("resolve with both verdicts: exit %d, want 2", r.code)
	}
	if r := hg(t, env, "payouts", "resolve", id, "--paid", "po_late"); r.code != 2 || !strings.Contains(r.stderr, "--revision") {
		t.Fatalf("resolve naming no revision: exit %d, want 2 and a word on --revision\n%s", r.code, r.stderr)
	}
	if r := hg(t, env, "payouts", "resolve", "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "--revision", "1", "--paid", "po_x"); r.code != 1 {
		t.Fatalf("resolve of an unknown withdrawal: exit %d, want 1", r.code)
	}
	// A verdict on a revision the record has left is refused, nothing
	// written: the operator lists it again.
	if r := hg(t, env, "payouts", "resolve", id, "--revision", "0", "--paid", "po_late"); r.code != 1 ||
		!strings.Contains(r.stderr, "list it again") {
		t.Fatalf("resolve on a stale revision: exit %d, want 1 and a word on listing again\n%s", r.code, r.stderr)
	}
	// A lookup may be running at that very moment, or have moved the
	// record since it was listed: the operator lists it again and resolves
	// on what it reads. (The retry cap, 3 s here, 30 min by default, is
	// the time an operator has between two moves of such a record.)
	var r result
	for range 20 {
		okJSON(t, env, &list, "payouts", "unresolved", "--json")
		if len(list.Withdrawals) != 1 {
			t.Fatalf("unresolved: %+v", list)
		}
		rev = fmt.Sprint(list.Withdrawals[0].Revision)
		if r = hg(t, env, "payouts", "resolve", id, "--revision", rev, "--paid", "po_late", "--by", "alice@ops"); r.code != 1 ||
			!strings.Contains(r.stderr, "attempt runs") && !strings.Contains(r.stderr, "list it again") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.code != 0 || !strings.Contains(r.stdout, id+" is paid (resolved by alice@ops") {
		t.Fatalf("resolve: exit %d, printed %q\n%s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, 10*time.Second, "finance to hear of the resolution", func() bool { return finance.heard(id) > 0 })
	if w := s.do("GET", "/v1/withdrawals/"+id, "alice", nil, ""); w.body["status"] != "paid" || w.body["payout_id"] != "po_late" {
		t.Fatalf("after the resolution: %s", w.raw)
	}
	if r := hg(t, env, "payouts", "resolve", id, "--revision", rev, "--failed", "changed my mind"); r.code != 1 ||
		!strings.Contains(r.stderr, "not resolvable") {
		t.Fatalf("a contradicting resolution: exit %d\n%s", r.code, r.stderr)
	}
	okJSON(t, env, &list, "payouts", "unresolved", "--json")
	if len(list.Withdrawals) != 0 {
		t.Fatalf("still unresolved: %+v", list)
	}
}

// TestOperatorCannotResolveAWithdrawalNeverSent: a withdrawal still
// scheduled was never sent to the provider: nothing but the payout step
// settles it. Resolving it, as paid or failed, is refused with the reason
// (exit 1) and writes nothing: it stays scheduled at its time, with no
// attempts, and finance hears nothing.
func TestOperatorCannotResolveAWithdrawalNeverSent(t *testing.T) {
	rs := redistest.Start(t)
	finance := newFinanceSwitch(t)
	finance.on.Store(true)
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "FINANCE_WEBHOOK_URL": finance.URL, "HOURGLASS_POLL_INTERVAL": "50ms",
		"HOURGLASS_LOG_LEVEL": "warn",
	})
	env := map[string]string{"REDIS_URL": rs.URL()}
	c := s.create("alice", "k1", `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":3600}`)
	if c.status != 202 {
		t.Fatalf("create: %d %s", c.status, c.raw)
	}
	id := c.body["id"].(string)
	before := ok(t, env, "withdrawals", "show", id, "--json")
	var shown struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal([]byte(before), &shown); err != nil {
		t.Fatalf("withdrawals show --json: %v\n%s", err, before)
	}
	rev := shown.Revision

	for _, verdict := range [][]string{{"--paid", "po_invented"}, {"--failed", "not at the provider"}} {
		r := hg(t, env, append([]string{"payouts", "resolve", id, "--by", "alice@ops", "--revision", fmt.Sprint(rev)}, verdict...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "never sent to the payout provider") ||
			!strings.Contains(r.stderr, "not resolvable") || strings.Contains(r.stdout, "finance will be told") {
			t.Fatalf("resolve %v of a scheduled withdrawal: exit %d\nstdout: %s\nstderr: %s", verdict, r.code, r.stdout, r.stderr)
		}
	}
	if after := ok(t, env, "withdrawals", "show", id, "--json"); after != before {
		t.Fatalf("a refused resolution changed the withdrawal:\nbefore: %s\nafter:  %s", before, after)
	}
	if w := s.do("GET", "/v1/withdrawals/"+id, "alice", nil, ""); w.body["status"] != "scheduled" || w.body["attempts"] != 0.0 ||
		w.body["due_at"] != c.body["due_at"] {
		t.Fatalf("after refused resolutions the user sees %s", w.raw)
	}
	time.Sleep(500 * time.Millisecond) // a job made due now would have told finance by now
	if n := finance.heard(id); n != 0 {
		t.Fatalf("finance heard %d times of a withdrawal never sent", n)
	}
	if out := ok(t, env, "payouts", "unresolved"); !strings.Contains(out, "no unresolved payouts") {
		t.Fatalf("unresolved:\n%s", out)
	}
}
