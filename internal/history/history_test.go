package history_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/hourglass/hourglass/internal/history"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func call(key, id, tag string, at, status int) history.ProviderCall {
	c := history.ProviderCall{Key: key, WithdrawalID: id, Tag: tag, At: t0.Add(time.Duration(at) * time.Millisecond), Status: status}
	if status == 200 {
		c.PayoutID = "po_" + key
	}
	return c
}

func final(id, tag, status string, attempts int) history.Final {
	f := history.Final{ID: id, User: "u", Tag: tag, Status: status, Attempts: attempts}
	if status == history.Paid {
		f.PayoutID = "po_" + id
	}
	return f
}

// counts is the part of a report the cases compare.
type counts struct {
	Acknowledged, Refused, Unknown, Paid, Failed, Cancelled           int
	Lost, Duplicated, Unexpected, Inconsistent, Unreported, Recovered int
	PaidButFailed, PaidButUnreported, ProviderPaid                    int
	SameKeyRepeats, SameKeyAfterPaid, UnknownCreated, ProviderCalls   int
}

func countsOf(r history.Report) counts {
	return counts{r.Acknowledged, r.Refused, r.Unknown, r.Paid, r.Failed, r.Cancelled,
		r.Lost, r.Duplicated, r.Unexpected, r.Inconsistent, r.Unreported, r.Recovered,
		r.PaidButFailed, r.PaidButUnreported, r.ProviderPaid,
		r.SameKeyRepeats, r.SameKeyAfterPaid, r.UnknownCreated, r.ProviderCalls}
}

