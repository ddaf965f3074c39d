// Package signedpost sends signed JSON POSTs to outside parties: the payout
// provider and finance's webhook. It owns what both need to be safe with a
// server we do not control: no redirects, bounded reads, and error text that
// shows neither our secrets nor the URL's credentials. Deciding what an answer
// means is left to the caller.
package signedpost

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signature"
)

// MaxBody bounds what is read of an answer (and again what is drained after
// it): a real answer is small, a broken one may be endless.
const MaxBody = 64 << 10

// Options configures an Endpoint.
type Options struct {
	// Name and Party word New's errors: "<Name>: <Party> url …", as in
	// "payout: provider url …" or "finance: webhook url …".
	Name, Party string
	// URL receives the POSTs: http or https, with a host.
	URL string
	// Secret signs every body; it must not be empty unless Keys is set.
	Secret []byte
	// Keys, if set, replaces Secret: each request is signed with its current
	// key, read when the request is made, so a rotated key is picked up.
	Keys secrets.Source
	// Timeout bounds one POST; 0 means DefaultTimeout, which must then be
	// positive.
	Timeout, DefaultTimeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. It is copied
	// and the copy never follows redirects.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
	// UserAgent is sent when not empty; otherwise net/http's default is.
	UserAgent string
}

// Endpoint is one outside URL that receives signed POSTs. It is safe for
// concurrent use.
type Endpoint struct {
	url       string
	where     string
	secret    []byte
	keys      secrets.Source
	timeout   time.Duration
	client    *http.Client
	clock     clock.Clock
	userAgent string
}

// New checks o and returns an Endpoint.
func New(o Options) (*Endpoint, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		// url's error repeats the input, which may hold credentials.
		return nil, fmt.Errorf("%s: %s url does not parse", o.Name, o.Party)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("%s: %s url %q is not an absolute http(s) url with a host", o.Name, o.Party, redact(u))
	}
	if st, ok := o.Keys.(secrets.Static); (ok && st.Current == "") || (len(o.Secret) == 0 && o.Keys == nil) {
		return nil, fmt.Errorf("%s: %s needs a signing secret", o.Name, o.Party)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%s: negative %s timeout %s", o.Name, o.Party, o.Timeout)
	}
	o.Timeout = cmp.Or(o.Timeout, o.DefaultTimeout)
	if o.Timeout <= 0 {
		// A zero deadline would fail every call before it is sent.
		return nil, fmt.Errorf("%s: no %s timeout", o.Name, o.Party)
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	client := &http.Client{}
	if o.HTTPClient != nil {
		c := *o.HTTPClient // a copy: the caller's client keeps its policy
		client = &c
	}
	// A redirect would resend a signed body to a URL we were never given.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Endpoint{
		url:       u.String(),
		where:     redact(u),
		secret:    bytes.Clone(o.Secret),
		keys:      o.Keys,
		timeout:   o.Timeout,
		client:    client,
		clock:     o.Clock,
		userAgent: o.UserAgent,
	}, nil
}

// Where is the URL without user info, query or fragment, fit for error text.
func (e *Endpoint) Where() string { return e.where }

// Response is an answer, read and closed.
type Response struct {
	StatusCode int
	// Status is the status line as the server sent it, e.g. "502 Bad Gateway".
	Status string
	Header http.Header
	// Body is at most MaxBody bytes of the answer, untrusted.
	Body []byte
	// BodyErr is why reading Body stopped early, if it did.
	BodyErr error

	secrets []string // what Text hides
	key     string   // that signed the request
}

// Redirect is the Location of a 3xx answer (untrusted text), or "".
func (r Response) Redirect() string {
	if r.StatusCode < 300 || r.StatusCode > 399 {
		return ""
	}
	return r.Header.Get("Location")
}

// Text is Body as a string with the request's signature, its MAC and the
// secret replaced by "[redacted]": some servers echo request headers back.
func (r Response) Text() string {
	s := string(r.Body)
	for _, x := range r.secrets {
		s = strings.ReplaceAll(s, x, "[redacted]")
	}
	return s
}

// PostError is a request (a POST, or a Get) that got no answer: it could not
// be built or sent, or no answer came in time.
type PostError struct {
	// Where is the URL as Endpoint.Where gives it.
	Where string
	// Timeout is the endpoint's own limit when that is what ran out; 0 when
	// anything else, the caller's context included, ended the call.
	Timeout time.Duration
	// Err is the cause, without the *url.Error around it: that repeats the
	// full URL, credentials and all.
	Err error
	// Sent: the request was written in full before the call failed, so the
	// server may have acted on it. A request never written in full (no
	// connection, a write that failed, a caller that gave up first) cannot
	// have been acted on: without its whole body there is nothing to act on.
	Sent bool
}

