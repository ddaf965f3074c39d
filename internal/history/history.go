// Package history checks a load run's history for lost and duplicated
// withdrawals, in the style of Jepsen's queue checker: the run records what
// clients were told (every create and cancel request and its answer), what
// the payout provider saw (every call: idempotency key, time, answer), what
// finance heard, and, once the run settled, every withdrawal's final ledger
// state; Check then classifies every withdrawal.
//
// A request is acknowledged when the API answered 2xx; refused when it
// answered a 4xx other than 408 and 429 (it changed nothing); otherwise its
// effect is unknown (a 5xx such as 503 during a failover, a timeout, a
// dropped connection): it may or may not have happened, and either is
// correct. That holds for creates (made or not) and cancels (cancelled or
// not) alike.
//
// What the provider paid is judged by its own truth where the run has it
// (ProviderPaid: every payment, whether or not its answer reached the
// consumer), not only by the answers it sent: an answer lost on the way back
// leaves a payment the consumer never heard of, and such a withdrawal must
// still never end failed or cancelled, and finance must hear it was paid.
package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Ledger states the checker knows.
const (
	Paid      = "paid"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Answer classifies what a client was told.
type Answer int

// Answers.
const (
	// Unknown: no answer, or one that leaves the effect open (5xx, 408, 429).
	Unknown Answer = iota
	// Acked: a 2xx.
	Acked
	// Refused: a 4xx that changed nothing.
	Refused
)

// AnswerOf classifies an HTTP status; 0 stands for no answer at all.
func AnswerOf(status int) Answer {
	switch {
	case status >= 200 && status < 300:
		return Acked
	case status == 408 || status == 429:
		return Unknown
	case status >= 400 && status < 500:
		return Refused
	}
	return Unknown
}

func (a Answer) String() string {
	switch a {
	case Acked:
		return "acked"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Create is one withdrawal request, over all the tries a client made with
// its idempotency key.
type Create struct {
	// Tag identifies the request in what the provider sees: the load run
	// gives every request a destination of its own.
	Tag  string
	User string
	Key  string
	// Expect is the final state the run intends: Paid, or Failed for a
	// destination the provider refuses for good.
	Expect string
	// Answer, Status and ID are those of the last try; ID and Due (when
	// the withdrawal falls due) are set when acknowledged.
	Answer Answer
	Status int
	ID     string
	Due    time.Time
	Tries  int
	At     time.Time
}

// Cancel is one cancel request.
type Cancel struct {
	ID     string
	Answer Answer
	Status int
}

// ProviderCall is one call the payout provider answered.
type ProviderCall struct {
	Key          string
	WithdrawalID string
	Tag          string
	At           time.Time
	Status       int
	PayoutID     string
}

// Payment is one payout the provider made (its truth): the idempotency key
// it paid under, for which withdrawal, and when.
type Payment struct {
	Key          string
	WithdrawalID string
	Tag          string
	PayoutID     string
	At           time.Time
}

// Final is a withdrawal's state in the ledger once the run settled.
type Final struct {
	ID       string
	User     string
	Tag      string
	Status   string
	Attempts int
	PayoutID string
}

// History records a run. It is safe for concurrent use.
type History struct {
	mu         sync.Mutex
	creates    map[string]*Create // by tag
	order      []string
	cancels    []Cancel
	deliveries map[string][]time.Time
	calls      []ProviderCall
	payments   []Payment
	finals     map[string]Final
	finance    map[string]int
	// told is the status of every finance message per withdrawal, when the
	// run recorded them (FinanceStatuses); nil otherwise.
	told      map[string][]string
	finalsSet bool
}

// New returns an empty History.
func New() *History {
	return &History{creates: map[string]*Create{}, deliveries: map[string][]time.Time{}, finals: map[string]Final{}, finance: map[string]int{}}
}

// Create records a try of a create request; tries of one request share its
// tag and idempotency key. id and due are the answer's when it is 2xx.
func (h *History) Create(tag, user, key, expect string, status int, id string, due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.creates[tag]
	if !ok {
		c = &Create{Tag: tag, User: user, Key: key, Expect: expect, At: time.Now()}
		h.creates[tag] = c
		h.order = append(h.order, tag)
	}
	c.Tries++
	a := AnswerOf(status)
	// A later refusal (say 409 idempotency_in_flight while an earlier try
	// is still running) does not undo an earlier try's unknown effect.
	if c.Answer == Acked || (a == Refused && c.Answer == Unknown && c.Tries > 1) {
		return
	}
	c.Answer, c.Status = a, status
	if a == Acked {
		c.ID, c.Due = id, due
	}
}

// Cancel records a cancel request of withdrawal id.
func (h *History) Cancel(id string, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancels = append(h.cancels, Cancel{ID: id, Answer: AnswerOf(status), Status: status})
}

// Delivered records one delivery of withdrawal id's job to a consumer, at
// at, where the run can see deliveries.
func (h *History) Delivered(id string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries[id] = append(h.deliveries[id], at)
}

// ProviderCalls records the provider's calls (the whole log, once).
func (h *History) ProviderCalls(calls []ProviderCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls[:0], calls...)
}

// ProviderPaid records the provider's truth (every payment it made, once).
func (h *History) ProviderPaid(payments []Payment) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.payments = append(h.payments[:0], payments...)
}

// Finance records how many finance messages each withdrawal got, where the
// run cannot see what they said: each is then taken to carry the ledger's
// final status.
func (h *History) Finance(msgs map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.finance)
	for id, n := range msgs {
		h.finance[id] = n
	}
	h.told = nil
}