// paid is the provider's truth of one payment, at ms.
func paid(id, tag string, at int) history.Payment {
	return history.Payment{Key: id, WithdrawalID: id, Tag: tag, PayoutID: "po_" + id, At: t0.Add(time.Duration(at) * time.Millisecond)}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(h *history.History)
		want  counts
		ok    bool
	}{
		{
			name: "clean: paid, failed as expected, cancelled",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Create("t2", "u", "k2", history.Failed, 202, "w2", t0)
				h.Create("t3", "u", "k3", history.Paid, 202, "w3", t0)
				h.Cancel("w3", 200)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200), call("w2", "w2", "t2", 2, 400)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w2", "t2", history.Failed, 1), final("w3", "t3", history.Cancelled, 0)})
				h.Finance(map[string]int{"w1": 1, "w2": 1})
			},
			want: counts{Acknowledged: 3, Paid: 1, Failed: 1, Cancelled: 1, ProviderPaid: 1, ProviderCalls: 2},
			ok:   true,
		},
		{
			name: "recovered after 5xx, a timeout that paid, and redelivery",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Create("t2", "u", "k2", history.Paid, 202, "w2", t0)
				h.Create("t3", "u", "k3", history.Paid, 202, "w3", t0)
				h.Delivered("w3", t0)
				h.Delivered("w3", t0)
				h.ProviderCalls([]history.ProviderCall{
					call("w1", "w1", "t1", 1, 503), call("w1", "w1", "t1", 5, 200),
					call("w2", "w2", "t2", 2, 200), call("w2", "w2", "t2", 9, 200), // the first answer came too late
					call("w3", "w3", "t3", 3, 200),
				})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 2), final("w2", "t2", history.Paid, 2), final("w3", "t3", history.Paid, 1)})
				h.Finance(map[string]int{"w1": 1, "w2": 2, "w3": 1})
			},
			want: counts{Acknowledged: 3, Paid: 3, Recovered: 3, ProviderPaid: 3, SameKeyRepeats: 2, SameKeyAfterPaid: 1, ProviderCalls: 5},
			ok:   true,
		},
		{
			name: "transient failures up to the last attempt end failed as allowed",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 503), call("w1", "w1", "t1", 2, 503), call("w1", "w1", "t1", 3, 503)})
				h.Finals([]history.Final{final("w1", "t1", history.Failed, 3)})
				h.Finance(map[string]int{"w1": 1})
			},
			want: counts{Acknowledged: 1, Failed: 1, Recovered: 1, SameKeyRepeats: 2, ProviderCalls: 3},
			ok:   true,
		},
		{
			name: "lost: no record, stuck, failed early, cancelled unasked",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Create("t2", "u", "k2", history.Paid, 202, "w2", t0)
				h.Create("t3", "u", "k3", history.Paid, 202, "w3", t0)
				h.Create("t4", "u", "k4", history.Paid, 202, "w4", t0)
				h.ProviderCalls([]history.ProviderCall{call("w3", "w3", "t3", 1, 503)})
				h.Finals([]history.Final{final("w2", "t2", "processing", 1), final("w3", "t3", history.Failed, 1), final("w4", "t4", history.Cancelled, 0)})
				h.Finance(map[string]int{"w3": 1})
			},
			want: counts{Acknowledged: 4, Failed: 1, Cancelled: 1, Lost: 4, ProviderCalls: 1},
		},
		{
			name: "duplicated: two keys for one withdrawal, two payout ids for one key",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Create("t2", "u", "k2", history.Paid, 202, "w2", t0)
				p := call("w2", "w2", "t2", 3, 200)
				p.PayoutID = "po_other"
				h.ProviderCalls([]history.ProviderCall{
					call("w1", "w1", "t1", 1, 200), call("other-key", "w1", "t1", 2, 200),
					call("w2", "w2", "t2", 2, 200), p,
				})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w2", "t2", history.Paid, 2)})
				h.Finance(map[string]int{"w1": 1, "w2": 1})
			},
			// w2's ledger names one of its two payouts: the other is the
			// duplicate.
			want: counts{Acknowledged: 2, Paid: 2, Duplicated: 2, ProviderPaid: 2, SameKeyRepeats: 1, SameKeyAfterPaid: 1, ProviderCalls: 4},
		},
		{
			name: "a single payout under a foreign key is duplicated too",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.ProviderCalls([]history.ProviderCall{call("not-w1", "w1", "t1", 1, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1)})
				h.Finance(map[string]int{"w1": 1})
			},
			// And the ledger's payout matches no payout under its own key.
			want: counts{Acknowledged: 1, Paid: 1, Duplicated: 1, Inconsistent: 1, ProviderPaid: 1, ProviderCalls: 1},
		},
		{
			name: "unexpected: a refused request that made one, a payout nobody asked for",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 409, "", t0)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200), call("w9", "w9", "t9", 2, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w9", "t9", history.Paid, 1)})
				h.Finance(map[string]int{"w1": 1, "w9": 1})
			},
			want: counts{Refused: 1, Unexpected: 2, ProviderPaid: 2, ProviderCalls: 2},
		},
		{
			name: "unknown effect: made or not, both fine; made must still end right",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 503, "", t0)
				h.Create("t2", "u", "k2", history.Paid, 0, "", t0)
				h.Create("t3", "u", "k3", history.Paid, 503, "", t0)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w3", "t3", "scheduled", 0)})
				h.Finance(map[string]int{"w1": 1})
			},
			want: counts{Unknown: 3, UnknownCreated: 2, Inconsistent: 1, ProviderPaid: 1, ProviderCalls: 1},
		},
		{
			name: "a retried request keeps its acknowledgment",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 503, "", t0)
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Create("t2", "u", "k2", history.Paid, 0, "", t0)
				h.Create("t2", "u", "k2", history.Paid, 409, "", t0) // in flight: still unknown
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200), call("w2", "w2", "t2", 1, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w2", "t2", history.Paid, 1)})
				h.Finance(map[string]int{"w1": 1, "w2": 1})
			},
			want: counts{Acknowledged: 1, Paid: 1, Unknown: 1, UnknownCreated: 1, ProviderPaid: 2, ProviderCalls: 2},
			ok:   true,
		},
		{
			name: "inconsistent: paid after a 200 cancel, cancelled after a 409; failed though paid; unreported",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Create("t2", "u", "k2", history.Paid, 202, "w2", t0)
				h.Create("t3", "u", "k3", history.Paid, 202, "w3", t0)
				h.Create("t4", "u", "k4", history.Paid, 202, "w4", t0)
				h.Cancel("w1", 200)
				h.Cancel("w2", 409)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200), call("w3", "w3", "t3", 1, 200), call("w4", "w4", "t4", 1, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w2", "t2", history.Cancelled, 0),
					final("w3", "t3", history.Failed, 8), final("w4", "t4", history.Paid, 1)})
				h.Finance(map[string]int{"w1": 1, "w3": 1})
			},
			// w3 is paid-but-failed (and finance never heard it was paid); w4 is
			// unreported and, paid at the provider, paid-but-unreported.
			want: counts{Acknowledged: 4, Paid: 2, Failed: 1, Cancelled: 1, Inconsistent: 2, Unreported: 1,
				PaidButFailed: 1, PaidButUnreported: 2, ProviderPaid: 3, ProviderCalls: 3},
		},
		{
			name: "paid-but-failed: paid, its answer lost, then 5xx used up the attempts",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				// The provider's log shows only 5xx: its first answer, a 200,
				// never left (or never arrived); its truth says it paid.
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 5, 503), call("w1", "w1", "t1", 9, 503), call("w1", "w1", "t1", 14, 503)})
				h.ProviderPaid([]history.Payment{paid("w1", "t1", 1)})
				h.Finals([]history.Final{final("w1", "t1", history.Failed, 3)})
				h.FinanceStatuses(map[string][]string{"w1": {history.Failed}})
			},
			want: counts{Acknowledged: 1, Failed: 1, PaidButFailed: 1, PaidButUnreported: 1, ProviderPaid: 1, SameKeyRepeats: 2, ProviderCalls: 3},
		},
		{
			name: "paid-but-failed: paid, its answer lost, then cancelled with a 200",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Cancel("w1", 200)
				h.ProviderPaid([]history.Payment{paid("w1", "t1", 1)})
				h.Finals([]history.Final{final("w1", "t1", history.Cancelled, 1)})
				h.FinanceStatuses(map[string][]string{})
			},
			want: counts{Acknowledged: 1, Cancelled: 1, PaidButFailed: 1, PaidButUnreported: 1, ProviderPaid: 1},
		},
		{
			name: "paid-but-failed: the ledger ends paid, but finance was told failed first",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 4)})
				h.FinanceStatuses(map[string][]string{"w1": {history.Failed, history.Paid}})
			},
			want: counts{Acknowledged: 1, Paid: 1, PaidButFailed: 1, ProviderPaid: 1, ProviderCalls: 1},
		},
		{
			name: "paid-but-unreported: paid at the provider, the ledger still retrying",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.ProviderPaid([]history.Payment{paid("w1", "t1", 1)})
				h.Finals([]history.Final{final("w1", "t1", "retrying", 2)})
				h.FinanceStatuses(map[string][]string{})
			},
			want: counts{Acknowledged: 1, Lost: 1, PaidButUnreported: 1, ProviderPaid: 1},
		},
		{
			name: "an unanswered payment asked again past the attempts until it is paid",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 5, 503), call("w1", "w1", "t1", 9, 503),
					call("w1", "w1", "t1", 14, 503), call("w1", "w1", "t1", 20, 200)})
				h.ProviderPaid([]history.Payment{paid("w1", "t1", 1)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 5)})
				h.FinanceStatuses(map[string][]string{"w1": {history.Paid, history.Paid}})
			},
			want: counts{Acknowledged: 1, Paid: 1, Recovered: 1, ProviderPaid: 1, SameKeyRepeats: 3, ProviderCalls: 4},
			ok:   true,
		},
		{
			name: "cancels without an answer may or may not have happened",
			build: func(h *history.History) {
				for i, id := range []string{"w1", "w2", "w3", "w4"} {
					expect := history.Paid
					if id == "w4" {
						expect = history.Failed
					}
					tag := "t" + id[1:]
					h.Create(tag, "u", "k"+id[1:], expect, 202, id, t0.Add(time.Duration(i)*time.Millisecond))
				}
				h.Cancel("w1", 0) // happened
				h.Cancel("w2", 0) // did not: paid
				h.Cancel("w3", 503)
				h.Cancel("w3", 409) // too late by then, and still indeterminate
				h.Cancel("w4", 0)
				h.Cancel("w4", 0)
				h.ProviderCalls([]history.ProviderCall{call("w2", "w2", "t2", 1, 200), call("w3", "w3", "t3", 1, 200), call("w4", "w4", "t4", 1, 400)})
				h.Finals([]history.Final{final("w1", "t1", history.Cancelled, 0), final("w2", "t2", history.Paid, 1),
					final("w3", "t3", history.Paid, 1), final("w4", "t4", history.Failed, 1)})
				h.FinanceStatuses(map[string][]string{"w2": {history.Paid}, "w3": {history.Paid}, "w4": {history.Failed}})
			},
			want: counts{Acknowledged: 4, Paid: 2, Failed: 1, Cancelled: 1, ProviderPaid: 2, ProviderCalls: 3},
			ok:   true,
		},
		{
			name: "a cancel answered 200 after one without an answer must stick",
			build: func(h *history.History) {
				h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
				h.Cancel("w1", 0)
				h.Cancel("w1", 200)
				h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 1, 200)})
				h.Finals([]history.Final{final("w1", "t1", history.Paid, 1)})
				h.FinanceStatuses(map[string][]string{"w1": {history.Paid}})
			},
			want: counts{Acknowledged: 1, Paid: 1, Inconsistent: 1, ProviderPaid: 1, ProviderCalls: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := history.New()
			tc.build(h)
			r := h.Check(history.Options{MaxAttempts: 3})
			if diff := cmp.Diff(tc.want, countsOf(r), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("counts (-want +got):\n%s\n%s\nproblems: %q", diff, r, r.Problems)
			}
			if r.OK() != tc.ok {
				t.Errorf("OK() = %v, want %v: %s %q", r.OK(), tc.ok, r, r.Problems)
			}
		})
	}
}