func (e *PostError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("post %s: no answer within %s: %v", e.Where, e.Timeout, e.Err)
	}
	return fmt.Sprintf("post %s: %v", e.Where, e.Err)
}

// Unwrap lets errors.Is find context.DeadlineExceeded or context.Canceled.
func (e *PostError) Unwrap() error { return e.Err }

// Post sends body, signed, with idempotencyKey as its Idempotency-Key, and
// returns whatever status the server answered. Its error, if any, is a
// *PostError.
func (e *Endpoint) Post(ctx context.Context, body []byte, idempotencyKey string) (Response, error) {
	return e.do(ctx, http.MethodPost, e.url, body, body, idempotencyKey)
}

// Get sends a GET of the endpoint's URL with "/"+name appended (name is
// path-escaped), signed over name as if it were the body: the signature
// then names what is asked for. Its error, if any, is a *PostError.
func (e *Endpoint) Get(ctx context.Context, name string) (Response, error) {
	return e.do(ctx, http.MethodGet, strings.TrimSuffix(e.url, "/")+"/"+url.PathEscape(name), nil, []byte(name), "")
}

// ErrTooLate is the cause of a call not made because it could not start
// before the deadline its context carries (WithNotAfter).
var ErrTooLate = errors.New("not sent: the call's deadline has passed")

type notAfterKey struct{}

// WithNotAfter returns ctx with a deadline t on the endpoint's clock (the
// one that stamps signatures): a call made with it is not made at all once
// t has passed (a *PostError with ErrTooLate, not Sent), and is cut short
// at t otherwise, so no request is signed after t and none is still
// running at t. Unlike context.WithDeadline it reads the endpoint's clock,
// so a call's bound and its signature's time agree.
func WithNotAfter(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, notAfterKey{}, t)
}

