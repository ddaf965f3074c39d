// Package fakes holds the outside parties for tests: an idempotent payout
// provider and a finance endpoint, both real HTTP servers that check the
// signatures Hourglass sends.
package fakes

import (
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
	calls  map[string]int
	paid   map[string]string
	bodies map[string][]byte
}

// NewProvider starts a Provider that checks signatures made with secret.
func NewProvider(t testing.TB, secret string, script ...int) *Provider {
	p := &Provider{t: t, secret: []byte(secret), script: script,
		calls: map[string]int{}, paid: map[string]string{}, bodies: map[string][]byte{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Slow makes every call take d, as a real provider's round trip does.
func (p *Provider) Slow(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := signature.Verify(p.secret, r.Header.Get(signature.Header), body, time.Now(), time.Minute); err != nil {
		p.t.Errorf("provider: bad signature: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	delay := p.delay
	p.calls[key]++
	p.bodies[key] = body
	status := http.StatusOK
	if len(p.script) > 0 {
		status, p.script = p.script[0], p.script[1:]
	}
	if status == http.StatusOK {
		if _, ok := p.paid[key]; !ok {
			p.paid[key] = "po_" + key
		}
	}
	payoutID := p.paid[key]
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

// Body is the last request body sent under key.
func (p *Provider) Body(key string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bodies[key]
}

// Finance records the finance messages posted to it.
type Finance struct {
	URL string

	mu   sync.Mutex
	msgs []withdrawal.Processed
}

// NewFinance starts a Finance endpoint that checks signatures made with secret.
func NewFinance(t testing.TB, secret string) *Finance {
	f := &Finance{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := signature.Verify([]byte(secret), r.Header.Get(signature.Header), body, time.Now(), time.Minute); err != nil {
			t.Errorf("finance: bad signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var m withdrawal.Processed
		if err := json.Unmarshal(body, &m); err != nil || r.Header.Get("Idempotency-Key") != m.WithdrawalID {
			t.Errorf("finance: bad message %s (%v)", body, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.mu.Lock()
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