// FinanceStatuses records the status of every finance message per
// withdrawal ("paid", "failed", …), in place of Finance.
func (h *History) FinanceStatuses(msgs map[string][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.finance)
	h.told = map[string][]string{}
	for id, statuses := range msgs {
		h.finance[id] = len(statuses)
		h.told[id] = slices.Clone(statuses)
	}
}

// Finals records every withdrawal the ledger holds once the run settled.
func (h *History) Finals(finals []Final) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.finals)
	for _, f := range finals {
		h.finals[f.ID] = f
	}
	h.finalsSet = true
}

// Acknowledged returns the acknowledged withdrawals: id -> user.
func (h *History) Acknowledged() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	for _, c := range h.creates {
		if c.Answer == Acked {
			out[c.ID] = c.User
		}
	}
	return out
}

// Users returns every user that made a request.
func (h *History) Users() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := map[string]bool{}
	for _, c := range h.creates {
		set[c.User] = true
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// Options tell Check what the run allowed.
type Options struct {
	// MaxAttempts is HOURGLASS_MAX_ATTEMPTS: a withdrawal whose every
	// provider call failed transiently may end failed after that many.
	MaxAttempts int
	// LateAfter, if set, counts a withdrawal as recovered when its first
	// delivery (or, where deliveries are not seen, its first provider call)
	// came that long after its due time: only a takeover gets it there (a
	// reaped lease, the reconciler).
	LateAfter time.Duration
}

// Report is Check's verdict. Lost, Duplicated, Unexpected, Inconsistent,
// Unreported, PaidButFailed and PaidButUnreported are violations; the rest
// describe the run.
type Report struct {
	// Requests counts create requests; Acknowledged, Refused and Unknown
	// split them by their answer.
	Requests, Acknowledged, Refused, Unknown int
	// Paid, Failed, Cancelled count acknowledged withdrawals by final state.
	Paid, Failed, Cancelled int

	// Lost: acknowledged, but not ended as it should (no record, not final,
	// failed though it could have been paid, cancelled without a cancel).
	Lost int
	// Duplicated: paid twice: more than one distinct successful payout for
	// one withdrawal, or any successful payout under an idempotency key that
	// is not the withdrawal's id.
	Duplicated int
	// Unexpected: paid, or recorded, though no request can explain it (never
	// acknowledged and not of unknown effect).
	Unexpected int
	// Inconsistent: the ledger contradicts the provider or a cancel: paid
	// without a successful payout (or with another payout id), a 200 cancel
	// that did not stick.
	Inconsistent int
	// Unreported: paid or failed, but finance never heard of it.
	Unreported int
	// PaidButFailed: the provider paid it (answered 2xx, or paid and its
	// answer never arrived), yet the ledger ended failed or cancelled, or
	// finance was told it failed.
	PaidButFailed int
	// PaidButUnreported: the provider paid it, but finance was never told
	// it was paid.
	PaidButUnreported int
	// ProviderPaid counts the withdrawals the provider paid, by its truth
	// where recorded, else by its 2xx answers.
	ProviderPaid int

	// Recovered: acknowledged and ended correctly, but only after a retry, a
	// redelivery or a takeover (more than one provider call, ledger attempt
	// or delivery, or a first try later than Options.LateAfter); Late
	// counts the last kind.
	Recovered, Late int
	// SameKeyRepeats counts provider calls beyond the first under one key
	// (allowed: the provider is idempotent); SameKeyAfterPaid those made
	// after the key had already been paid.
	SameKeyRepeats, SameKeyAfterPaid int
	// UnknownCreated counts requests of unknown effect that did create a
	// withdrawal (allowed); it ended as the others must.
	UnknownCreated int
	// ProviderCalls is the number of calls the provider answered.
	ProviderCalls int

	// Problems names the first withdrawals behind each violation.
	Problems []string
}

// OK reports whether the run broke no invariant.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Unexpected == 0 && r.Inconsistent == 0 && r.Unreported == 0 &&
		r.PaidButFailed == 0 && r.PaidButUnreported == 0
}

