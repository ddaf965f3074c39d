package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/history"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// runsEnv, set by make test-faults, turns the fault runs on: they take
// minutes and their counts show only with go test -v.
const runsEnv = "HOURGLASS_FAULT_RUNS"

// faultRun skips t unless the fault runs are on.
func faultRun(t *testing.T) {
	t.Helper()
	if os.Getenv(runsEnv) == "" {
		t.Skipf("a fault run: make test-faults (or %s=1 go test -v ./internal/faults/)", runsEnv)
	}
}

// api is how a load run talks to the withdrawal API: over HTTP to
// `hourglass serve`, or through the enqueue Lambda handler in process.
type api interface {
	// create answers the HTTP status (0: no answer) and, when 2xx, the id
	// and due time.
	create(ctx context.Context, user, key, body string) (status int, id string, due time.Time)
	cancel(ctx context.Context, user, id string) (status int)
	// list returns every withdrawal of user, as the ledger holds it.
	list(ctx context.Context, user string) ([]history.Final, error)
}

// load is one scenario's load run: workers send withdrawal requests until
// stopped, retrying an unknown answer with the same idempotency key as the
// app would, and record every answer in h.
type load struct {
	t        *testing.T
	name     string
	api      api
	h        *history.History
	provider *fakes.Provider
	finance  *fakes.Finance

	users   int
	workers int
	// pause is each worker's pause between requests.
	pause time.Duration
	// Every rejectEvery-th request pays to a destination the provider
	// refuses for good (it must end failed); every cancelEvery-th is
	// cancelled right after it is acknowledged.
	rejectEvery, cancelEvery int

	seq     atomic.Int64
	answers sync.Map // status -> *atomic.Int64, over every try
	// firstConflicts counts requests whose very first try was answered 409:
	// no earlier try of theirs can hold the key, so the server found its
	// own reservation (a reply lost and the command retried underneath).
	firstConflicts atomic.Int64
}

func newLoad(t *testing.T, name string, a api, p *fakes.Provider, f *fakes.Finance) *load {
	return &load{t: t, name: name, api: a, h: history.New(), provider: p, finance: f,
		users: 23, workers: 3, pause: 40 * time.Millisecond, rejectEvery: 29, cancelEvery: 13}
}

// refuseRejects is the provider's rule for destinations made to be refused:
// 400 at once, for good.
func refuseRejects(next fakes.Rule) fakes.Rule {
	return func(key string, p fakes.Payout, n int) (int, time.Duration) {
		if strings.HasPrefix(p.Destination, "rej-") {
			return http.StatusBadRequest, 0
		}
		if next != nil {
			return next(key, p, n)
		}
		return http.StatusOK, 0
	}
}

// pct maps s to 0..99, the same way every run.
func pct(s string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum32() % 100)
}

// run sends requests until ctx is done.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range l.workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				l.one(int(l.seq.Add(1)))
				select {
				case <-ctx.Done():
				case <-time.After(l.pause):
				}
			}
		})
	}
	wg.Wait()
}

func (l *load) count(status int) {
	v, _ := l.answers.LoadOrStore(status, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// answerCounts shows how often each status was answered ("0" is none).
func (l *load) answerCounts() string {
	var parts []string
	for code := range 600 {
		if v, ok := l.answers.Load(code); ok {
			parts = append(parts, fmt.Sprintf("%d×%d", code, v.(*atomic.Int64).Load()))
		}
	}
	return strings.Join(parts, " ")
}

func (l *load) one(i int) {
	user := fmt.Sprintf("u-%d", i%l.users)
	key := fmt.Sprintf("k-%d", i)
	expect, tag := history.Paid, fmt.Sprintf("h-%d", i)
	if l.rejectEvery > 0 && i%l.rejectEvery == 0 {
		expect, tag = history.Failed, fmt.Sprintf("rej-%d", i)
	}
	body := fmt.Sprintf(`{"amount":"%d.%02d","currency":"USD","destination":%q,"delay_seconds":%d}`, 1+i%50, i%100, tag, i%3)
	for try := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		status, id, due := l.api.create(ctx, user, key, body)
		cancel()
		l.count(status)
		if try == 0 && status == http.StatusConflict {
			l.firstConflicts.Add(1)
		}
		l.h.Create(tag, user, key, expect, status, id, due)
		switch history.AnswerOf(status) {
		case history.Acked:
			if l.cancelEvery > 0 && i%l.cancelEvery == 0 {
				l.cancelOne(user, id)
			}
			return
		case history.Refused:
			if status != http.StatusConflict { // 409: the first try is still in flight
				return
			}
		}
		time.Sleep(time.Duration(150*(try+1)) * time.Millisecond)
	}
}

// cancelOne cancels withdrawal id, retrying an unknown answer, and returns
// the last answer.
func (l *load) cancelOne(user, id string) int {
	status := 0
	for try := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		status = l.api.cancel(ctx, user, id)
		cancel()
		l.h.Cancel(id, status)
		if history.AnswerOf(status) != history.Unknown {
			return status
		}
		time.Sleep(time.Duration(150*(try+1)) * time.Millisecond)
	}
	return status
}

