// Command soak is `make soak`: it builds `hourglass serve`, runs it on a
// redis-server it spawns (loopback only) with a fake payout provider and a
// finance webhook, drives it with a steady mixed load from vegeta for a
// fixed time (withdrawals created and paid, purchases during a flash sale,
// a rate-limited bot, reads), drains it, and writes what it saw as Markdown:
// throughput, latency percentiles, status counts, the server's memory over
// time and Redis's keys and memory after draining. It exits non-zero if any
// check fails: an answer that is not intended, a payout lost or made twice,
// memory that keeps growing, or keys that outlive their jobs.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/hourglass/hourglass/shared/signature"
)

const (
	payoutSecret  = "soak-payout-secret"
	financeSecret = "soak-finance-secret"
	adminToken    = "soak-admin"
	item          = "soak-phone"
	// What the server is configured with; the bot goes over botLimit.
	botLimit = "5/s"
	// queueShards is the shard count of every queue (the default): each
	// shard keeps one lease token.
	queueShards = 1
)

func main() {
	duration := flag.Duration("duration", 5*time.Minute, "how long the load runs")
	rate := flag.Int("rate", 250, "requests per second, all kinds together")
	out := flag.String("out", "bench/soak.md", "where the Markdown report goes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, *duration, *rate)
	if r != nil {
		md := r.markdown()
		fmt.Print(md)
		if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if len(r.failures) > 0 {
		fmt.Fprintf(os.Stderr, "soak: %d checks failed\n", len(r.failures))
		os.Exit(1)
	}
}

// ---- the parts ----

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// provider pays every withdrawal once per idempotency key, after a short
// delay, answering repeats with the same payout id; it checks signatures.
type provider struct {
	mu    sync.Mutex
	calls map[string]int
	bad   int
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if signature.Verify([]byte(payoutSecret), r.Header.Get(signature.Header), body, time.Now(), time.Minute) != nil {
		p.mu.Lock()
		p.bad++
		p.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.calls[key]++
	p.mu.Unlock()
	time.Sleep(time.Duration(2+rand.IntN(8)) * time.Millisecond)
	_, _ = fmt.Fprintf(w, `{"payout_id":"po_%s"}`, key)
}

// finance counts the messages about each withdrawal.
type finance struct {
	mu   sync.Mutex
	msgs map[string]int
	paid map[string]int
	bad  int
}

func (f *finance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID     string `json:"withdrawal_id"`
		Status string `json:"status"`
	}
	ok := signature.Verify([]byte(financeSecret), r.Header.Get(signature.Header), body, time.Now(), time.Minute) == nil &&
		json.Unmarshal(body, &m) == nil
	f.mu.Lock()
	defer f.mu.Unlock()
	if !ok {
		f.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.msgs[m.ID]++
	if m.Status == "paid" {
		f.paid[m.ID]++
	}
}

func serveLocal(h http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// ---- the run ----

type sample struct {
	at       time.Duration
	rssKB    int64
	redisMem int64
}

type report struct {
	started             time.Time
	duration            time.Duration
	rate                int
	goVersion, redis    string
	kinds               []string
	metrics             map[string]*vegeta.Metrics
	all                 vegeta.Metrics
	unintended          map[string]int
	samples             []sample
	created, paidOnce   int
	paidTwice, lost     int
	finMissing          int
	admitted            int64
	confirmed           int64
	drainTook           time.Duration
	keysAfter           map[string]keyGroup
	idemIndexed         int64
	idemEntries         int64
	idemLatest          time.Time
	redisBefore         int64
	redisAfterDrain     int64
	rssFirst, rssLast   float64
	rssMax              int64
	failures            []string
	stats               string
	providerBad, finBad int
}

type keyGroup struct {
	Count   int
	WithTTL int
	Type    string
}

func (r *report) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func run(ctx context.Context, duration time.Duration, rate int) (*report, error) {
	rep := &report{started: time.Now().UTC(), duration: duration, rate: rate, goVersion: runtime.Version(),
		metrics: map[string]*vegeta.Metrics{}, unintended: map[string]int{}}
	dir, err := os.MkdirTemp("", "hourglass-soak")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "soak: left behind:", err)
		}
	}()

	fmt.Fprintln(os.Stderr, "soak: building hourglass")
	bin := filepath.Join(dir, "hourglass")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/hourglass").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}

	// redis-server, loopback only, no persistence: what the soak measures
	// is the data model, not the disk.
	redisAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(redisAddr)
	rs := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := rs.Start(); err != nil {
		return nil, fmt.Errorf("redis-server: %w (is it installed?)", err)
	}
	defer func() { _ = rs.Process.Kill(); _ = rs.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer func() { _ = rdb.Close() }()
	if err := waitUntil(10*time.Second, func() bool { return rdb.Ping(ctx).Err() == nil }); err != nil {
		return nil, errors.New("redis-server did not start")
	}
	rep.redis = infoField(rdb.Info(ctx, "server").Val(), "redis_version")

	prov := &provider{calls: map[string]int{}}
	provURL, closeProv, err := serveLocal(prov)
	if err != nil {
		return nil, err
	}
	defer closeProv()
	fin := &finance{msgs: map[string]int{}, paid: map[string]int{}}
	finURL, closeFin, err := serveLocal(fin)
	if err != nil {
		return nil, err
	}
	defer closeFin()

	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	srv := exec.Command(bin, "serve")
	srv.Env = append(os.Environ(),
		"HOURGLASS_ADDR="+addr, "REDIS_URL=redis://"+redisAddr,
		"PAYOUT_URL="+provURL, "PAYOUT_SIGNING_SECRET="+payoutSecret,
		"FINANCE_WEBHOOK_URL="+finURL, "FINANCE_SIGNING_SECRET="+financeSecret,
		"HOURGLASS_ADMIN_TOKEN="+adminToken, "HOURGLASS_LOG_LEVEL=warn",
		// Every request comes from 127.0.0.1: limits per user only.
		"HOURGLASS_RATE_PURCHASE_USER="+botLimit, "HOURGLASS_RATE_PURCHASE_SOURCE=off",
		"HOURGLASS_RATE_WITHDRAWAL_USER=30/m", "HOURGLASS_RATE_WITHDRAWAL_SOURCE=off",
		// Idempotency keys are kept 24 h; the compensation pass may run often.
		"HOURGLASS_COMPENSATION_INTERVAL=10s", "HOURGLASS_QUEUE_SHARDS="+strconv.Itoa(queueShards),
	)
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	base := "http://" + addr
	if err := waitUntil(30*time.Second, func() bool { return get(base+"/healthz") == 200 }); err != nil {
		return nil, errors.New("hourglass serve did not become healthy")
	}
	rep.redisBefore = usedMemory(ctx, rdb)

	// The flash sale: stock for every buyer the run can bring.
	preheat := fmt.Sprintf(`{"stock":10000000,"per_user_limit":100,"ends_at":%q}`, time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339))
	if code := do(http.MethodPut, base+"/v1/seckill/items/"+item, map[string]string{"X-Admin-Token": adminToken}, preheat); code != 200 {
		return nil, fmt.Errorf("preheat answered %d", code)
	}

	// Memory samples every 5 s while the load runs.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		start := time.Now()
		for {
			rep.samples = append(rep.samples, sample{at: time.Since(start), rssKB: rssKB(srv.Process.Pid), redisMem: usedMemory(ctx, rdb)})
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	})

	tg := newTargeter(base)
	attacker := vegeta.NewAttacker(vegeta.Timeout(10*time.Second), vegeta.KeepAlive(true), vegeta.Connections(200),
		vegeta.MaxBody(64<<10))
	created := map[string]bool{}
	fmt.Fprintf(os.Stderr, "soak: %d requests/s for %s\n", rate, duration)
	for res := range attacker.Attack(tg.next, vegeta.Rate{Freq: rate, Per: time.Second}, duration, "soak") {
		if ctx.Err() != nil {
			attacker.Stop()
		}
		kind := kindOf(res)
		m := rep.metrics[kind]
		if m == nil {
			m = &vegeta.Metrics{}
			rep.metrics[kind] = m
		}
		m.Add(res)
		rep.all.Add(res)
		if !intended(kind, res.Code) {
			rep.unintended[fmt.Sprintf("%s %d %s", kind, res.Code, firstLine(res.Error, res.Body))]++
		}
		if kind == "withdrawal create" && res.Code == 202 {
			var v struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(res.Body, &v) == nil && v.ID != "" {
				created[v.ID] = true
				_, user, _ := strings.Cut(res.URL, "?u=")
				tg.addWithdrawal(user, v.ID)
			}
		}
		if kind == "purchase" && res.Code == 202 {
			_, user, _ := strings.Cut(res.URL, "?u=")
			tg.addBuyer(user)
		}
	}
	for _, m := range rep.metrics {
		m.Close()
	}
	rep.all.Close()
	for k := range rep.metrics {
		rep.kinds = append(rep.kinds, k)
	}
	sort.Strings(rep.kinds)
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}

	// Drain: every withdrawal paid and told to finance, every purchase
	// confirmed, the queues empty.
	fmt.Fprintln(os.Stderr, "soak: draining")
	drainStart := time.Now()
	var snap stats
	drained := waitUntil(3*time.Minute, func() bool {
		snap = readStats(base)
		prov.mu.Lock()
		fin.mu.Lock()
		done := len(fin.paid) >= len(created)
		fin.mu.Unlock()
		prov.mu.Unlock()
		it := snap.Items[item]
		empty := true
		for _, q := range snap.Queues {
			empty = empty && q.Due == 0 && q.Inflight == 0
		}
		return done && empty && it.Admitted == it.Confirmed
	})
	rep.drainTook = time.Since(drainStart)
	stopSampling()
	sampling.Wait()
	if drained != nil {
		rep.fail("not drained within 3 minutes")
	}
	raw, _ := json.MarshalIndent(snap, "", "  ")
	rep.stats = string(raw)

	// Payouts: each created withdrawal paid once, finance told.
	prov.mu.Lock()
	fin.mu.Lock()
	rep.created = len(created)
	for id := range created {
		switch prov.calls[id] {
		case 0:
			rep.lost++
		case 1:
			rep.paidOnce++
		default:
			// A repeat call under one key pays once (the provider is
			// idempotent); it counts here as a duplicate delivery to see.
			rep.paidTwice++
		}
		if fin.paid[id] == 0 {
			rep.finMissing++
		}
	}
	for id := range prov.calls {
		if !created[id] {
			rep.fail("the provider was asked to pay %s, which no 202 created", id)
		}
	}
	rep.providerBad, rep.finBad = prov.bad, fin.bad
	fin.mu.Unlock()
	prov.mu.Unlock()
	it := snap.Items[item]
	rep.admitted, rep.confirmed = it.Admitted, it.Confirmed

	rep.redisAfterDrain = usedMemory(ctx, rdb)
	rep.keysAfter, err = keyGroups(ctx, rdb)
	if err != nil {
		return rep, err
	}
	for shape := range rep.keysAfter {
		if strings.HasSuffix(shape, ":idem") {
			// The idempotency entries carry their expiry (the value's last
			// part, unix ms in base 36): the latest is checked as the first
			// layout's expiry index was.
			iter := rdb.Scan(ctx, 0, "*:idem", 100).Iterator()
			for iter.Next(ctx) {
				entries := rdb.HScan(ctx, iter.Val(), 0, "", 1000).Iterator()
				for i := 0; entries.Next(ctx); i++ {
					if i%2 == 0 {
						continue
					}
					v := entries.Val()
					rep.idemEntries++
					ms, err := strconv.ParseInt(v[strings.LastIndexByte(v, '|')+1:], 36, 64)
					if err != nil {
						rep.fail("an idempotency entry without an expiry: %q", v)
						continue
					}
					if at := time.UnixMilli(ms).UTC(); at.After(rep.idemLatest) {
						rep.idemLatest = at
					}
				}
			}
		}
		if strings.HasSuffix(shape, ":idem-exp") {
			iter := rdb.Scan(ctx, 0, "*:idem-exp", 100).Iterator()
			for iter.Next(ctx) {
				rep.idemIndexed += rdb.ZCard(ctx, iter.Val()).Val()
				if last := rdb.ZRangeWithScores(ctx, iter.Val(), -1, -1).Val(); len(last) == 1 {
					rep.idemLatest = time.UnixMilli(int64(last[0].Score)).UTC()
				}
			}
		}
	}
	rep.judge()

	_ = srv.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			rep.fail("hourglass serve exited with %v on SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		rep.fail("hourglass serve did not stop within 30 s of SIGTERM")
	}
	if logs, _ := os.ReadFile(logf.Name()); bytes.Contains(logs, []byte(`"level":"ERROR"`)) {
		rep.fail("hourglass serve logged errors: %s", firstMatch(logs, `"level":"ERROR"`))
	}
	return rep, nil
}