func (e *Endpoint) do(ctx context.Context, method, target string, body, signed []byte, idempotencyKey string) (Response, error) {
	timeout := e.timeout
	notAfter, bounded := ctx.Value(notAfterKey{}).(time.Time)
	if bounded {
		left := notAfter.Sub(e.clock.Now())
		if left <= 0 {
			return Response{}, &PostError{Where: e.where, Err: ErrTooLate}
		}
		timeout = min(timeout, left)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	var sent atomic.Bool
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				sent.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(callCtx, method, target, reader)
	if err != nil {
		return Response{}, &PostError{Where: e.where, Err: err}
	}
	// net/http resends a request whose connection broke before an answer
	// came if it can rewind the body and deems it idempotent, which it does
	// of any request with an Idempotency-Key: the resend's answer (a 503, say)
	// would then stand for a first request the server may have acted on.
	// Whether and when to send again is the caller's decision; without
	// GetBody the transport cannot resend.
	req.GetBody = nil
	secret := e.secret
	if e.keys != nil {
		k, err := e.keys.Keys(ctx)
		if err != nil {
			return Response{}, &PostError{Where: e.where, Err: err}
		}
		if k.Current == "" {
			return Response{}, &PostError{Where: e.where, Err: errors.New("the signing secret is empty")}
		}
		secret = []byte(k.Current)
	}
	now := e.clock.Now()
	if bounded && !now.Before(notAfter) {
		// Reading the secret took the time that was left.
		return Response{}, &PostError{Where: e.where, Err: ErrTooLate}
	}
	sig := signature.Sign(secret, now, signed)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	req.Header.Set(signature.Header, sig)
	if id := correlation.ID(ctx); id != "" {
		// The create's request id: the receiver's logs can name it too.
		req.Header.Set(correlation.Header, id)
	}
	if e.userAgent != "" {
		req.Header.Set("User-Agent", e.userAgent)
	}

	resp, err := e.client.Do(req)
	if err != nil {
		pe := &PostError{Where: e.where, Err: err, Sent: sent.Load()}
		var ue *url.Error
		if errors.As(err, &ue) {
			pe.Err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil { // ours, not the caller's
			pe.Timeout = timeout
		}
		return Response{}, pe
	}
	got, readErr := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	drain(resp.Body)

	secrets := []string{sig, string(secret)}
	if _, mac, ok := strings.Cut(sig, "v1="); ok && mac != "" {
		secrets = append(secrets, mac)
	}
	return Response{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Header:     resp.Header,
		Body:       got,
		BodyErr:    readErr,
		secrets:    secrets,
		key:        string(secret),
	}, nil
}

// Rekeyed is called when the server refused r's signature (401, 403): it
// reads the signing secret again (Keys.Refresh) and reports whether its key
// now differs from the one that signed r, so that sending the request once
// more, signed anew, may succeed. A fixed Secret never changes.
func (e *Endpoint) Rekeyed(ctx context.Context, r Response) bool {
	if e.keys == nil {
		return false
	}
	k, err := e.keys.Refresh(ctx)
	return err == nil && k.Current != "" && k.Current != r.key
}

// WebhookConfig configures a webhook we deliver to (finance's, the order
// events'): a receiver that takes each message once by its key.
type WebhookConfig struct {
	// URL receives the POSTs (FINANCE_WEBHOOK_URL, ORDERS_WEBHOOK_URL).
	URL string
	// Secret signs every body (FINANCE_SIGNING_SECRET, ORDERS_SIGNING_SECRET).
	Secret []byte
	// Keys, if set, replaces Secret (the *_SIGNING_SECRET_ID): each message
	// is signed with its current key (the receiver accepts both keys while
	// it rotates), and one refused with 401 or 403 is sent once more if the
	// secret read again holds another key (Deliver).
	Keys secrets.Source
	// Timeout bounds one call; 0 means the receiver's default.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. It is copied
	// and the copy never follows redirects.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
}

// Webhook checks c and returns its Endpoint; name words the errors
// ("<name>: webhook url …") and defaultTimeout stands for a zero Timeout.
func (c WebhookConfig) Webhook(name string, defaultTimeout time.Duration) (*Endpoint, error) {
	return New(Options{
		Name:           name,
		Party:          "webhook",
		URL:            c.URL,
		Secret:         c.Secret,
		Keys:           c.Keys,
		Timeout:        c.Timeout,
		DefaultTimeout: defaultTimeout,
		HTTPClient:     c.HTTPClient,
		Clock:          c.Clock,
	})
}

// maxErrorBody bounds how much of an answer's body goes into Deliver's error.
const maxErrorBody = 512

// Deliver POSTs body, signed, under idempotencyKey and reports whether the
// server took it: nil for a 2xx. A 401 or 403 is sent once more, signed
// anew, if the key read again differs (Rekeyed): the server moved to a new
// key before we did. Any other answer is an error naming the status, a
// redirect not followed and an excerpt of the (scrubbed) body; no answer is
// the *PostError. It suits receivers that de-duplicate by the key, for whom
// an error only means "send it again later".
func (e *Endpoint) Deliver(ctx context.Context, body []byte, idempotencyKey string) error {
	resp, err := e.Post(ctx, body, idempotencyKey)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) &&
		e.Rekeyed(ctx, resp) {
		resp, err = e.Post(ctx, body, idempotencyKey)
	}
	if err != nil {
		return err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	msg := fmt.Sprintf("%s answered %s", e.where, resp.Status)
	if loc := resp.Redirect(); loc != "" {
		msg += fmt.Sprintf(" (redirect to %q not followed)", loc)
	}
	if snippet := excerpt(resp.Text()); snippet != "" {
		msg += fmt.Sprintf(": %q", snippet)
	} else if resp.BodyErr != nil {
		msg += fmt.Sprintf(" (reading body: %v)", resp.BodyErr)
	}
	return errors.New(msg)
}

// excerpt trims a (scrubbed) response body for an error.
func excerpt(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxErrorBody {
		s = strings.ToValidUTF8(s[:maxErrorBody], "") + "…"
	}
	return s
}

// drain reads what is left of a body, within bounds, so the connection can be
// reused; past the bound, closing drops the connection instead.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, MaxBody))
	_ = body.Close()
}

// Clean makes untrusted text safe for one log line: at most n bytes of valid
// UTF-8, line breaks and tabs as spaces, other control and format characters
// (escape sequences, bidi overrides) dropped.
func Clean(s string, n int) string {
	if n = max(n, 0); len(s) > n {
		s = s[:n]
	}
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.In(r, unicode.Cc, unicode.Cf):
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// redact is u without user info, query or fragment, which may hold tokens.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}
