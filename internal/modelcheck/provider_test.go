package modelcheck_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/signature"
)

// behavior is how the provider model answers one payout request.
type behavior int

const (
	payAnswer   behavior = iota // pays, answers 200
	payNoAnswer                 // pays, then drops the connection: the answer never comes
	payHang                     // pays, then answers after the client gave up
	refuse                      // refuses the payout for good: 422
	inProgress                  // takes the request, settles it later: 409
	reject401                   // refuses our credentials: 401, nothing done
	busy429                     // 429, nothing done
	broken5xx                   // 503, nothing done
	resetUnread                 // drops the connection after reading, nothing done
	behaviors
)

var behaviorNames = [...]string{"pay", "pay-no-answer", "pay-hang", "refuse", "409", "401", "429", "503", "reset"}

func (b behavior) String() string { return behaviorNames[b] }

// lookupBehavior is how the provider model answers one status lookup.
type lookupBehavior int

const (
	lookTruth lookupBehavior = iota // the truth
	look5xx                         // 503: tells nothing
	lookReset                       // drops the connection: tells nothing
	lookups
)

// truth is what the provider knows of one withdrawal: the money's truth.
type truth struct {
	// received: the provider took a request for it (and may act on it).
	received   bool
	receivedAt time.Time
	// status: "" (nothing), pending, paid, refused, returned.
	status   string
	payoutID string
	// payouts counts the payouts made: more than one is money paid twice.
	payouts int
}

func (t truth) paid() bool { return t.status == "paid" || t.status == "returned" }

// event is a callback the provider sends (and may send again, or late).
type event struct {
	ID, Withdrawal, Status, PayoutID string
}

// provider is the payout provider's model behind a real HTTP server: it
// keeps idempotency keys for window (then forgets them, as providers do, so
// a request sent blind after that pays again), answers the behaviors it is
// told to, and keeps the truth of what it paid.
type provider struct {
	srv    *httptest.Server
	secret []byte
	clk    *clock.Fake
	window time.Duration

	mu      sync.Mutex
	truths  map[string]*truth
	posts   []behavior
	looks   []lookupBehavior
	events  []event
	calls   int
	onCall  func() // after a request is acted on, before it is answered
	hangFor time.Duration
}

func newProvider(secret []byte, clk *clock.Fake, window, hang time.Duration) *provider {
	p := &provider{secret: secret, clk: clk, window: window, hangFor: hang, truths: map[string]*truth{}}
	p.srv = httptest.NewServer(p)
	return p
}

// reset forgets everything, for the next run.
func (p *provider) reset(clk *clock.Fake) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clk, p.truths, p.posts, p.looks, p.events, p.calls, p.onCall = clk, map[string]*truth{}, nil, nil, nil, 0, nil
}

// script sets how the next requests are answered (the rest truthfully).
func (p *provider) script(posts []behavior, looks []lookupBehavior, onCall func()) {
	p.mu.Lock()
	p.posts, p.looks, p.onCall = posts, looks, onCall
	p.mu.Unlock()
}

func (p *provider) truth(id string) truth {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.truths[id]; ok {
		return *t
	}
	return truth{}
}

func (p *provider) emitLocked(id string, t *truth, status string) {
	p.events = append(p.events, event{ID: fmt.Sprintf("ev-%d", len(p.events)+1), Withdrawal: id, Status: status, PayoutID: t.payoutID})
}

// settle ends a pending request: paid or refused (the provider's own pace).
func (p *provider) settle(id string, pay bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.truths[id]
	if !ok || t.status != "pending" {
		return false
	}
	if pay {
		t.status, t.payoutID = "paid", "po_"+id
		t.payouts++
		p.emitLocked(id, t, "paid")
	} else {
		t.status = "refused"
		p.emitLocked(id, t, "failed")
	}
	return true
}

// giveBack makes a paid payout come back (a closed account, say).
func (p *provider) giveBack(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.truths[id]
	if !ok || t.status != "paid" {
		return false
	}
	t.status = "returned"
	p.emitLocked(id, t, "returned")
	return true
}

