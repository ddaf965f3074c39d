package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
)

// TestReschedule: the user moves one withdrawal earlier through the local
// stack, which wakes its poller (its poll interval is a minute here) and
// pays it at the new time, not before; the operator moves another later
// with a reason, which the record keeps and the user never sees, and is
// refused once it cannot move.
func TestReschedule(t *testing.T) {
	rs := redistest.Start(t)
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "HOURGLASS_POLL_INTERVAL": "1m", "HOURGLASS_LOG_LEVEL": "warn",
	})
	env := map[string]string{"REDIS_URL": rs.URL()}
	const body = `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":3600}`

	// The user: an hour away, moved to in a moment.
	c := s.create("alice", "k1", body)
	if c.status != 202 || c.header.Get("ETag") == "" {
		t.Fatalf("create: %d %v %s", c.status, c.header, c.raw)
	}
	id := c.body["id"].(string)
	at := clock.Format(time.Now().Add(1500 * time.Millisecond))
	r := s.do("PATCH", "/v1/withdrawals/"+id, "alice", map[string]string{"If-Match": c.header.Get("ETag")},
		`{"process_at":"`+at+`"}`)
	if r.status != 200 || r.body["due_at"] != at || r.header.Get("ETag") == c.header.Get("ETag") {
		t.Fatalf("reschedule: %d %v %s", r.status, r.header, r.raw)
	}
	var got reply
	waitFor(t, 30*time.Second, "the withdrawal to be paid at its new time", func() bool {
		got = s.do("GET", "/v1/withdrawals/"+id, "alice", nil, "")
		return got.body["status"] == "paid"
	})
	due, _ := time.Parse(time.RFC3339Nano, at)
	if paidAt, err := time.Parse(time.RFC3339Nano, got.body["updated_at"].(string)); err != nil || paidAt.Before(due) {
		t.Fatalf("paid at %v, before its due time %v", got.body["updated_at"], at)
	}

	// The operator: another one, later, with a reason.
	c = s.create("bob", "k2", body)
	id2 := c.body["id"].(string)
	later := clock.Format(time.Now().Add(5 * time.Hour).Truncate(time.Second))
	out := ok(t, env, "withdrawals", "reschedule", id2, "--at", later, "--reason", "fraud review (ticket 4411)", "--by", "jane")
	if !strings.Contains(out, id2+" rescheduled from "+c.body["due_at"].(string)+" to "+later+" by jane") {
		t.Fatalf("reschedule said %q", out)
	}
	var v map[string]any
	okJSON(t, env, &v, "withdrawals", "show", id2, "--json")
	for k, want := range map[string]any{"status": "scheduled", "due_at": later, "rescheduled_by": "jane",
		"reschedule_reason": "fraud review (ticket 4411)", "user_id": "bob", "rescheduled_from": c.body["due_at"]} {
		if v[k] != want {
			t.Errorf("show: %s is %v, want %v", k, v[k], want)
		}
	}
	user := s.do("GET", "/v1/withdrawals/"+id2, "bob", nil, "")
	if user.body["due_at"] != later || strings.Contains(string(user.raw), "fraud") || strings.Contains(string(user.raw), "jane") {
		t.Fatalf("the user sees %s", user.raw)
	}
	// The user's stale ETag no longer matches.
	if r := s.do("PATCH", "/v1/withdrawals/"+id2, "bob", map[string]string{"If-Match": c.header.Get("ETag")}, `{"delay_seconds":60}`); r.status != 412 ||
		r.body["code"] != "precondition_failed" {
		t.Fatalf("stale If-Match: %d %s", r.status, r.raw)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"withdrawals", "reschedule", id2, "--delay", "1h"}, 2, "reason"},
		{[]string{"withdrawals", "reschedule", id2, "--reason", "r"}, 2, "exactly one"},
		{[]string{"withdrawals", "reschedule", id2, "--delay", "1h", "--at", later, "--reason", "r"}, 2, "exactly one"},
		{[]string{"withdrawals", "reschedule", id2, "--at", "tomorrow", "--reason", "r"}, 2, "RFC 3339"},
		{[]string{"withdrawals", "reschedule", id2, "--delay", "-1h", "--reason", "r"}, 2, "past"},
		{[]string{"withdrawals", "reschedule", id2, "--delay", "800h", "--reason", "r"}, 2, "ahead"},
		{[]string{"withdrawals", "reschedule", "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "--delay", "1h", "--reason", "r"}, 1, "no withdrawal"},
		{[]string{"withdrawals", "reschedule", id, "--delay", "1h", "--reason", "r"}, 1, "is paid and can no longer be rescheduled"},
		{[]string{"withdrawals", "show", "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z"}, 1, "no withdrawal"},
	} {
		r := hg(t, env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.says) {
			t.Errorf("hourglass %s: exit %d (want %d), output %q (want %q)", strings.Join(tc.args, " "), r.code, tc.code,
				r.stdout+r.stderr, tc.says)
		}
	}
	if user := s.do("GET", "/v1/withdrawals/"+id2, "bob", nil, ""); user.body["due_at"] != later {
		t.Fatalf("a refused reschedule moved it: %s", user.raw)
	}
}