func (r Report) String() string {
	return fmt.Sprintf("requests=%d acknowledged=%d (paid=%d failed=%d cancelled=%d) refused=%d unknown=%d (created=%d) | "+
		"lost=%d duplicated=%d unexpected=%d inconsistent=%d unreported=%d paid_but_failed=%d paid_but_unreported=%d | "+
		"provider_paid=%d recovered=%d (late %d) provider_calls=%d same_key_repeats=%d (after paid %d)",
		r.Requests, r.Acknowledged, r.Paid, r.Failed, r.Cancelled, r.Refused, r.Unknown, r.UnknownCreated,
		r.Lost, r.Duplicated, r.Unexpected, r.Inconsistent, r.Unreported, r.PaidButFailed, r.PaidButUnreported,
		r.ProviderPaid, r.Recovered, r.Late, r.ProviderCalls, r.SameKeyRepeats, r.SameKeyAfterPaid)
}

const maxProblems = 20

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// keyStats is what the provider did under one idempotency key.
type keyStats struct {
	calls   int
	first   time.Time
	paidAt  time.Time
	afterOK int
}

// Check classifies every withdrawal of the history. Call it once the run has
// settled and Finals, ProviderCalls and Finance are recorded.
func (h *History) Check(o Options) Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r Report
	if !h.finalsSet {
		r.Lost = -1
		r.problem("no final ledger states were recorded")
		return r
	}

	// What the provider did, per key and per withdrawal.
	calls := slices.Clone(h.calls)
	slices.SortStableFunc(calls, func(a, b ProviderCall) int { return a.At.Compare(b.At) })
	perKey := map[string]*keyStats{}
	payouts := map[string]map[string]bool{} // withdrawal id -> distinct "key/payout id" paid
	paidBy := map[string]map[string]bool{}  // withdrawal id -> payout ids under its own key
	tagOf := map[string]string{}            // withdrawal id -> tag, from the calls
	r.ProviderCalls = len(calls)
	pay := func(w, key, payoutID string) {
		if payouts[w] == nil {
			payouts[w] = map[string]bool{}
		}
		payouts[w][key+"/"+payoutID] = true
		if key == w {
			if paidBy[w] == nil {
				paidBy[w] = map[string]bool{}
			}
			paidBy[w][payoutID] = true
		}
	}
	for _, c := range calls {
		ks := perKey[c.Key]
		if ks == nil {
			ks = &keyStats{}
			perKey[c.Key] = ks
		}
		ks.calls++
		if ks.first.IsZero() {
			ks.first = c.At
		}
		if !ks.paidAt.IsZero() {
			ks.afterOK++
		}
		if c.WithdrawalID != "" && c.Tag != "" {
			tagOf[c.WithdrawalID] = c.Tag
		}
		if c.Status < 200 || c.Status >= 300 {
			continue
		}
		if ks.paidAt.IsZero() {
			ks.paidAt = c.At
		}
		pay(c.WithdrawalID, c.Key, c.PayoutID)
	}
	// The provider's truth: payments whose answers may never have arrived.
	for _, pm := range h.payments {
		pay(pm.WithdrawalID, pm.Key, pm.PayoutID)
		if pm.WithdrawalID != "" && pm.Tag != "" {
			tagOf[pm.WithdrawalID] = pm.Tag
		}
	}
	for _, ks := range perKey {
		r.SameKeyRepeats += ks.calls - 1
		r.SameKeyAfterPaid += ks.afterOK
	}
	duplicated := map[string]bool{}
	for w, set := range payouts {
		if len(set) > 1 {
			duplicated[w] = true
			r.problem("duplicated: %s paid %d times: %v", w, len(set), keys(set))
			continue
		}
		for kp := range set {
			if !strings.HasPrefix(kp, w+"/") {
				duplicated[w] = true
				r.problem("duplicated: %s paid under another idempotency key (%s)", w, kp)
			}
		}
	}
	r.Duplicated = len(duplicated)

	// The strongest answer to a cancel of each id: acked, else unknown,
	// else refused.
	cancels := map[string]Answer{}
	for _, c := range h.cancels {
		prev, seen := cancels[c.ID]
		if !seen || c.Answer == Acked || (c.Answer == Unknown && prev == Refused) {
			cancels[c.ID] = c.Answer
		}
	}

	paidButFailed := h.judgePaid(&r, payouts)

	byTag := map[string][]Final{}
	for _, f := range h.finals {
		tag := f.Tag
		if tag == "" {
			tag = tagOf[f.ID]
		}
		byTag[tag] = append(byTag[tag], f)
	}
	judged := map[string]bool{} // withdrawal ids a recorded request accounts for
	for _, tag := range h.order {
		c := h.creates[tag]
		r.Requests++
		made := byTag[tag]
		for _, f := range made {
			judged[f.ID] = true
		}
		// own is the withdrawal the request made, if any.
		own := ""
		switch c.Answer {
		case Acked:
			r.Acknowledged++
			own = c.ID
			judged[own] = true
			for _, f := range made {
				if f.ID != c.ID {
					r.Unexpected++
					r.problem("unexpected: request %s (key %s) made %s besides its acknowledged %s", tag, c.Key, f.ID, c.ID)
				}
			}
		case Refused:
			r.Refused++
			for _, f := range made {
				r.Unexpected++
				r.problem("unexpected: request %s was refused (%d) but made %s (%s)", tag, c.Status, f.ID, f.Status)
			}
		default:
			r.Unknown++
			if len(made) > 1 {
				r.Unexpected += len(made) - 1
				r.problem("unexpected: request %s of unknown effect made %d withdrawals", tag, len(made))
			}
			if len(made) > 0 {
				r.UnknownCreated++
				own = made[0].ID
			}
		}
		if own == "" {
			continue
		}
		// Every withdrawal a request made must end right, acknowledged or not.
		f, found := h.finals[own]
		ca, hasCancel := cancels[own]
		v := judge(c, f, found, ca, hasCancel, paidBy[own], len(payouts[own]) > 0, o)
		switch v.kind {
		case "lost":
			if c.Answer == Acked {
				r.Lost++
			} else {
				r.Inconsistent++
			}
			r.problem("lost: %s (request %s, %s): %s", own, tag, c.Answer, v.why)
		case "inconsistent":
			r.Inconsistent++
			r.problem("inconsistent: %s (request %s): %s", own, tag, v.why)
		case "paid-but-failed":
			// Counted by judgePaid, with every other withdrawal the provider paid.
		}
		if !found {
			continue
		}
		if c.Answer == Acked {
			switch f.Status {
			case Paid:
				r.Paid++
			case Failed:
				r.Failed++
			case Cancelled:
				r.Cancelled++
			}
		}
		if (f.Status == Paid || f.Status == Failed) && h.finance[own] == 0 {
			r.Unreported++
			r.problem("unreported: %s ended %s but finance never heard of it", own, f.Status)
		}
		if v.kind != "" || duplicated[own] || paidButFailed[own] || c.Answer != Acked {
			continue
		}
		ks := perKey[own]
		late := h.late(own, c.Due, ks, o.LateAfter)
		if late {
			r.Late++
		}
		if late || (ks != nil && ks.calls > 1) || f.Attempts > 1 || len(h.deliveries[own]) > 1 {
			r.Recovered++
		}
	}
	// Payouts and records no recorded request accounts for.
	for w := range payouts {
		if !judged[w] {
			r.Unexpected++
			r.problem("unexpected: the provider paid %s, which no request explains", w)
		}
	}
	for id, f := range h.finals {
		if !judged[id] && payouts[id] == nil {
			r.Unexpected++
			r.problem("unexpected: the ledger holds %s (%s), which no request explains", id, f.Status)
		}
	}
	return r
}

