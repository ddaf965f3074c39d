// Package fakes holds the outside parties for tests: an idempotent payout
// provider and a finance endpoint, both real HTTP servers that check the
// signatures Hourglass sends. The provider keeps its own truth (what it
// paid) apart from what it answered, because an answer can be lost on the
// way back while the payment stands.
package fakes

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Provider is an idempotent payout provider: it pays each idempotency key
// once and answers repeats with the same payout id. Script makes its first
// answers fail with the given statuses (200 entries pass).
type Provider struct {
	URL string

	t      testing.TB
	secret []byte
	delay  time.Duration

	mu     sync.Mutex
	script []int
	rule   Rule
	calls  map[string]int
	paid   map[string]string
	bodies map[string][]byte
	log    []Call
	// payments is the provider's truth: every key it paid, when and for
	// whom, whether or not an answer ever reached the caller.
	payments []Payment
	// refused holds the keys refused for good (a 4xx verdict), for lookups.
	refused map[string]bool
	lookups int
	// rekeyed: the signing key was rotated (Rekey); a request signed with
	// another key is then answered 401, as a real provider would, instead
	// of failing the test. badSigs counts those.
	rekeyed bool
	badSigs int
}

// Rekey makes the provider accept only signatures made with secret (the old
// key revoked), answering others 401.
func (p *Provider) Rekey(secret string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secret, p.rekeyed = []byte(secret), true
}

// BadSignatures counts the requests refused 401 since Rekey.
func (p *Provider) BadSignatures() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.badSigs
}

// Rule decides the answer to the n-th call (from 1) under an idempotency
// key: the status (0 or 200 pays) and how long the call takes first. A slow
// call that pays has paid even if the caller stopped waiting, as a real
// provider would have.
type Rule func(key string, body Payout, n int) (status int, delay time.Duration)

// Payout is the part of a payout request the fakes look at.
type Payout struct {
	WithdrawalID string `json:"withdrawal_id"`
	UserID       string `json:"user_id"`
	Destination  string `json:"destination"`
}

// Call is one call the provider answered.
type Call struct {
	Key string
	Payout
	// At is when the call arrived; Status what it answered (after Delay);
	// PayoutID the payout it answered with, if it paid.
	At       time.Time
	Delay    time.Duration
	Status   int
	PayoutID string
}

// NewProvider starts a Provider that checks signatures made with secret.
func NewProvider(t testing.TB, secret string, script ...int) *Provider {
	p := &Provider{t: t, secret: []byte(secret), script: script,
		calls: map[string]int{}, paid: map[string]string{}, bodies: map[string][]byte{}, refused: map[string]bool{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Slow makes every call take d, as a real provider's round trip does.
func (p *Provider) Slow(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

// Decide answers calls by r once the script, if any, is used up.
func (p *Provider) Decide(r Rule) { p.mu.Lock(); p.rule = r; p.mu.Unlock() }

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		p.lookup(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	secret, rekeyed := p.secret, p.rekeyed
	p.mu.Unlock()
	if err := signature.Verify(secret, r.Header.Get(signature.Header), body, time.Now(), time.Minute); err != nil {
		if !rekeyed {
			p.t.Errorf("provider: bad signature: %v", err)
		}
		p.mu.Lock()
		p.badSigs++
		p.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	var payout Payout
	_ = json.Unmarshal(body, &payout)
	p.mu.Lock()
	delay := p.delay
	p.calls[key]++
	p.bodies[key] = body
	status := http.StatusOK
	switch {
	case len(p.script) > 0:
		status, p.script = p.script[0], p.script[1:]
	case p.rule != nil:
		var d time.Duration
		status, d = p.rule(key, payout, p.calls[key])
		status = cmp.Or(status, http.StatusOK)
		delay += d
	}
	if status == http.StatusOK {
		if _, ok := p.paid[key]; !ok {
			p.paid[key] = "po_" + key
			p.payments = append(p.payments, Payment{Key: key, Payout: payout, PayoutID: p.paid[key], At: time.Now()})
		}
	}
	if refusedForGood(status) {
		p.refused[key] = true
	}
	payoutID := p.paid[key]
	call := Call{Key: key, Payout: payout, At: time.Now(), Delay: delay, Status: status}
	if status == http.StatusOK {
		call.PayoutID = payoutID
	}
	p.log = append(p.log, call)
	p.mu.Unlock()
	time.Sleep(delay)
	if status != http.StatusOK {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error":"scripted failure"}`))
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"payout_id": payoutID})
}

// Calls is the number of calls made under key, and whether key was paid.
func (p *Provider) Calls(key string) (calls int, paid bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, paid = p.paid[key]
	return p.calls[key], paid
}

// Paid is the number of distinct keys paid.
func (p *Provider) Paid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.paid)
}

// TotalCalls is the number of calls under any key.
func (p *Provider) TotalCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

// Log returns every call answered so far, in arrival order.
func (p *Provider) Log() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.log...)
}

// Payments returns what the provider paid, one entry per key, in the order
// paid: its truth, which holds whether or not the caller ever got the answer.
func (p *Provider) Payments() []Payment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Payment(nil), p.payments...)
}

// Body is the last request body sent under key.
func (p *Provider) Body(key string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bodies[key]
}

// Finance records the finance messages posted to it. It checks that each
// one's Idempotency-Key is "<withdrawal_id>:<status>" (SPEC.md, invariant 4).
// (Package finance's own tests use this package, so it cannot call
// finance.DedupKey.)
type Finance struct {
	URL string

	mu     sync.Mutex
	msgs   []withdrawal.Processed
	refuse func(id string, n int) int
	posts  map[string]int
}

// Refuse makes the endpoint answer the n-th post (from 1) about withdrawal
// id with the status f returns, when it is not 0 or 200; a refused message
// is not recorded.
func (f *Finance) Refuse(fn func(id string, n int) int) { f.mu.Lock(); f.refuse = fn; f.mu.Unlock() }

// NewFinance starts a Finance endpoint that checks signatures made with secret.
func NewFinance(t testing.TB, secret string) *Finance {
	f := &Finance{posts: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := signature.Verify([]byte(secret), r.Header.Get(signature.Header), body, time.Now(), time.Minute); err != nil {
			t.Errorf("finance: bad signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var m withdrawal.Processed
		key := r.Header.Get("Idempotency-Key")
		if err := json.Unmarshal(body, &m); err != nil || m.WithdrawalID == "" || key != m.WithdrawalID+":"+string(m.Status) {
			t.Errorf("finance: bad message %s under key %q (%v)", body, key, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.posts[m.WithdrawalID]++
		status := 0
		if f.refuse != nil {
			status = f.refuse(m.WithdrawalID, f.posts[m.WithdrawalID])
		}
		if status != 0 && status != http.StatusOK {
			f.mu.Unlock()
			w.WriteHeader(status)
			return
		}
		f.msgs = append(f.msgs, m)
		f.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Of returns the messages about withdrawal id.
func (f *Finance) Of(id string) []withdrawal.Processed {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []withdrawal.Processed
	for _, m := range f.msgs {
		if m.WithdrawalID == id {
			out = append(out, m)
		}
	}
	return out
}

// IDs returns how many messages each withdrawal id got.
func (f *Finance) IDs() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, m := range f.msgs {
		out[m.WithdrawalID]++
	}
	return out
}

// Statuses returns, per withdrawal id, the status of every message about it
// in the order received ("paid", "failed", …).
func (f *Finance) Statuses() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for _, m := range f.msgs {
		out[m.WithdrawalID] = append(out[m.WithdrawalID], string(m.Status))
	}
	return out
}
