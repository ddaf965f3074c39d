package modelcheck_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/lostreply"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// runsEnv sets how many runs each model test makes (make check-model sets
// 10000); without it, a number `make test` affords on every commit.
const runsEnv = "MODEL_RUNS"

// defaultRuns are the runs per backend without MODEL_RUNS.
var defaultRuns = map[string]int{"redis": 150, "dynamodb": 40}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}

// runs sets rapid's number of checks for the backend's test.
func runs(t *testing.T, name string) int {
	n := defaultRuns[name]
	if v := os.Getenv(runsEnv); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			t.Fatalf("%s=%q is not a number of runs", runsEnv, v)
		}
	}
	if f := flag.Lookup("rapid.checks"); f != nil && !explicit("rapid.checks") {
		_ = f.Value.Set(fmt.Sprint(n))
	}
	return n
}

// explicit reports whether the flag was given on the command line.
func explicit(name string) bool {
	found := false
	flag.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

var tableSeq atomic.Int64

var backends = []backend{
	{name: "redis", open: func(rdb *redis.Client, q *delayq.Queue, _ *lostreply.Switch) (withdrawal.Ledger, func(), error) {
		l := ledger.NewRedis(rdb, q)
		l.Grace = time.Minute
		return l, func() {}, nil
	}},
	{name: "dynamodb"}, // opened against the test's dynalite, below
}

func TestWithdrawalModel(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			n := runs(t, be.name)
			srv := redistest.Start(t)
			lose := &lostreply.Switch{}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			rdb.AddHook(lose.Hook())
			t.Cleanup(func() { _ = rdb.Close() })
			if be.name == "dynamodb" {
				db := dynalitetest.Start(t)
				client := db.Client()
				be.open = func(_ *redis.Client, q *delayq.Queue, lose *lostreply.Switch) (withdrawal.Ledger, func(), error) {
					k := tableSeq.Add(1)
					tables := ledger.Tables{Withdrawals: fmt.Sprintf("w-%d", k), Orders: fmt.Sprintf("o-%d", k),
						Idempotency: fmt.Sprintf("i-%d", k)}
					if err := ledger.CreateTables(context.Background(), client, tables); err != nil {
						return nil, nil, err
					}
					l := ledger.NewDynamo(lose.Dynamo(client), tables, q, ledger.DynamoOptions{Logger: quiet, Grace: time.Minute})
					return l, func() { dropTables(client, tables) }, nil
				}
			}
			prov := newProvider(secret, nil, window, 300*time.Millisecond)
			t.Cleanup(prov.srv.Close)
			stats := &runStats{states: map[string]bool{}, acts: map[string]int{}}
			start := time.Now()
			rapid.Check(t, run(env{rdb: rdb, lose: lose, prov: prov, be: be}, stats))
			report(t, be.name, n, stats, time.Since(start))
		})
	}
}

// report prints what the runs did, for make check-model and the closing
// notes: runs, steps, distinct abstract states, how often each action ran.
func report(t *testing.T, name string, want int, s *runStats, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var acts []string
	for a, n := range s.acts {
		acts = append(acts, fmt.Sprintf("%s %d", a, n))
	}
	sort.Strings(acts)
	verdict := "no invariant broken"
	if t.Failed() {
		verdict = "INVARIANT BROKEN (see above)"
	}
	line := fmt.Sprintf("model withdrawals/%s: %d runs (of %d asked), %d steps, %d distinct states, %s in %s\n  actions: %s",
		name, s.runs, want, s.steps, len(s.states), verdict, took.Round(time.Millisecond), strings.Join(acts, ", "))
	t.Log(line)
	fmt.Println(line)
}
