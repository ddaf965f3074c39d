package withdrawal

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/docscheck"
)

// The state machine's table: every pair of a record state and an event,
// decided with no backend. machineStates and machineEvents are the rows
// and columns; wantTransitions is the contract, written by hand; the
// transition table in docs/reliability.md is rendered from Decide by
// TestTransitionTableInTheDocs, so it cannot drift from the code.

var updateDocs = flag.Bool("update-docs", false, "rewrite the transition table in docs/reliability.md")

var machineT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type machineState struct {
	name string
	w    Withdrawal
}

func machineRecord(status Status) Withdrawal {
	return Withdrawal{ID: "wd_1", UserID: "u1", Status: status, Amount: decimal.RequireFromString("10.00"), Currency: "USD",
		Destination: "acct_1", DueAt: machineT0.Add(-time.Second), CreatedAt: machineT0.Add(-time.Hour),
		UpdatedAt: machineT0.Add(-time.Minute), Revision: 3}
}

func machineStates() []machineState {
	with := func(status Status, f func(*Withdrawal)) Withdrawal {
		w := machineRecord(status)
		if f != nil {
			f(&w)
		}
		return w
	}
	sent := func(w *Withdrawal) {
		w.Attempts, w.FirstSentAt, w.SentUntil = 1, machineT0.Add(-10*time.Minute), machineT0.Add(-9*time.Minute)
	}
	return []machineState{
		{"scheduled, due", with(Scheduled, nil)},
		{"scheduled, not due", with(Scheduled, func(w *Withdrawal) { w.DueAt = machineT0.Add(time.Hour) })},
		{"processing, this attempt", with(Processing, func(w *Withdrawal) {
			sent(w)
			w.Attempt, w.ProcessingUntil = "at_1", machineT0.Add(30*time.Second)
		})},
		{"processing, another attempt running", with(Processing, func(w *Withdrawal) {
			sent(w)
			w.Attempt, w.ProcessingUntil = "at_0", machineT0.Add(30*time.Second)
		})},
		{"processing, another attempt overdue", with(Processing, func(w *Withdrawal) {
			sent(w)
			w.Attempt, w.ProcessingUntil = "at_0", machineT0.Add(-time.Second)
		})},
		{"retrying", with(Retrying, sent)},
		{"retrying, never sent", with(Retrying, nil)},
		{"retrying, may have paid", with(Retrying, func(w *Withdrawal) { sent(w); w.MaybePaid = true })},
		{"paid, finance not told", with(Paid, func(w *Withdrawal) { sent(w); w.ProcessedAt = machineT0.Add(-time.Minute) })},
		{"paid, told", with(Paid, func(w *Withdrawal) { sent(w); w.Told = Paid })},
		{"failed, told", with(Failed, func(w *Withdrawal) { sent(w); w.Told = Failed })},
		{"cancelled", with(Cancelled, nil)},
		{"returned, told", with(Returned, func(w *Withdrawal) { sent(w); w.Told = Returned })},
	}
}

type machineEvent struct {
	name string
	e    Event
}

func machineEvents() []machineEvent {
	at := machineT0
	return []machineEvent{
		{"begin", Begin{Attempt: "at_1", Now: at, Until: at.Add(30 * time.Second)}},
		{"send", Send{Attempt: "at_1", Now: at}},
		{"send, never received", Send{Attempt: "at_1", Now: at, NeverReceived: true}},
		{"finish paid", Finish{Attempt: "at_1", Result: Result{Status: Paid, PayoutID: "po_1", At: at}}},
		{"finish failed", Finish{Attempt: "at_1", Result: Result{Status: Failed, LastError: "refused", At: at}}},
		{"retry", Retry{Attempt: "at_1", RetryAt: RetryAt{At: at.Add(30 * time.Second), Now: at, LastError: "503"}}},
		{"retry, may have paid", Retry{Attempt: "at_1", RetryAt: RetryAt{At: at.Add(30 * time.Second), Now: at,
			LastError: "timeout", MaybePaid: true}}},
		{"cancel", Cancel{UserID: "u1", Now: at}},
		{"cancel by another user", Cancel{UserID: "u2", Now: at}},
		{"reschedule", Reschedule{UserID: "u1", ID: "wd_1", DueAt: at.Add(2 * time.Hour), Now: at, By: "user"}},
		{"reschedule if-match stale", Reschedule{UserID: "u1", ID: "wd_1", DueAt: at.Add(2 * time.Hour), Now: at, By: "user",
			IfRevision: new(int64(2))}},
		{"callback paid", Callback{EventID: "ev_1", Status: Paid, PayoutID: "po_1", At: at}},
		{"callback failed", Callback{EventID: "ev_1", Status: Failed, Reason: "closed", At: at}},
		{"callback returned", Callback{EventID: "ev_1", Status: Returned, At: at}},
		{"resolve paid", Resolution{Status: Paid, PayoutID: "po_9", Reason: "", By: "ops", At: at, MaxAttempts: 8}},
		{"resolve failed", Resolution{Status: Failed, Reason: "bank says no", By: "ops", At: at, MaxAttempts: 8}},
		{"notified paid", Notified{Status: Paid}},
	}
}

