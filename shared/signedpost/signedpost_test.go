package signedpost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/signedpost"
)

var (
	secret = []byte("sp_test_secret_0123456789")
	start  = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	body   = []byte(`{"id":"k_1","iban":"DE89370400440532013000"}`)
)

// captured is one request as the server saw it.
type captured struct {
	Method string
	Path   string
	Header http.Header
	Body   string
}

// serve starts a server running h and returns what it received so far.
func serve(t *testing.T, h http.HandlerFunc) (*httptest.Server, func() []captured) {
	t.Helper()
	var mu sync.Mutex
	var reqs []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, captured{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: string(b)})
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []captured {
		mu.Lock()
		defer mu.Unlock()
		return append([]captured(nil), reqs...)
	}
}

func answer(status int, text string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, text)
	}
}

func options(rawURL string) signedpost.Options {
	return signedpost.Options{
		Name: "test", Party: "peer", URL: rawURL, Secret: secret,
		DefaultTimeout: 5 * time.Second, Clock: clock.NewFake(start),
	}
}

func newEndpoint(t *testing.T, o signedpost.Options) *signedpost.Endpoint {
	t.Helper()
	e, err := signedpost.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func TestPostSendsSignedJSON(t *testing.T) {
	tests := []struct {
		name, userAgent, wantAgent string
	}{
		{name: "own user agent", userAgent: "hourglass/1", wantAgent: "hourglass/1"},
		{name: "default user agent", wantAgent: "Go-http-client/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, received := serve(t, answer(http.StatusCreated, `{"ok":true}`))
			o := options(srv.URL + "/v1/in")
			o.UserAgent = tt.userAgent
			e := newEndpoint(t, o)

			resp, err := e.Post(t.Context(), body, "k_1")
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			if resp.StatusCode != http.StatusCreated || resp.Status != "201 Created" || string(resp.Body) != `{"ok":true}` || resp.BodyErr != nil {
				t.Errorf("Response = %d %q %q %v", resp.StatusCode, resp.Status, resp.Body, resp.BodyErr)
			}
			reqs := received()
			if len(reqs) != 1 {
				t.Fatalf("server got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			got := captured{Method: r.Method, Path: r.Path, Body: r.Body, Header: http.Header{}}
			for _, h := range []string{"Content-Type", "Idempotency-Key", "User-Agent", signature.Header} {
				got.Header.Set(h, r.Header.Get(h))
			}
			want := captured{Method: http.MethodPost, Path: "/v1/in", Body: string(body), Header: http.Header{
				"Content-Type":    {"application/json"},
				"Idempotency-Key": {"k_1"},
				"User-Agent":      {tt.wantAgent},
				signature.Header:  {signature.Sign(secret, start, body)},
			}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if err := signature.Verify(secret, r.Header.Get(signature.Header), []byte(r.Body), start, time.Minute); err != nil {
				t.Errorf("signature does not verify: %v", err)
			}
		})
	}
}

func TestPostSignsAtClockTime(t *testing.T) {
	srv, received := serve(t, answer(http.StatusOK, ""))
	clk := clock.NewFake(start)
	o := options(srv.URL)
	o.Clock = clk
	e := newEndpoint(t, o)
	for range 2 {
		if _, err := e.Post(t.Context(), body, "k_1"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
	for i, r := range received() {
		at := start.Add(time.Duration(i) * time.Hour)
		if err := signature.Verify(secret, r.Header.Get(signature.Header), []byte(r.Body), at, time.Second); err != nil {
			t.Errorf("call %d: signature not made at %s: %v", i+1, at, err)
		}
	}
}

func TestPostDoesNotFollowRedirects(t *testing.T) {
	// followAll is a caller's policy that would follow anything.
	var asked atomic.Int32
	followAll := func(*http.Request, []*http.Request) error { asked.Add(1); return nil }
	clients := map[string]*http.Client{
		"no client":           nil,
		"caller's client":     {},
		"client that follows": {CheckRedirect: followAll},
	}
	for _, status := range []int{301, 302, 303, 307, 308} {
		for name, hc := range clients {
			t.Run(fmt.Sprintf("%d/%s", status, name), func(t *testing.T) {
				srv, received := serve(t, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/in" {
						http.Redirect(w, r, "/elsewhere", status)
					}
				})
				o := options(srv.URL + "/in")
				o.HTTPClient = hc
				resp, err := newEndpoint(t, o).Post(t.Context(), body, "k_1")
				if err != nil {
					t.Fatalf("Post: %v", err)
				}
				if resp.StatusCode != status || resp.Redirect() != "/elsewhere" {
					t.Errorf("Response = %d, Redirect %q; want %d, /elsewhere", resp.StatusCode, resp.Redirect(), status)
				}
				if reqs := received(); len(reqs) != 1 {
					t.Errorf("server got %d requests, want 1 (redirect followed)", len(reqs))
				}
			})
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the caller's redirect policy was asked %d times", n)
	}
	if clients["caller's client"].CheckRedirect != nil || clients["client that follows"].CheckRedirect == nil {
		t.Error("New changed the caller's http.Client")
	}
}

func TestRedirectOnlyFor3xx(t *testing.T) {
	for _, status := range []int{200, 201, 400, 500} {
		srv, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(status)
		})
		resp, err := newEndpoint(t, options(srv.URL)).Post(t.Context(), body, "k_1")
		if err != nil {
			t.Fatal(err)
		}
		if loc := resp.Redirect(); loc != "" {
			t.Errorf("%d: Redirect() = %q, want none", status, loc)
		}
	}
}

func TestNewLeavesCallerClientAlone(t *testing.T) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	transport := roundTripper(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})
	hc := &http.Client{Transport: transport, Jar: jar, Timeout: time.Minute}
	srv, _ := serve(t, answer(http.StatusOK, ""))
	o := options(srv.URL)
	o.HTTPClient = hc
	e := newEndpoint(t, o)
	if _, err := e.Post(t.Context(), body, "k_1"); err != nil {
		t.Fatal(err)
	}
	if hc.CheckRedirect != nil || hc.Jar != jar || hc.Timeout != time.Minute {
		t.Errorf("caller's client changed: %+v", hc)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("caller's transport made %d calls, want 1 (the copy must use it)", n)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNewCopiesSecret(t *testing.T) {
	srv, received := serve(t, answer(http.StatusOK, ""))
	s := []byte("mutable-secret")
	o := options(srv.URL)
	o.Secret = s
	e := newEndpoint(t, o)
	copy(s, "XXXXXXX")
	if _, err := e.Post(t.Context(), body, "k_1"); err != nil {
		t.Fatal(err)
	}
	r := received()[0]
	if err := signature.Verify([]byte("mutable-secret"), r.Header.Get(signature.Header), []byte(r.Body), start, time.Minute); err != nil {
		t.Errorf("signed with a changed secret: %v", err)
	}
}

// huge is an answer body far longer than Post may read (but finite, so a
// Post that reads it all fails the test instead of hanging it). It counts
// what is read of it.
type huge struct {
	read   atomic.Int64
	closed atomic.Bool
}

func (e *huge) Read(p []byte) (int, error) {
	left := 64*signedpost.MaxBody - e.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), left)]
	for i := range p {
		p[i] = 'x'
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

func (e *huge) Close() error {
	e.closed.Store(true)
	return nil
}

func TestPostBoundsBody(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusBadGateway} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			answer := &huge{}
			o := options("http://peer.invalid/in")
			o.HTTPClient = &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: status, Header: http.Header{}, Body: answer, Request: r}, nil
			})}
			resp, err := newEndpoint(t, o).Post(t.Context(), body, "k_1")
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			if len(resp.Body) != signedpost.MaxBody || resp.BodyErr != nil {
				t.Errorf("Body is %d bytes (%v), want %d", len(resp.Body), resp.BodyErr, signedpost.MaxBody)
			}
			if n := answer.read.Load(); n > 2*signedpost.MaxBody {
				t.Errorf("read %d bytes of the answer, want at most %d", n, 2*signedpost.MaxBody)
			}
			if !answer.closed.Load() {
				t.Error("answer body left open")
			}
		})
	}
}

