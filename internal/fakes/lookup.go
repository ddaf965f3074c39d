package fakes

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/hourglass/hourglass/shared/signature"
)

// Payment is one payout the provider made: its truth.
type Payment struct {
	Key string
	Payout
	PayoutID string
	At       time.Time
}

// refusedForGood reports whether status is the provider's final no to a
// payout: a 4xx other than 408 and 429 (retry later), 401 and 403 (the
// caller's credentials) and 409 (the key still in progress).
func refusedForGood(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict:
		return false
	}
	return status >= 400 && status < 500
}

// lookup answers the payout status lookup, GET <URL>/<withdrawal id>,
// signed like a payout call over the withdrawal id (the GET has no body),
// from the provider's truth: 200 paid or failed, else 404 (never received,
// or received and not acted on, as after a 5xx).
func (p *Provider) lookup(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/")
	p.mu.Lock()
	secret, rekeyed := p.secret, p.rekeyed
	p.mu.Unlock()
	if err := signature.Verify(secret, r.Header.Get(signature.Header), []byte(id), time.Now(), time.Minute); err != nil {
		if !rekeyed {
			p.t.Errorf("provider: lookup %s: bad signature: %v", r.URL.Path, err)
		}
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	p.mu.Lock()
	p.lookups++
	payoutID, paid := p.paid[id]
	refused := p.refused[id]
	p.mu.Unlock()
	answer := map[string]string{}
	switch {
	case paid:
		answer["status"], answer["payout_id"] = "paid", payoutID
	case refused:
		answer["status"] = "failed"
	default:
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// Lookups is the number of status lookups answered.
func (p *Provider) Lookups() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookups
}
