package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

// perUser is how many withdrawals each user of the memory figure has: the
// users grow with the count, so a user's index stays the size a real user's
// would (a user with hundreds of withdrawals is an outlier, and the index
// of one is a skiplist rather than a listpack).
const perUser = 20

// benchMemory: Redis bytes per scheduled withdrawal with the Redis ledger
// (record, user index, idempotency record and its expiry, schedule, open
// set), from INFO memory before and after scheduling 1,000,000 through the
// service, with the share of each kind of key (MEMORY USAGE on a sample of
// each, and their encodings) in the note.
func benchMemory(ctx context.Context, rdb redis.UniversalClient, srv *server, rep *report, quick bool) error {
	n := 1_000_000
	if quick {
		n = 100_000
	}
	per, note, err := scheduleWithdrawals(ctx, rdb, srv, n, func(u int64) string { return "user-" + strconv.FormatInt(u, 10) })
	if err != nil {
		return err
	}
	rep.add(row{Key: "bytes_per_job", Figure: "Redis memory per scheduled withdrawal, Redis ledger (bytes)", Value: per,
		Target: "at most 700", Met: met(per <= 700), Note: note})
	// The same with user ids as long as a Cognito sub (a UUID): the record
	// is a listpack near the edge of its allocation, so id lengths show.
	if err := flushAndWait(ctx, rdb); err != nil {
		return err
	}
	perUUID, note, err := scheduleWithdrawals(ctx, rdb, srv, n/10, func(u int64) string {
		return fmt.Sprintf("%08x-7d1e-4c3a-9b2f-%012x", u, u)
	})
	if err != nil {
		return err
	}
	rep.add(row{Key: "bytes_per_job_uuid_users", Figure: "the same, user ids of 36 characters (a Cognito sub), a tenth as many (bytes)", Value: perUUID,
		Baseline: "bytes_per_job", Base: per, Note: note})
	return nil
}

// scheduleWithdrawals schedules n withdrawals through the service with the
// Redis ledger, perUser to each user (named by user), and returns the
// used_memory growth per withdrawal and a note of its shares by kind of key.
func scheduleWithdrawals(ctx context.Context, rdb redis.UniversalClient, srv *server, n int, user func(int64) string) (float64, string, error) {
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, "", err
	}
	if err := createWithdrawals(ctx, rdb, n, user, 1800); err != nil {
		return 0, "", err
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, "", err
	}
	per := float64(after-before) / float64(n)
	// MEMORY USAGE of a key of a million entries takes longer than the
	// functions' client waits.
	slow := redis.NewClient(&redis.Options{Addr: srv.addr, ReadTimeout: 2 * time.Minute})
	defer func() { _ = slow.Close() }()
	kinds, err := keyKinds(ctx, slow)
	if err != nil {
		return 0, "", err
	}
	var parts []string
	var counted float64
	for _, k := range kinds {
		share := k.bytes / float64(n)
		counted += share
		parts = append(parts, fmt.Sprintf("%s %.0f (%d keys, %s)", k.name, share, k.keys, k.encodings()))
	}
	parts = append(parts, fmt.Sprintf("keyspace table and allocator %.0f", per-counted))
	return per, fmt.Sprintf("%d withdrawals of %d users through the service, each with a request id: used_memory %d -> %d; "+
		"per withdrawal, by kind of key (MEMORY USAGE of a sample of each, its encodings): %s",
		n, max(n/perUser, 1), before, after, strings.Join(parts, ", ")), nil
}

// keyKind is one kind of key, named by the part of its name after the hash
// tag ("w" for "hg:{dq:withdrawals:0}:w:<id>"), with its memory estimated
// from a sample.
type keyKind struct {
	name  string
	keys  int64
	bytes float64 // estimated total: mean MEMORY USAGE of the sample times keys
	enc   map[string]int
}

func (k keyKind) encodings() string {
	var es []string
	for e, c := range k.enc {
		es = append(es, fmt.Sprintf("%s %d", e, c))
	}
	sort.Strings(es)
	return strings.Join(es, ", ")
}

// kindSample bounds how many keys of a kind are measured.
const kindSample = 2000

// keyKinds scans the keyspace, classifies every key by kind and measures a
// sample of each: the kinds, largest first.
func keyKinds(ctx context.Context, rdb redis.UniversalClient) ([]keyKind, error) {
	type acc struct {
		keyKind
		sampled int
		sum     int64
	}
	by := map[string]*acc{}
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 10_000).Result()
		if err != nil {
			return nil, err
		}
		var sample []string
		for _, key := range keys {
			name := kindOf(key)
			a := by[name]
			if a == nil {
				a = &acc{keyKind: keyKind{name: name, enc: map[string]int{}}}
				by[name] = a
			}
			a.keys++
			if a.sampled < kindSample {
				a.sampled++
				sample = append(sample, key)
			}
		}
		if len(sample) > 0 {
			usage := make([]*redis.IntCmd, len(sample))
			enc := make([]*redis.StringCmd, len(sample))
			if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, key := range sample {
					usage[i] = p.MemoryUsage(ctx, key, 0)
					enc[i] = p.ObjectEncoding(ctx, key)
				}
				return nil
			}); err != nil {
				return nil, err
			}
			for i, key := range sample {
				a := by[kindOf(key)]
				a.sum += usage[i].Val()
				a.enc[enc[i].Val()]++
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	out := make([]keyKind, 0, len(by))
	for _, a := range by {
		a.bytes = float64(a.sum) / float64(a.sampled) * float64(a.keys)
		out = append(out, a.keyKind)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].bytes > out[j].bytes })
	return out, nil
}

// kindOf names the kind of key: its first part after the hash tag.
func kindOf(key string) string {
	_, rest, ok := strings.Cut(key, "}:")
	if !ok {
		return key
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

// createWithdrawals creates n withdrawals through the service with the
// Redis ledger, as the API does, perUser to each user (named by user), each
// due delaySeconds later.
func createWithdrawals(ctx context.Context, rdb redis.UniversalClient, n int, user func(int64) string, delaySeconds int) error {
	users := max(n/perUser, 1)
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 1})
	if err != nil {
		return err
	}
	svc, err := withdrawal.NewService(withdrawal.Config{
		Ledger: ledger.NewRedis(rdb, q), Clock: clock.System{}, ShardFor: q.ShardFor,
		Rules: withdrawal.Rules{Currencies: []string{"CNY"}, MaxAmount: decimal.RequireFromString("1000000"),
			DefaultDelay: 0, MaxDelay: 30 * 24 * 3600 * 1e9},
	})
	if err != nil {
		return err
	}
	body := []byte(fmt.Sprintf(`{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":%d}`, delaySeconds))
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				user := user(i % int64(users))
				// The record keeps the API request's id (API Gateway's are 16
				// characters), as every record created through the API does.
				rctx := correlation.With(ctx, fmt.Sprintf("Jb2lXhB%08dE=", i))
				if _, err := httpapi.CreateWithdrawal(rctx, svc, user, "key-"+strconv.FormatInt(i, 10), body); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}