func TestPostReportsCutBody(t *testing.T) {
	srv, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "short") // then the server hangs up
	})
	resp, err := newEndpoint(t, options(srv.URL)).Post(t.Context(), body, "k_1")
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	if string(resp.Body) != "short" || !errors.Is(resp.BodyErr, io.ErrUnexpectedEOF) {
		t.Errorf("Body %q, BodyErr %v; want short, unexpected EOF", resp.Body, resp.BodyErr)
	}
}

func TestTextScrubsSecrets(t *testing.T) {
	// A server that echoes everything back, secret included.
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		sig := r.Header.Get(signature.Header)
		_, mac, _ := strings.Cut(sig, "v1=")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, "you sent %s=%s; mac %s; key %s", signature.Header, sig, mac, secret)
	})
	resp, err := newEndpoint(t, options(srv.URL)).Post(t.Context(), body, "k_1")
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	sig := signature.Sign(secret, start, body)
	_, mac, _ := strings.Cut(sig, "v1=")
	text := resp.Text()
	for _, leak := range []string{string(secret), sig, mac, mac[:16]} {
		if strings.Contains(text, leak) {
			t.Errorf("Text() %q contains %q", text, leak)
		}
	}
	want := "you sent " + signature.Header + "=[redacted]; mac [redacted]; key [redacted]"
	if text != want {
		t.Errorf("Text():\n got %q\nwant %q", text, want)
	}
}