// ---- load ----

// targeter makes the mix, by weight out of 100: withdrawals created (30),
// purchases by new buyers (30), a bot buying as one user far over its limit
// (5), reads of one's withdrawals, a withdrawal, the item and one's purchase
// (35).
type targeter struct {
	base string
	n    atomic.Int64
	mu   sync.Mutex
	// recent withdrawals, by user, to read back.
	recent []owned
	// buyers recently answered 202, to read their purchase back (a buyer
	// picked by request number may still be waiting for its answer).
	buyers []string
}

type owned struct{ user, id string }

func newTargeter(base string) *targeter { return &targeter{base: base} }

func (t *targeter) addWithdrawal(user, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recent) < 1000 {
		t.recent = append(t.recent, owned{user, id})
	} else {
		t.recent[rand.IntN(len(t.recent))] = owned{user, id}
	}
}

func (t *targeter) addBuyer(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buyers) < 1000 {
		t.buyers = append(t.buyers, user)
	} else {
		t.buyers[rand.IntN(len(t.buyers))] = user
	}
}

func (t *targeter) next(tgt *vegeta.Target) error {
	i := t.n.Add(1)
	h := http.Header{}
	*tgt = vegeta.Target{Header: h}
	switch w := i % 100; {
	case w < 30:
		// 20,000 users, each creating at most a few a minute.
		user := "wd-user-" + strconv.FormatInt(i%20000, 10)
		h.Set("X-User-Id", user)
		h.Set("Idempotency-Key", "soak-"+strconv.FormatInt(i, 10))
		h.Set("Content-Type", "application/json")
		// The query (ignored by the API) tells the result's owner.
		tgt.Method, tgt.URL = http.MethodPost, t.base+"/v1/withdrawals?u="+user
		tgt.Body = fmt.Appendf(nil, `{"amount":"%d.%02d","currency":"USD","destination":"acct_%d","delay_seconds":%d}`,
			1+i%500, i%100, i%997, rand.IntN(11))
	case w < 60:
		user := "buyer-" + strconv.FormatInt(i, 10)
		h.Set("X-User-Id", user)
		tgt.Method, tgt.URL = http.MethodPost, t.base+"/v1/seckill/items/"+item+"/purchases?u="+user
	case w < 65:
		h.Set("X-User-Id", "bot")
		tgt.Method, tgt.URL = http.MethodPost, t.base+"/v1/seckill/items/"+item+"/purchases?bot=1"
	case w < 75:
		tgt.Method, tgt.URL = http.MethodGet, t.base+"/v1/seckill/items/"+item
	case w < 80:
		t.mu.Lock()
		var user string
		if len(t.buyers) > 0 {
			user = t.buyers[rand.IntN(len(t.buyers))]
		}
		t.mu.Unlock()
		if user == "" {
			tgt.Method, tgt.URL = http.MethodGet, t.base+"/v1/seckill/items/"+item
			return nil
		}
		h.Set("X-User-Id", user)
		tgt.Method, tgt.URL = http.MethodGet, t.base+"/v1/seckill/items/"+item+"/purchases/me"
	case w < 90:
		h.Set("X-User-Id", "wd-user-"+strconv.FormatInt(i%20000, 10))
		tgt.Method, tgt.URL = http.MethodGet, t.base+"/v1/withdrawals?limit=20"
	default:
		t.mu.Lock()
		var o owned
		if len(t.recent) > 0 {
			o = t.recent[rand.IntN(len(t.recent))]
		}
		t.mu.Unlock()
		if o.id == "" {
			tgt.Method, tgt.URL = http.MethodGet, t.base+"/healthz"
			return nil
		}
		h.Set("X-User-Id", o.user)
		tgt.Method, tgt.URL = http.MethodGet, t.base+"/v1/withdrawals/"+o.id
	}
	return nil
}