func (p *provider) pending() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, t := range p.truths {
		if t.status == "pending" {
			ids = append(ids, id)
		}
	}
	return ids
}

func (p *provider) allEvents() []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]event(nil), p.events...)
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := strings.TrimPrefix(r.URL.Path, "/")
	signed := body
	if r.Method == http.MethodGet {
		signed = []byte(id)
	}
	if err := signature.Verify(p.secret, r.Header.Get(signature.Header), signed, p.clk.Now(), 5*time.Minute); err != nil {
		http.Error(w, "bad signature: "+err.Error(), http.StatusBadRequest) // a bug of ours: the checker sees the payout refused
		return
	}
	if r.Method == http.MethodGet {
		p.lookup(w, id)
		return
	}
	var req struct {
		WithdrawalID string `json:"withdrawal_id"`
	}
	_ = json.Unmarshal(body, &req)
	key := r.Header.Get("Idempotency-Key")
	if key != req.WithdrawalID || key == "" {
		http.Error(w, "idempotency key is not the withdrawal id", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls++
	b := payAnswer
	if len(p.posts) > 0 {
		b, p.posts = p.posts[0], p.posts[1:]
	}
	t := p.truths[key]
	if t == nil {
		t = &truth{}
		p.truths[key] = t
	}
	now := p.clk.Now()
	status, payoutID := p.actLocked(key, t, b, now)
	onCall := p.onCall
	p.mu.Unlock()
	if onCall != nil {
		onCall()
	}
	switch b {
	case payNoAnswer, resetUnread:
		drop(w)
		return
	case payHang:
		time.Sleep(p.hangFor)
	}
	if status != http.StatusOK {
		http.Error(w, `{"error":"model says no"}`, status)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"payout_id": payoutID})
}

// actLocked applies request behavior b under key and returns the status
// the provider answers (if it answers).
func (p *provider) actLocked(key string, t *truth, b behavior, now time.Time) (int, string) {
	switch b {
	case reject401:
		return http.StatusUnauthorized, ""
	case busy429:
		return http.StatusTooManyRequests, ""
	case broken5xx:
		return http.StatusServiceUnavailable, ""
	case resetUnread:
		return 0, ""
	}
	if t.received && now.Sub(t.receivedAt) <= p.window {
		// A key it remembers: the first answer again (idempotency).
		switch t.status {
		case "paid", "returned":
			return http.StatusOK, t.payoutID
		case "pending":
			return http.StatusConflict, ""
		case "refused":
			return http.StatusUnprocessableEntity, ""
		}
	}
	// A request it does not know (or whose key it forgot): a new payout.
	t.received, t.receivedAt = true, now
	switch b {
	case refuse:
		if !t.paid() {
			t.status = "refused"
			p.emitLocked(key, t, "failed")
		}
		return http.StatusUnprocessableEntity, ""
	case inProgress:
		if t.paid() {
			t.payouts++ // a forgotten key: this request will pay again
		} else {
			t.status = "pending"
		}
		return http.StatusConflict, ""
	}
	t.payouts++
	if !t.paid() {
		t.status, t.payoutID = "paid", "po_"+key
		p.emitLocked(key, t, "paid")
	}
	return http.StatusOK, t.payoutID
}

func (p *provider) lookup(w http.ResponseWriter, id string) {
	p.mu.Lock()
	b := lookTruth
	if len(p.looks) > 0 {
		b, p.looks = p.looks[0], p.looks[1:]
	}
	t, known := p.truths[id]
	var tr truth
	if known {
		tr = *t
	}
	p.mu.Unlock()
	switch b {
	case look5xx:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case lookReset:
		drop(w)
		return
	}
	switch {
	case !known || !tr.received:
		w.WriteHeader(http.StatusNotFound)
	case tr.paid():
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "paid", "payout_id": tr.payoutID})
	case tr.status == "refused":
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "failed", "reason": "refused"})
	default:
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "pending"})
	}
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	if h, ok := w.(http.Hijacker); ok {
		if c, _, err := h.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