// TestCheckNeedsTheProviderTruth: a payment whose answer was lost is seen
// only through the provider's truth; without it the same history passes.
func TestCheckNeedsTheProviderTruth(t *testing.T) {
	build := func() *history.History {
		h := history.New()
		h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
		h.ProviderCalls([]history.ProviderCall{call("w1", "w1", "t1", 5, 503), call("w1", "w1", "t1", 9, 503), call("w1", "w1", "t1", 14, 503)})
		h.Finals([]history.Final{final("w1", "t1", history.Failed, 3)})
		h.FinanceStatuses(map[string][]string{"w1": {history.Failed}})
		return h
	}
	if r := build().Check(history.Options{MaxAttempts: 3}); !r.OK() {
		t.Fatalf("without the truth: %s %q, want it to pass (nothing shows the payment)", r, r.Problems)
	}
	h := build()
	h.ProviderPaid([]history.Payment{paid("w1", "t1", 1)})
	if r := h.Check(history.Options{MaxAttempts: 3}); r.OK() || r.PaidButFailed != 1 {
		t.Fatalf("with the truth: %s, want paid-but-failed 1", r)
	}
}

// TestFinanceCountsStandForTheLedgerStatus: where only counts of finance
// messages are recorded, each is taken as the ledger's final status.
func TestFinanceCountsStandForTheLedgerStatus(t *testing.T) {
	h := history.New()
	h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
	h.ProviderPaid([]history.Payment{paid("w1", "t1", 1)})
	h.Finals([]history.Final{final("w1", "t1", history.Failed, 8)})
	h.Finance(map[string]int{"w1": 1})
	if r := h.Check(history.Options{MaxAttempts: 8}); r.PaidButFailed != 1 || r.PaidButUnreported != 1 {
		t.Fatalf("%s, want paid-but-failed 1 and paid-but-unreported 1", r)
	}
}