// judgePaid checks every withdrawal the provider paid against the ledger and
// finance: it must not end failed or cancelled, finance must not be told it
// failed, and finance must be told it was paid. It returns the withdrawals
// found paid-but-failed.
func (h *History) judgePaid(r *Report, payouts map[string]map[string]bool) map[string]bool {
	bad := map[string]bool{}
	for _, w := range keys(payouts) {
		r.ProviderPaid++
		f, found := h.finals[w]
		told := h.toldOf(w, f, found)
		switch {
		case found && (f.Status == Failed || f.Status == Cancelled):
			bad[w] = true
			r.PaidButFailed++
			r.problem("paid-but-failed: %s: the provider paid it (%s) but the ledger ended %s after %d attempts (finance told %v)",
				w, strings.Join(keys(payouts[w]), ","), f.Status, f.Attempts, told)
		case slices.Contains(told, Failed):
			bad[w] = true
			r.PaidButFailed++
			r.problem("paid-but-failed: %s: the provider paid it but finance was told %v", w, told)
		}
		if !slices.Contains(told, Paid) {
			r.PaidButUnreported++
			status := "no record"
			if found {
				status = f.Status
			}
			r.problem("paid-but-unreported: %s: the provider paid it, the ledger says %s, finance was told %v", w, status, told)
		}
	}
	return bad
}

