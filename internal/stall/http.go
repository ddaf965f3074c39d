package stall

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
)

// Transport wraps next (nil: http.DefaultTransport) so that every request
// of an actor is a point labelled "http <METHOD> <path>", parked before it
// leaves. At the point the checker may also give up on it (GiveUp: the
// sender times out at once, the request is held and may reach the server
// later, by DeliverLate) or lose its response (LoseReply: the server acts,
// the sender times out). A timeout is context.DeadlineExceeded, which
// http.Client wraps in a *url.Error as it does a real one; a request the
// sender gave up on counts as written (httptrace's WroteRequest fires), as
// it would have left. Requests without an actor pass straight through.
func Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{next: next}
}

type transport struct{ next http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	a := actorOf(ctx)
	if a == nil {
		return t.next.RoundTrip(req)
	}
	label := "http " + req.Method + " " + req.URL.Path
	r := a.park(label, true)
	switch r.v {
	case proceed:
		return t.next.RoundTrip(req.WithContext(detach(ctx)))
	case loseReply, resend:
		body, err := drain(req)
		if err != nil {
			return nil, err
		}
		// The detached context keeps the sender's trace: its request is
		// written, as it would be.
		t.send(detach(ctx), req, body, r.late)
		if r.v == resend {
			return t.next.RoundTrip(withBody(detach(ctx), req, body))
		}
		return nil, context.DeadlineExceeded
	case giveUp:
		body, err := drain(req)
		if err != nil {
			return nil, err
		}
		held := req.Clone(context.Background())
		r.late.deliver = func(l *Late) { t.send(context.Background(), held, body, l) }
		if trace := httptrace.ContextClientTrace(ctx); trace != nil {
			if trace.WroteHeaders != nil {
				trace.WroteHeaders()
			}
			if trace.WroteRequest != nil {
				trace.WroteRequest(httptrace.WroteRequestInfo{})
			}
		}
		return nil, context.DeadlineExceeded
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return nil, r.v.err(label)
}

// send sends a copy of req with body under ctx and records its answer in l.
func (t *transport) send(ctx context.Context, req *http.Request, body []byte, l *Late) {
	resp, err := t.next.RoundTrip(withBody(ctx, req, body))
	l.Delivered, l.Err = true, err
	if err != nil {
		return
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(got))
	l.Reply, l.Body, l.Err = resp, got, err
}

// drain reads and closes req's body: a round tripper must close it, and a
// copy sent later needs what it held.
func drain(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer func() { _ = req.Body.Close() }() // read in full: nothing to report
	return io.ReadAll(req.Body)
}

// withBody is a copy of req under ctx whose body is body.
func withBody(ctx context.Context, req *http.Request, body []byte) *http.Request {
	c := req.Clone(ctx)
	c.ContentLength = int64(len(body))
	if body == nil {
		c.Body, c.GetBody = http.NoBody, nil
		return c
	}
	c.Body = io.NopCloser(bytes.NewReader(body))
	if req.GetBody != nil {
		// Rewindable as the original was: net/http may resend it when its
		// connection broke before an answer came, and only then.
		c.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return c
}