// render is one cell of the table: what the event does to the record.
func render(w Withdrawal, d Decision) string {
	var b strings.Builder
	switch {
	case d.Err != nil:
		b.WriteString("refused: " + errName(d.Err))
	case !d.Write && len(d.Queue) == 0:
		b.WriteString("nothing")
	case !d.Write:
		b.WriteString("(record unchanged)")
	default:
		b.WriteString(string(d.Next.Status))
		var notes []string
		if d.Next.MaybePaid && !w.MaybePaid {
			notes = append(notes, "may have paid")
		}
		if !d.Next.MaybePaid && w.MaybePaid {
			notes = append(notes, "paid ruled out")
		}
		if d.Next.Attempts != w.Attempts {
			notes = append(notes, fmt.Sprintf("call %d", d.Next.Attempts))
		}
		if d.Next.Told != w.Told {
			notes = append(notes, "told "+string(d.Next.Told))
		}
		if len(d.Next.Events) != len(w.Events) {
			notes = append(notes, "event kept")
		}
		if len(notes) > 0 {
			b.WriteString(" (" + strings.Join(notes, ", ") + ")")
		}
	}
	if d.Start != 0 {
		b.WriteString("; " + startName(d.Start))
	}
	if d.Applied != 0 {
		b.WriteString("; " + d.Applied.String())
	}
	for _, op := range d.Queue {
		b.WriteString("; " + string(op.Kind))
		if !op.At.IsZero() {
			b.WriteString(" " + offset(op.At))
		}
	}
	if d.Call != CallNone {
		b.WriteString("; call " + string(d.Call))
	}
	if d.Tell {
		b.WriteString("; tell finance")
	}
	return b.String()
}

func offset(t time.Time) string {
	d := t.Sub(machineT0)
	switch {
	case d == 0:
		return "now"
	case d > 0:
		return "+" + d.String()
	}
	return d.String()
}

func startName(s Start) string {
	return map[Start]string{StartAttempt: "start", StartBusy: "busy", StartNotDue: "not due", StartFinal: "final"}[s]
}

func errName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{ErrStale, "stale"}, {ErrNotFound, "not found"}, {ErrNotCancellable, "not cancellable"},
		{ErrNotReschedulable, "not reschedulable"}, {ErrPreconditionFailed, "precondition failed"},
		{ErrNotResolvable, "not resolvable"}, {ErrNotSent, "never sent"},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return err.Error()
}

// transitionTable renders Decide over every state and event, one line per
// pair, as the docs show it.
func transitionTable() string {
	var b strings.Builder
	b.WriteString("| record | event | outcome |\n|---|---|---|\n")
	for _, st := range machineStates() {
		for _, ev := range machineEvents() {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", st.name, ev.name, render(st.w, Decide(st.w, ev.e)))
		}
	}
	return b.String()
}

func TestEveryTransition(t *testing.T) {
	got := map[[2]string]string{}
	for _, st := range machineStates() {
		for _, ev := range machineEvents() {
			d := Decide(st.w, ev.e)
			got[[2]string{st.name, ev.name}] = render(st.w, d)
			checkDecision(t, st.name+" / "+ev.name, st.w, d)
		}
	}
	for key, want := range wantTransitions {
		if got[key] != want {
			t.Errorf("%s / %s:\n got  %s\n want %s", key[0], key[1], got[key], want)
		}
	}
	for key := range got {
		if _, ok := wantTransitions[key]; !ok {
			t.Errorf("%s / %s: no expectation (got %s)", key[0], key[1], got[key])
		}
	}
}

// checkDecision holds the invariants every decision keeps, whatever the
// table says.
func checkDecision(t *testing.T, name string, w Withdrawal, d Decision) {
	t.Helper()
	n := d.Next
	switch {
	case d.Err != nil && (d.Write || len(d.Queue) > 0 || d.Tell || d.Call != CallNone):
		t.Errorf("%s: a refusal writes or does something: %+v", name, d)
	case !d.Write && (n.Status != w.Status || n.Revision != w.Revision):
		t.Errorf("%s: the record changed without a write", name)
	case d.Write && n.Revision != w.Revision+1:
		t.Errorf("%s: a write is revision %d after %d", name, n.Revision, w.Revision)
	case w.Status.Final() && !n.Status.Final():
		t.Errorf("%s: %s went back to %s", name, w.Status, n.Status)
	case w.Status != n.Status && w.Status.Final() && (w.Status != Paid || n.Status != Returned):
		t.Errorf("%s: final %s moved to %s", name, w.Status, n.Status)
	case n.Attempts < w.Attempts:
		t.Errorf("%s: calls counted went down", name)
	case n.Status == Cancelled && w.Status != Cancelled && (w.MaybePaid || !w.Cancellable()):
		t.Errorf("%s: cancelled a withdrawal a call may have paid", name)
	case n.Status == Failed && w.Status != Failed && w.MaybePaid && !isSettlement(d):
		t.Errorf("%s: failed a withdrawal a call may have paid without an authoritative word", name)
	case w.MaybePaid && !n.MaybePaid && !n.Status.Final() && !neverReceived(d):
		t.Errorf("%s: forgot that a call may have paid", name)
	case w.NeverSent() && n.Status.Final() && n.Status != Cancelled:
		t.Errorf("%s: settled a withdrawal never sent", name)
	}
}

func isSettlement(d Decision) bool { return d.Applied == Changed || d.Next.ResolvedBy != "" }

func neverReceived(d Decision) bool { return d.Call == CallPay && d.Next.Status == Processing }

func TestTransitionTableInTheDocs(t *testing.T) {
	docscheck.Section(t, "../../docs/reliability.md", "transitions", transitionTable(), *updateDocs)
}