// settle waits until every withdrawal the ledger holds is final and every
// paid or failed one reached finance, or timeout passes, and returns the
// final states.
func (l *load) settle(timeout time.Duration) []history.Final {
	l.t.Helper()
	began, said := time.Now(), time.Now()
	var finals []history.Final
	pending := ""
	for {
		finals, pending = l.snapshot()
		if pending == "" {
			l.t.Logf("%s: settled %s after the load", l.name, time.Since(began).Round(100*time.Millisecond))
			return finals
		}
		if time.Since(began) > timeout {
			l.t.Logf("%s: not settled after %s: %s", l.name, timeout, pending)
			return finals
		}
		if time.Since(said) > 10*time.Second {
			l.t.Logf("%s: settling for %s: %s", l.name, time.Since(began).Round(time.Second), pending)
			said = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// snapshot lists every user's withdrawals and says what is still pending.
func (l *load) snapshot() ([]history.Final, string) {
	var finals []history.Final
	for _, u := range l.h.Users() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		fs, err := l.api.list(ctx, u)
		cancel()
		if err != nil {
			return nil, fmt.Sprintf("list of %s: %v", u, err)
		}
		finals = append(finals, fs...)
	}
	heard := l.finance.IDs()
	have := map[string]bool{}
	notFinal, unheard := 0, 0
	example := ""
	for _, f := range finals {
		have[f.ID] = true
		switch f.Status {
		case history.Paid, history.Failed:
			if heard[f.ID] == 0 {
				unheard++
				example = f.ID + " unheard"
			}
		case history.Cancelled:
		default:
			notFinal++
			example = f.ID + " " + f.Status
		}
	}
	missing := 0
	for id := range l.h.Acknowledged() {
		if !have[id] {
			missing++
			example = id + " missing"
		}
	}
	if notFinal+unheard+missing == 0 {
		return finals, ""
	}
	return finals, fmt.Sprintf("%d not final, %d not heard by finance, %d acknowledged but absent (e.g. %s)", notFinal, unheard, missing, example)
}

// check judges the run and fails the test on any violation.
func (l *load) check(finals []history.Final, o history.Options) history.Report {
	l.t.Helper()
	var calls []history.ProviderCall
	for _, c := range l.provider.Log() {
		calls = append(calls, history.ProviderCall{Key: c.Key, WithdrawalID: c.WithdrawalID, Tag: c.Destination,
			At: c.At, Status: c.Status, PayoutID: c.PayoutID})
	}
	var paid []history.Payment
	for _, p := range l.provider.Payments() {
		paid = append(paid, history.Payment{Key: p.Key, WithdrawalID: p.WithdrawalID, Tag: p.Destination, PayoutID: p.PayoutID, At: p.At})
	}
	l.h.Finals(finals)
	l.h.ProviderCalls(calls)
	l.h.ProviderPaid(paid)
	l.h.FinanceStatuses(l.finance.Statuses())
	r := l.h.Check(o)
	l.t.Logf("%s: API answers %s", l.name, l.answerCounts())
	if n := l.firstConflicts.Load(); n > 0 {
		l.t.Logf("%s: %d requests had their first try answered 409 (their own key found in flight)", l.name, n)
	}
	l.t.Logf("%s: %s", l.name, r)
	if !r.OK() {
		l.t.Errorf("%s: the checker found violations (lost %d, duplicated %d, unexpected %d, inconsistent %d, unreported %d, "+
			"paid-but-failed %d, paid-but-unreported %d):\n  %s",
			l.name, r.Lost, r.Duplicated, r.Unexpected, r.Inconsistent, r.Unreported, r.PaidButFailed, r.PaidButUnreported,
			strings.Join(r.Problems, "\n  "))
	}
	if r.Acknowledged == 0 {
		l.t.Errorf("%s: nothing was acknowledged: the run proved nothing", l.name)
	}
	return r
}

// finalOf turns a ledger record into the checker's view.
func finalOf(w withdrawal.Withdrawal) history.Final {
	return history.Final{ID: w.ID, User: w.UserID, Tag: w.Destination, Status: string(w.Status), Attempts: w.Attempts, PayoutID: w.PayoutID}
}

// httpAPI is `hourglass serve`'s API, in dev auth mode.
type httpAPI struct {
	base   string
	client *http.Client
}

func newHTTPAPI(addr string) *httpAPI {
	return &httpAPI{base: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
}

func (a *httpAPI) do(ctx context.Context, method, path, user string, headers map[string]string, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("X-User-Id", user)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil // the answer did not arrive whole
	}
	return resp.StatusCode, raw
}

func (a *httpAPI) create(ctx context.Context, user, key, body string) (int, string, time.Time) {
	status, raw := a.do(ctx, http.MethodPost, "/v1/withdrawals", user, map[string]string{"Idempotency-Key": key}, body)
	return created(status, raw)
}

// created reads a create's answer; a 2xx it cannot read counts as none.
func created(status int, raw []byte) (int, string, time.Time) {
	if status/100 != 2 {
		return status, "", time.Time{}
	}
	var v struct {
		ID  string
		Due time.Time `json:"due_at"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.ID == "" {
		return 0, "", time.Time{}
	}
	return status, v.ID, v.Due
}

func (a *httpAPI) cancel(ctx context.Context, user, id string) int {
	status, _ := a.do(ctx, http.MethodDelete, "/v1/withdrawals/"+id, user, nil, "")
	return status
}

func (a *httpAPI) list(ctx context.Context, user string) ([]history.Final, error) {
	var out []history.Final
	cursor := ""
	for {
		path := "/v1/withdrawals?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		status, raw := a.do(ctx, http.MethodGet, path, user, nil, "")
		if status != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d %s", path, status, raw)
		}
		var page struct {
			Items []struct {
				ID, Status, Destination string
				Attempts                int
				PayoutID                *string `json:"payout_id"`
			}
			Next string `json:"next_cursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, err
		}
		for _, w := range page.Items {
			f := history.Final{ID: w.ID, User: user, Tag: w.Destination, Status: w.Status, Attempts: w.Attempts}
			if w.PayoutID != nil {
				f.PayoutID = *w.PayoutID
			}
			out = append(out, f)
		}
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
}

// lambdaAPI is the enqueue function's handler, driven with the sample
// events of events/ as API Gateway would send them (JWT identity).
type lambdaAPI struct {
	serve         func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
	ledgerList    func(ctx context.Context, user string) ([]history.Final, error)
	createEvent   []byte
	cancelEvent   []byte
	requestNumber atomic.Int64
}

func readEvent(t *testing.T, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", file))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// event is a fresh copy of a sample event for user.
func (a *lambdaAPI) event(raw []byte, user string) events.APIGatewayV2HTTPRequest {
	var ev events.APIGatewayV2HTTPRequest
	_ = json.NewDecoder(bytes.NewReader(raw)).Decode(&ev)
	ev.RequestContext.Authorizer.JWT.Claims["sub"] = user
	ev.RequestContext.RequestID = fmt.Sprintf("req-%d", a.requestNumber.Add(1))
	return ev
}

func (a *lambdaAPI) create(ctx context.Context, user, key, body string) (int, string, time.Time) {
	ev := a.event(a.createEvent, user)
	ev.Headers["idempotency-key"] = key
	ev.Body = body
	resp, err := a.serve(ctx, ev)
	if err != nil {
		return 0, "", time.Time{}
	}
	return created(resp.StatusCode, []byte(resp.Body))
}

func (a *lambdaAPI) cancel(ctx context.Context, user, id string) int {
	ev := a.event(a.cancelEvent, user)
	ev.RawPath = "/v1/withdrawals/" + id
	ev.RequestContext.HTTP.Path = ev.RawPath
	ev.PathParameters = map[string]string{"id": id}
	resp, err := a.serve(ctx, ev)
	if err != nil {
		return 0
	}
	return resp.StatusCode
}

func (a *lambdaAPI) list(ctx context.Context, user string) ([]history.Final, error) {
	return a.ledgerList(ctx, user)
}