func TestCheckWithoutFinalsFails(t *testing.T) {
	h := history.New()
	h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
	if r := h.Check(history.Options{}); r.OK() {
		t.Fatalf("a history without final states passed: %s", r)
	}
}

func TestAnswerOf(t *testing.T) {
	for status, want := range map[int]history.Answer{
		0: history.Unknown, 200: history.Acked, 202: history.Acked, 400: history.Refused, 409: history.Refused,
		422: history.Refused, 408: history.Unknown, 429: history.Unknown, 500: history.Unknown, 503: history.Unknown,
	} {
		if got := history.AnswerOf(status); got != want {
			t.Errorf("AnswerOf(%d) = %s, want %s", status, got, want)
		}
	}
}

func TestCheckCountsLateFirstTriesAsRecovered(t *testing.T) {
	h := history.New()
	h.Create("t1", "u", "k1", history.Paid, 202, "w1", t0)
	h.Create("t2", "u", "k2", history.Paid, 202, "w2", t0)
	h.Create("t3", "u", "k3", history.Paid, 202, "w3", t0)
	h.Delivered("w3", t0.Add(3*time.Second)) // deliveries, where seen, come first
	h.ProviderCalls([]history.ProviderCall{
		call("w1", "w1", "t1", 5000, 200), // reaped and dispatched again, say
		call("w2", "w2", "t2", 100, 200),
		call("w3", "w3", "t3", 100, 200),
	})
	h.Finals([]history.Final{final("w1", "t1", history.Paid, 1), final("w2", "t2", history.Paid, 1), final("w3", "t3", history.Paid, 1)})
	h.Finance(map[string]int{"w1": 1, "w2": 1, "w3": 1})
	r := h.Check(history.Options{LateAfter: 2 * time.Second})
	if r.Recovered != 2 || r.Late != 2 || !r.OK() {
		t.Fatalf("%s, want w1 and w3 recovered late", r)
	}
	if r := h.Check(history.Options{}); r.Recovered != 0 {
		t.Fatalf("without LateAfter: %s, want nothing recovered", r)
	}
}