// toldOf is what finance was told of withdrawal w: the recorded statuses, or
// where only counts were recorded, that many of the ledger's final status.
func (h *History) toldOf(w string, f Final, found bool) []string {
	if h.told != nil {
		return h.told[w]
	}
	var out []string
	for range h.finance[w] {
		if found {
			out = append(out, f.Status)
		}
	}
	return out
}

// late reports whether withdrawal id was first tried more than after past
// its due time.
func (h *History) late(id string, due time.Time, ks *keyStats, after time.Duration) bool {
	if after <= 0 || due.IsZero() {
		return false
	}
	var first time.Time
	if ds := h.deliveries[id]; len(ds) > 0 {
		first = slices.MinFunc(ds, func(a, b time.Time) int { return a.Compare(b) })
	} else if ks != nil {
		first = ks.first
	}
	return !first.IsZero() && first.Sub(due) > after
}

type verdict struct{ kind, why string }

// judge decides whether withdrawal f, made by request c, ended as it must.
func judge(c *Create, f Final, found bool, cancel Answer, hasCancel bool, ownPayouts map[string]bool, paid bool, o Options) verdict {
	if !found {
		return verdict{"lost", "no ledger record"}
	}
	switch f.Status {
	case Paid:
		switch {
		case len(ownPayouts) == 0:
			return verdict{"inconsistent", "ledger paid, but the provider never paid it under its own key"}
		case !ownPayouts[f.PayoutID]:
			return verdict{"inconsistent", fmt.Sprintf("ledger payout %s, provider payouts %v", f.PayoutID, keys(ownPayouts))}
		case hasCancel && cancel == Acked:
			return verdict{"inconsistent", "paid after a cancel answered 200"}
		case c.Expect == Failed:
			return verdict{"inconsistent", "paid though the provider refuses its destination"}
		}
	case Failed:
		switch {
		case paid:
			return verdict{"paid-but-failed", "ledger failed, but the provider paid it"}
		case hasCancel && cancel == Acked:
			return verdict{"inconsistent", "failed after a cancel answered 200"}
		case c.Expect != Failed && (o.MaxAttempts == 0 || f.Attempts < o.MaxAttempts):
			return verdict{"lost", fmt.Sprintf("failed after %d attempts though it could be paid", f.Attempts)}
		}
	case Cancelled:
		switch {
		case paid:
			return verdict{"paid-but-failed", "cancelled, but the provider paid it"}
		case !hasCancel:
			return verdict{"lost", "cancelled without a cancel request"}
		case cancel == Refused:
			// A cancel without an answer may have happened: only one
			// whose every try was refused proves it did not.
			return verdict{"inconsistent", "cancelled though the cancel was refused"}
		}
	default:
		return verdict{"lost", fmt.Sprintf("still %s when the run settled", f.Status)}
	}
	return verdict{}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