// kindOf names a request's kind from its method and URL.
func kindOf(res *vegeta.Result) string {
	path, query, _ := strings.Cut(strings.TrimPrefix(res.URL, "http://"), "?")
	_, path, _ = strings.Cut(path, "/")
	path = "/" + path
	switch {
	case res.Method == http.MethodPost && path == "/v1/withdrawals":
		return "withdrawal create"
	case res.Method == http.MethodGet && path == "/v1/withdrawals":
		return "withdrawal list"
	case strings.HasPrefix(path, "/v1/withdrawals/"):
		return "withdrawal get"
	case strings.HasSuffix(path, "/purchases") && query == "bot=1":
		return "bot purchase"
	case strings.HasSuffix(path, "/purchases"):
		return "purchase"
	case strings.HasSuffix(path, "/purchases/me"):
		return "purchase read"
	case path == "/healthz":
		return "health"
	default:
		return "item read"
	}
}

// intended says whether an answer is one the mix means to get. 429 is
// intended only for the bot; a new buyer or a withdrawal user never hits
// their limits.
func intended(kind string, code uint16) bool {
	switch kind {
	case "withdrawal create", "purchase":
		return code == 202
	case "bot purchase":
		return code == 202 || code == 409 || code == 429
	default:
		return code == 200
	}
}