func TestPostErrors(t *testing.T) {
	// hang never answers: only the request's context ends it.
	hang := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})}
	const secretURL = "http://user:hunter2@%s/in?token=t0k3n#frag"
	refused := proctest.FreeAddr(t)
	srv, received := serve(t, answer(http.StatusOK, ""))
	live := strings.TrimPrefix(srv.URL, "http://")

	tests := []struct {
		name        string
		host        string
		client      *http.Client
		timeout     time.Duration
		ctx         func(context.Context) (context.Context, context.CancelFunc)
		is          error
		wantTimeout time.Duration
		wantPrefix  string
	}{
		{
			name: "connection refused", host: refused, timeout: 5 * time.Second,
			wantPrefix: "post http://" + refused + "/in: ",
		},
		{
			name: "own timeout", host: "peer.invalid", client: hang, timeout: 50 * time.Millisecond,
			is: context.DeadlineExceeded, wantTimeout: 50 * time.Millisecond,
			wantPrefix: "post http://peer.invalid/in: no answer within 50ms: ",
		},
		{
			name: "caller's deadline", host: "peer.invalid", client: hang, timeout: 5 * time.Second,
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 50*time.Millisecond)
			},
			is: context.DeadlineExceeded, wantPrefix: "post http://peer.invalid/in: context deadline exceeded",
		},
		{
			name: "caller cancelled", host: live, timeout: 5 * time.Second,
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx, cancel
			},
			is: context.Canceled, wantPrefix: "post http://" + live + "/in: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := options(fmt.Sprintf(secretURL, tt.host))
			o.HTTPClient, o.Timeout = tt.client, tt.timeout
			e := newEndpoint(t, o)
			ctx := t.Context()
			if tt.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tt.ctx(ctx)
				defer cancel()
			}
			_, err := e.Post(ctx, body, "k_1")
			var pe *signedpost.PostError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *PostError", err, err)
			}
			if pe.Timeout != tt.wantTimeout || pe.Where != e.Where() {
				t.Errorf("PostError{Where: %q, Timeout: %s}, want %q, %s", pe.Where, pe.Timeout, e.Where(), tt.wantTimeout)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			var ue *url.Error
			if errors.As(err, &ue) {
				t.Errorf("error %v wraps a *url.Error, which repeats the full url", err)
			}
			if !strings.HasPrefix(err.Error(), tt.wantPrefix) {
				t.Errorf("error %q does not start with %q", err, tt.wantPrefix)
			}
			for _, leak := range []string{"hunter2", "t0k3n", "user", "frag", string(secret), "DE89370400440532013000"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("error %q contains %q", err, leak)
				}
			}
		})
	}
	if n := len(received()); n != 0 {
		t.Errorf("a cancelled call reached the server %d times", n)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*signedpost.Options)
		wantErr string // "" means New must pass
	}{
		{name: "http", edit: func(o *signedpost.Options) { o.URL = "http://127.0.0.1:9/in" }},
		{name: "https", edit: func(o *signedpost.Options) { o.URL = "https://peer.example.com/v1/in" }},
		{name: "upper-case scheme", edit: func(o *signedpost.Options) { o.URL = "HTTPS://peer.example.com" }},
		{name: "ipv6", edit: func(o *signedpost.Options) { o.URL = "http://[::1]:8080/in" }},
		{name: "own timeout without default", edit: func(o *signedpost.Options) { o.Timeout, o.DefaultTimeout = time.Second, 0 }},

		{name: "empty url", edit: func(o *signedpost.Options) { o.URL = "" }, wantErr: `test: peer url "" is not an absolute http(s) url with a host`},
		{name: "no scheme", edit: func(o *signedpost.Options) { o.URL = "peer.example.com/in" }, wantErr: "is not an absolute"},
		{name: "host:port without scheme", edit: func(o *signedpost.Options) { o.URL = "localhost:8080/in" }, wantErr: "is not an absolute"},
		{name: "relative", edit: func(o *signedpost.Options) { o.URL = "/in" }, wantErr: "is not an absolute"},
		{name: "ftp", edit: func(o *signedpost.Options) { o.URL = "ftp://peer.example.com/in" }, wantErr: "is not an absolute"},
		{name: "mailto", edit: func(o *signedpost.Options) { o.URL = "mailto:ops@example.com" }, wantErr: "is not an absolute"},
		{name: "no host", edit: func(o *signedpost.Options) { o.URL = "http:///in" }, wantErr: "is not an absolute"},
		{name: "port only", edit: func(o *signedpost.Options) { o.URL = "https://:443/in" }, wantErr: "is not an absolute"},
		{name: "opaque", edit: func(o *signedpost.Options) { o.URL = "http:peer.example.com" }, wantErr: "is not an absolute"},
		{name: "does not parse", edit: func(o *signedpost.Options) { o.URL = "http://exa mple.com/in" }, wantErr: "test: peer url does not parse"},
		{name: "control char", edit: func(o *signedpost.Options) { o.URL = "http://example.com/\x7f" }, wantErr: "test: peer url does not parse"},
		{name: "no secret", edit: func(o *signedpost.Options) { o.Secret = nil }, wantErr: "test: peer needs a signing secret"},
		{name: "negative timeout", edit: func(o *signedpost.Options) { o.Timeout = -time.Second }, wantErr: "test: negative peer timeout -1s"},
		{name: "no timeout at all", edit: func(o *signedpost.Options) { o.DefaultTimeout = 0 }, wantErr: "test: no peer timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := options("http://localhost/in")
			tt.edit(&o)
			e, err := signedpost.New(o)
			if tt.wantErr == "" {
				if err != nil || e == nil {
					t.Fatalf("New(%q): %v", o.URL, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New(%q) passed", o.URL)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), string(secret)) {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

func TestNewHidesURLCredentials(t *testing.T) {
	for _, raw := range []string{
		"ftp://admin:hunter2@example.com/in?key=k3y#f7ag",    // parses, wrong scheme
		"http://admin:hunter2@:80/in?key=k3y#f7ag",           // parses, no host
		"http://admin:hunter2@exa mple.com/in?key=k3y#f7ag",  // does not parse
		"http://admin:hunter2@example.com/\x7f?key=k3y#f7ag", // does not parse
	} {
		_, err := signedpost.New(options(raw))
		if err == nil {
			t.Errorf("New(%q) passed", raw)
			continue
		}
		for _, leak := range []string{"admin", "hunter2", "k3y", "f7ag"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error %q contains %q", err, leak)
			}
		}
	}
}

func TestWhere(t *testing.T) {
	e := newEndpoint(t, options("https://admin:hunter2@peer.example.com:8443/v1/in?token=t0k3n#frag"))
	if got, want := e.Where(), "https://peer.example.com:8443/v1/in"; got != want {
		t.Errorf("Where() = %q, want %q", got, want)
	}
}

func TestClean(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 10, ""},
		{"  \n", 10, ""},
		{"line one\nline two\ttab", 100, "line one line two tab"},
		{"\x1b[31mred\x1b[0m\x00", 100, "[31mred[0m"},
		{"bidi \u202egnp.exe", 100, "bidi gnp.exe"},
		{"zero\u200bwidth", 100, "zerowidth"},
		{"bad utf8 \xff\xfe!", 100, "bad utf8 !"},
		{"aaé", 3, "aa"}, // a rune cut in half is dropped
		{strings.Repeat("z", 50), 20, strings.Repeat("z", 20)},
		{"anything", 0, ""},
		{"anything", -1, ""},
	}
	for _, tt := range tests {
		if got := signedpost.Clean(tt.in, tt.n); got != tt.want {
			t.Errorf("Clean(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestPostConcurrent(t *testing.T) {
	srv, received := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("Idempotency-Key"))
	})
	e := newEndpoint(t, options(srv.URL))
	const n = 16
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			resp, err := e.Post(t.Context(), body, fmt.Sprintf("k_%02d", i))
			got[i], errs[i] = string(resp.Body), err
		})
	}
	close(gate)
	wg.Wait()
	for i := range n {
		if want := fmt.Sprintf("k_%02d", i); errs[i] != nil || got[i] != want {
			t.Errorf("call %d = %q, %v, want %q", i, got[i], errs[i], want)
		}
	}
	if len(received()) != n {
		t.Errorf("server got %d requests, want %d", len(received()), n)
	}
}
