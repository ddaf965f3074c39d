package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
)

// TestRescheduleAndETags walks one withdrawal through PATCH with and
// without If-Match: every answer carrying it has an ETag, every change gives
// a new one, a read none, and the new due_at is kept to the millisecond.
func TestRescheduleAndETags(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		created, resp := s.create(t, key("etag"))
		etag := resp.Headers["ETag"]
		if !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) || len(etag) < 3 {
			t.Fatalf("create's ETag %q is not a quoted entity tag", etag)
		}
		seen := map[string]string{etag: "create"}
		fresh := func(step, tag string) {
			t.Helper()
			if tag == "" {
				t.Fatalf("%s: no ETag", step)
			}
			if prev, ok := seen[tag]; ok {
				t.Fatalf("%s: ETag %s again, as after %s", step, tag, prev)
			}
			seen[tag] = step
			etag = tag
		}
		// A replay carries the ETag of the first answer, as its body does.
		replay := s.invoke(t, payload(t, "withdrawal-create", "", key("etag")))
		wantJSON(t, replay, 202)
		if replay.Headers["ETag"] != etag || replay.Headers["Idempotent-Replayed"] != "true" {
			t.Errorf("replay: ETag %q (want %q), headers %v", replay.Headers["ETag"], etag, replay.Headers)
		}
		get := s.invoke(t, rawFixtureFor(t, "withdrawal-get", created.ID))
		wantJSON(t, get, 200)
		if get.Headers["ETag"] != etag {
			t.Errorf("a read changed the ETag: %q, want %q", get.Headers["ETag"], etag)
		}

		// delay_seconds: from now.
		before := time.Now().Truncate(time.Millisecond)
		resp = s.invoke(t, rawFixtureFor(t, "withdrawal-reschedule", created.ID))
		after := time.Now()
		wantJSON(t, resp, 200)
		v := wantView(t, resp.Body)
		due := parseTime(t, v.DueAt)
		if due.Before(before.Add(600*time.Second)) || due.After(after.Add(600*time.Second)) {
			t.Errorf("due_at %s, want 600 s after the request [%s, %s]", v.DueAt, before, after)
		}
		if diff := cmp.Diff(created, v, cmpopts.IgnoreFields(httpapi.View{}, "DueAt", "UpdatedAt")); diff != "" {
			t.Errorf("reschedule changed more than due_at and updated_at (-created +rescheduled):\n%s", diff)
		}
		fresh("reschedule", resp.Headers["ETag"])
		if got := s.invoke(t, rawFixtureFor(t, "withdrawal-get", created.ID)); got.Headers["ETag"] != etag ||
			wantView(t, got.Body).DueAt != v.DueAt {
			t.Errorf("get after reschedule: ETag %q due %s, want %q %s", got.Headers["ETag"], wantView(t, got.Body).DueAt, etag, v.DueAt)
		}
		if at, ok, err := s.app.Withdrawals.DueAt(t.Context(), s.app.Withdrawals.ShardFor(fixtureUser), created.ID); err != nil || !ok || !at.Equal(due) {
			t.Errorf("the job is due %v (%v, %v), want %v", at, ok, err, due)
		}

		// process_at with If-Match: the current ETag moves it, to the ms.
		at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond).Add(7 * time.Millisecond)
		resp = s.invoke(t, payload(t, "withdrawal-reschedule", created.ID, header("if-match", etag),
			body(`{"process_at":"`+clock.Format(at)+`"}`)))
		wantJSON(t, resp, 200)
		if got := wantView(t, resp.Body).DueAt; got != clock.Format(at) {
			t.Errorf("due_at %s, want %s", got, clock.Format(at))
		}
		stale := etag
		fresh("reschedule with If-Match", resp.Headers["ETag"])

		// The stale one is refused, the record unchanged, the current ETag told.
		beforeKeys := snapshot(t, s.rdb)
		p := s.invoke(t, payload(t, "withdrawal-reschedule", created.ID, header("if-match", stale)))
		checkProblem(t, p, want{status: 412, code: "precondition_failed"})
		if p.Headers["ETag"] != etag {
			t.Errorf("412 carries ETag %q, want the current %q", p.Headers["ETag"], etag)
		}
		wantUnchanged(t, beforeKeys, snapshot(t, s.rdb))

		// If-Match: * moves whatever the revision.
		resp = s.invoke(t, payload(t, "withdrawal-reschedule", created.ID, header("if-match", "*"), body(`{"delay_seconds":0}`)))
		wantJSON(t, resp, 200)
		fresh("reschedule with If-Match *", resp.Headers["ETag"])

		// Cancel carries a new ETag; cancelling again the same.
		resp = s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", created.ID))
		wantJSON(t, resp, 200)
		fresh("cancel", resp.Headers["ETag"])
		if again := s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", created.ID)); again.Headers["ETag"] != etag {
			t.Errorf("cancelling again: ETag %q, want %q", again.Headers["ETag"], etag)
		}
		p = s.invoke(t, payload(t, "withdrawal-reschedule", created.ID, header("if-match", etag)))
		pb := checkProblem(t, p, want{status: 409, code: "not_reschedulable"})
		if !strings.Contains(pb.Detail, "cancelled") {
			t.Errorf("detail %q does not say it is cancelled", pb.Detail)
		}
	})
}

// TestRescheduleLogs: a reschedule is logged at INFO with the old and the
// new due time and who asked.
func TestRescheduleLogs(t *testing.T) {
	u, _ := backends[0].start(t)
	s := newStack(t, u, nil)
	v, _ := s.create(t, key("logs"))
	resp := s.invoke(t, rawFixtureFor(t, "withdrawal-reschedule", v.ID))
	wantJSON(t, resp, 200)
	line := ""
	for _, l := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(l, `"msg":"withdrawal rescheduled"`) {
			line = l
		}
	}
	for _, want := range []string{`"level":"INFO"`, `"withdrawal_id":"` + v.ID + `"`, `"from":"` + v.DueAt + `"`,
		`"due_at":"` + wantView(t, resp.Body).DueAt + `"`, `"by":"user"`} {
		if !strings.Contains(line, want) {
			t.Errorf("reschedule log line %q lacks %s", line, want)
		}
	}
}