func firstLine(errText string, body []byte) string {
	s := errText
	if s == "" {
		s = string(body)
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// ---- observations ----

func get(url string) int { return do(http.MethodGet, url, nil, "") }

func do(method, url string, headers map[string]string, body string) int {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

type stats struct {
	Queues map[string]struct {
		Due      int64 `json:"due"`
		Inflight int64 `json:"inflight"`
		Dead     int64 `json:"dead"`
	} `json:"queues"`
	Items map[string]struct {
		StockLeft int64 `json:"stock_left"`
		Admitted  int64 `json:"admitted"`
		Confirmed int64 `json:"confirmed"`
	} `json:"items"`
	RateLimits map[string]map[string]any `json:"rate_limits"`
}

func readStats(base string) stats {
	var s stats
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/admin/stats", nil)
	req.Header.Set("X-Admin-Token", adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s
	}
	defer func() { _ = resp.Body.Close() }()
	_ = json.NewDecoder(resp.Body).Decode(&s)
	return s
}

func waitUntil(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func rssKB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func usedMemory(ctx context.Context, rdb *redis.Client) int64 {
	n, _ := strconv.ParseInt(infoField(rdb.Info(ctx, "memory").Val(), "used_memory"), 10, 64)
	return n
}

// idLike finds the variable parts of key names: ids, users, numbers.
var idLike = regexp.MustCompile(`(wd|pu|or)_[0-9A-Z]{26}|[0-9a-f]{32}|soak-[0-9]+|(wd-user|buyer)-[0-9]+|:[0-9]+(\}|:|$)`)

// keyGroups counts the keys by shape (ids replaced by *), with their TTLs.
func keyGroups(ctx context.Context, rdb *redis.Client) (map[string]keyGroup, error) {
	out := map[string]keyGroup{}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		shape := idLike.ReplaceAllStringFunc(k, func(m string) string {
			switch {
			case strings.HasPrefix(m, ":"):
				return ":N" + m[len(m)-1:]
			default:
				return "*"
			}
		})
		shape = strings.TrimSuffix(shape, "$")
		g := out[shape]
		g.Count++
		if g.Type == "" {
			g.Type = rdb.Type(ctx, k).Val()
		}
		if rdb.PTTL(ctx, k).Val() > 0 {
			g.WithTTL++
		}
		out[shape] = g
	}
	return out, iter.Err()
}

func firstMatch(logs []byte, needle string) string {
	for _, line := range bytes.Split(logs, []byte("\n")) {
		if bytes.Contains(line, []byte(needle)) {
			if len(line) > 300 {
				line = line[:300]
			}
			return string(line)
		}
	}
	return ""
}

// ---- judging and the report ----

// retained are the key shapes that may outlive the run, and why (docs/architecture.md
// "Abuse resistance" / bench/soak.md repeat this).
var retained = []struct{ pattern, why string }{
	{`^hg:\{dq:[a-z0-9:-]+:N\}:lease$`, "the delay queue's last lease token: one string per queue shard, overwritten by every claim (bounded by the shard count, checked), not per job"},
	{`^hg:\{dq:withdrawals:N\}:w:\*$`, "withdrawal records: the ledger (system of record), kept"},
	{`^hg:\{dq:withdrawals:N\}:u:\*:w$`, "each user's withdrawal index (for lists), kept with the ledger"},
	{`^hg:\{dq:withdrawals:N\}:idem$`, "idempotency entries, one hash a shard: each kept 24 h (its expiry in its value, checked: none beyond 24 h), then purged by the poller's pass over the hash"},
	{`^hg:\{dq:withdrawals:N\}:idem-purge$`, "where the purge's pass over the idempotency entries stands: one short string a shard"},
	{`^hg:\{dq:withdrawals:N\}:idem:\*$`, "idempotency records of the first layout: kept 24 h, then purged by the poller (each is in idem-exp)"},
	{`^hg:\{dq:withdrawals:N\}:idem-exp$`, "expiry index of the idempotency records (checked: one entry each, none beyond 24 h)"},
	{`^hg:\{dq:sk:`, "flash-sale item state, buyers and purchases: the sale's ledger until the next preheat"},
	{`^hg:\{sk:[^}]+\}:preheat$`, "an item's preheat intent: after its preheat ends only the version counter (\"last\") stays, one short hash per item, so that the item's versions only grow"},
	{`^hg:seckill:`, "flash-sale registry"},
	{`^hg:orders`, "orders: the order ledger, kept"},
	{`^hg:rl:`, "rate-limit budgets: expire on their own within their period"},
}

func (r *report) judge() {
	for k, n := range r.unintended {
		r.fail("%d unintended answers: %s", n, k)
	}
	if r.created == 0 {
		r.fail("no withdrawal was created")
	}
	if r.lost > 0 {
		r.fail("%d withdrawals never reached the provider", r.lost)
	}
	if r.paidTwice > 0 {
		r.fail("%d withdrawals were sent to the provider more than once", r.paidTwice)
	}
	if r.finMissing > 0 {
		r.fail("%d paid withdrawals never reached finance", r.finMissing)
	}
	if r.providerBad > 0 || r.finBad > 0 {
		r.fail("bad signatures: provider %d, finance %d", r.providerBad, r.finBad)
	}
	if r.admitted != r.confirmed {
		r.fail("%d purchases admitted, %d confirmed", r.admitted, r.confirmed)
	}
	r.memory()
	var idem int
	for shape, g := range r.keysAfter {
		if strings.HasSuffix(shape, ":idem:*") {
			idem += g.Count
		}
	}
	if int64(idem) != r.idemIndexed {
		r.fail("%d idempotency records, %d in the expiry index: some would never be purged", idem, r.idemIndexed)
	}
	if r.idemLatest.After(time.Now().Add(24*time.Hour + time.Minute)) {
		r.fail("an idempotency record expires at %s, beyond 24 h", r.idemLatest)
	}
	for shape, g := range r.keysAfter {
		ok := false
		for _, k := range retained {
			ok = ok || regexp.MustCompile(k.pattern).MatchString(shape)
		}
		if !ok {
			r.fail("keys outlive their jobs: %d of %s (%s)", g.Count, shape, g.Type)
		}
		if strings.HasSuffix(shape, ":lease") && (g.Type != "string" || g.Count > queueShards) {
			r.fail("%d keys of %s (%s): more than one lease token per queue shard", g.Count, shape, g.Type)
		}
		if strings.HasPrefix(shape, "hg:rl:") && g.WithTTL != g.Count {
			r.fail("%d rate-limit keys without TTL", g.Count-g.WithTTL)
		}
	}
}

// memory compares the server's RSS over the first and the last minute of
// the load (or fifth, for shorter runs).
func (r *report) memory() {
	var during []sample
	for _, s := range r.samples {
		if s.at <= r.duration {
			during = append(during, s)
		}
	}
	if len(during) < 4 {
		return
	}
	window := min(time.Minute, r.duration/5)
	var first, last []int64
	for _, s := range during {
		r.rssMax = max(r.rssMax, s.rssKB)
		if s.at < window {
			first = append(first, s.rssKB)
		}
		if s.at > r.duration-window {
			last = append(last, s.rssKB)
		}
	}
	r.rssFirst, r.rssLast = mean(first)/1024, mean(last)/1024
	// A plateau: the last minute within a quarter (and 16 MiB) of the first.
	if r.rssLast > r.rssFirst*1.25+16 {
		r.fail("memory keeps growing: %.1f MiB in the first minute, %.1f MiB in the last", r.rssFirst, r.rssLast)
	}
}

func mean(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum int64
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Soak: `hourglass serve` under a steady mixed load\n\n")
	w("Generated by `make soak` (`go run ./internal/soak -duration %s -rate %d`) on %s: %s, redis-server %s, %d CPUs, vegeta v12 as the load generator.\n\n",
		r.duration, r.rate, r.started.Format("2006-01-02 15:04 UTC"), r.goVersion, r.redis, runtime.NumCPU())
	w("Setup: `hourglass serve` (built without -race) on a spawned redis-server (loopback, no persistence), a fake payout provider that checks signatures and pays each idempotency key once, a finance webhook; rate limits `HOURGLASS_RATE_PURCHASE_USER=%s`, `HOURGLASS_RATE_WITHDRAWAL_USER=30/m` (per-source limits off: every request comes from 127.0.0.1).\n\n", botLimit)
	w("Mix (by request): 30%% withdrawals created (20,000 users, due in 0-10 s, paid during the run), 30%% purchases by new buyers of a flash sale, 5%% a bot buying as one user far over its limit (its 429s are intended), 10%% item state, 5%% own purchase, 10%% own withdrawal list, 10%% one own withdrawal.\n\n")
	if len(r.failures) == 0 {
		w("**Verdict: pass.** 0 unintended answers, 0 lost or repeated payouts, memory flat, no keys leaked.\n\n")
	} else {
		w("**Verdict: FAIL.**\n\n")
		for _, f := range r.failures {
			w("- %s\n", f)
		}
		w("\n")
	}
	w("## Throughput and latency\n\n")
	w("| kind | requests | rate/s | p50 ms | p90 ms | p99 ms | max ms | answers |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	row := func(name string, m *vegeta.Metrics) {
		codes := make([]string, 0, len(m.StatusCodes))
		for c, n := range m.StatusCodes {
			codes = append(codes, fmt.Sprintf("%s×%d", c, n))
		}
		sort.Strings(codes)
		w("| %s | %d | %.1f | %s | %s | %s | %s | %s |\n", name, m.Requests, m.Rate, ms(m.Latencies.P50), ms(m.Latencies.P90),
			ms(m.Latencies.P99), ms(m.Latencies.Max), strings.Join(codes, " "))
	}
	for _, k := range r.kinds {
		row(k, r.metrics[k])
	}
	row("**all**", &r.all)
	w("\nSuccessful (intended) throughput: %.1f requests/s over %s. Unintended answers: %d.\n", r.all.Throughput, r.all.Duration.Round(time.Second), sumCounts(r.unintended))
	if len(r.unintended) > 0 {
		keys := slices.Sorted(mapKeys(r.unintended))
		for _, k := range keys {
			w("- %d × %s\n", r.unintended[k], k)
		}
	}
	w("\n## Payouts and orders\n\n")
	w("| check | value |\n| --- | ---: |\n")
	w("| withdrawals created (202) | %d |\n| paid, one provider call each | %d |\n| never reached the provider (lost) | %d |\n| sent to the provider more than once | %d |\n| paid but finance not told | %d |\n",
		r.created, r.paidOnce, r.lost, r.paidTwice, r.finMissing)
	w("| purchases admitted / orders confirmed | %d / %d |\n| drained (every payout and order done, queues empty) in | %s |\n\n", r.admitted, r.confirmed, r.drainTook.Round(100*time.Millisecond))
	w("## Memory\n\n")
	w("`hourglass serve` RSS: first minute %.1f MiB, last minute %.1f MiB, max %.1f MiB (a plateau: the last minute is within 25%% + 16 MiB of the first). Redis used_memory: %.1f MiB before the load, %.1f MiB after draining.\n\n",
		r.rssFirst, r.rssLast, float64(r.rssMax)/1024, float64(r.redisBefore)/(1<<20), float64(r.redisAfterDrain)/(1<<20))
	w("| t | server RSS MiB | Redis used MiB |\n| ---: | ---: | ---: |\n")
	for i, s := range r.samples {
		if i%6 == 0 || i == len(r.samples)-1 { // every 30 s
			w("| %s | %.1f | %.1f |\n", s.at.Round(time.Second), float64(s.rssKB)/1024, float64(s.redisMem)/(1<<20))
		}
	}
	w("\n## Redis keys after draining\n\n")
	w("Every key by shape (ids replaced by `*`, shard numbers by `N`). What stays is the ledger or has a bounded retention; queue entries, leases and holds are gone.\n\n")
	w("| key shape | type | keys | with TTL | retention |\n| --- | --- | ---: | ---: | --- |\n")
	shapes := slices.Sorted(mapKeys(r.keysAfter))
	for _, shape := range shapes {
		g := r.keysAfter[shape]
		why := "**not expected**"
		for _, k := range retained {
			if regexp.MustCompile(k.pattern).MatchString(shape) {
				why = k.why
				break
			}
		}
		w("| `%s` | %s | %d | %d | %s |\n", shape, g.Type, g.Count, g.WithTTL, why)
	}
	w("\nIdempotency entries in the shards' hashes: %d; records of the first layout in the expiry index: %d (latest expiry %s, 24 h after its request).\n",
		r.idemEntries, r.idemIndexed, r.idemLatest.Format(time.RFC3339))
	w("\n## /v1/admin/stats after draining\n\n```json\n%s\n```\n", r.stats)
	return b.String()
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func mapKeys[M ~map[K]V, K comparable, V any](m M) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
