package stall_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/stall"
	"github.com/hourglass/hourglass/shared/signedpost"
)

// provider is a payout provider that records every request it receives.
type provider struct {
	mu   sync.Mutex
	got  []string
	srv  *httptest.Server
	http *http.Client
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.got = append(p.got, string(body))
		n := len(p.got)
		p.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("paid " + string(body) + " as request " + strconv.Itoa(n)))
	}))
	t.Cleanup(p.srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p.http = &http.Client{Transport: stall.Transport(tr)}
	return p
}

func (p *provider) received() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// sent is what a sender saw of its request.
type sent struct {
	wrote  atomic.Bool // httptrace: the request was written
	status int
	body   string
}

// pay returns an actor that POSTs body to the provider, as the payout step
// does.
func (p *provider) pay(body string, out *sent) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(info httptrace.WroteRequestInfo) {
				if info.Err == nil {
					out.wrote.Store(true)
				}
			},
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.srv.URL+"/payout", bytes.NewReader([]byte(body)))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", "w1")
		resp, err := p.http.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		got, err := io.ReadAll(resp.Body)
		out.status, out.body = resp.StatusCode, string(got)
		return err
	}
}

// isTimeout reports whether err looks like net/http's own timeout.
func isTimeout(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) && ue.Timeout() && errors.Is(err, context.DeadlineExceeded)
}

func TestLateDeliveryReachesTheServerAfterTheSenderTimedOut(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	s := stall.New(t)

	var first, second sent
	a1 := s.Go(ctx, "attempt-1", p.pay("attempt-1", &first))
	if a1.At() != "http POST /payout" {
		t.Fatalf("attempt-1 at %q", a1.At())
	}
	late := s.GiveUp(a1)
	if !a1.Done() || !isTimeout(a1.Err()) {
		t.Fatalf("attempt-1: %v; want a timeout as net/http gives it", a1.Err())
	}
	if !first.wrote.Load() {
		t.Fatal("attempt-1 does not know its request left: a sender must count it as maybe received")
	}
	if got := p.received(); len(got) != 0 {
		t.Fatalf("the provider got %v before the late delivery", got)
	}

	a2 := s.Go(ctx, "attempt-2", p.pay("attempt-2", &second))
	if err := s.Finish(a2); err != nil || second.status != http.StatusCreated {
		t.Fatalf("attempt-2: %v, %d", err, second.status)
	}
	if l := s.Lates(); len(l) != 1 || l[0].ID != late.ID || l[0].Actor != "attempt-1" || l[0].Label != "http POST /payout" {
		t.Fatalf("held: %+v", l)
	}
	s.DeliverLate(late.ID)
	if got := p.received(); !slices.Equal(got, []string{"attempt-2", "attempt-1"}) {
		t.Fatalf("the provider got %v, want attempt-2 then the late attempt-1", got)
	}
	resp, ok := late.Reply.(*http.Response)
	if !ok || resp.StatusCode != http.StatusCreated || string(late.Body) != "paid attempt-1 as request 2" || late.Err != nil {
		t.Fatalf("the late answer: %+v %q", late, late.Body)
	}
	if first.status != 0 {
		t.Fatal("the sender saw the late answer")
	}
}

func TestHTTPFates(t *testing.T) {
	ctx := context.Background()
	t.Run("lose the response", func(t *testing.T) {
		p := newProvider(t)
		s := stall.New(t)
		var out sent
		a := s.Go(ctx, "payout", p.pay("w1", &out))
		late := s.LoseReply(a)
		if !isTimeout(a.Err()) || !out.wrote.Load() || out.status != 0 {
			t.Fatalf("sender: %v, wrote %v, status %d", a.Err(), out.wrote.Load(), out.status)
		}
		if got := p.received(); !slices.Equal(got, []string{"w1"}) {
			t.Fatalf("the provider got %v", got)
		}
		if string(late.Body) != "paid w1 as request 1" || !late.Delivered {
			t.Fatalf("the lost answer: %+v", late)
		}
	})
	t.Run("resend", func(t *testing.T) {
		p := newProvider(t)
		s := stall.New(t)
		var out sent
		a := s.Go(ctx, "payout", p.pay("w1", &out))
		s.Resend(a)
		if a.Err() != nil || out.body != "paid w1 as request 2" {
			t.Fatalf("sender: %v, %q", a.Err(), out.body)
		}
		if got := p.received(); !slices.Equal(got, []string{"w1", "w1"}) {
			t.Fatalf("the provider got %v", got)
		}
	})
	t.Run("fail before it leaves", func(t *testing.T) {
		p := newProvider(t)
		s := stall.New(t)
		var out sent
		a := s.Go(ctx, "payout", p.pay("w1", &out))
		s.Fail(a)
		if !errors.Is(a.Err(), stall.ErrFailed) || out.wrote.Load() {
			t.Fatalf("sender: %v, wrote %v", a.Err(), out.wrote.Load())
		}
		if got := p.received(); len(got) != 0 {
			t.Fatalf("the provider got %v", got)
		}
	})
	t.Run("step", func(t *testing.T) {
		p := newProvider(t)
		s := stall.New(t)
		var out sent
		a := s.Go(ctx, "payout", p.pay("w1", &out))
		s.Step(a)
		if a.Err() != nil || out.status != http.StatusCreated || !out.wrote.Load() {
			t.Fatalf("sender: %v, %d", a.Err(), out.status)
		}
	})
	t.Run("abort drops a held request", func(t *testing.T) {
		p := newProvider(t)
		s := stall.New(t)
		var out sent
		s.GiveUp(s.Go(ctx, "payout", p.pay("w1", &out)))
		s.Abort()
		if len(s.Lates()) != 0 || len(p.received()) != 0 {
			t.Fatal("a held request outlived the process")
		}
	})
}

// The payout client's own code reads a given-up request as a timeout of a
// request that left, and a failed one as a request that never did.
func TestSignedPostSeesARealTimeout(t *testing.T) {
	p := newProvider(t)
	ep, err := signedpost.New(signedpost.Options{
		Name: "payout", Party: "provider", URL: p.srv.URL + "/payout",
		Secret: []byte("s"), Timeout: time.Hour, HTTPClient: p.http,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	post := func(ctx context.Context) error {
		_, err := ep.Post(ctx, []byte(`{"withdrawal_id":"w1"}`), "w1")
		return err
	}
	s := stall.New(t)
	gaveUp := s.Go(ctx, "gave-up", post)
	s.GiveUp(gaveUp)
	var pe *signedpost.PostError
	if !errors.As(gaveUp.Err(), &pe) || !pe.Sent || pe.Timeout != time.Hour {
		t.Fatalf("given up: %#v", gaveUp.Err())
	}
	failed := s.Go(ctx, "failed", post)
	s.Fail(failed)
	if !errors.As(failed.Err(), &pe) || pe.Sent || pe.Timeout != 0 {
		t.Fatalf("failed: %#v", failed.Err())
	}
}
