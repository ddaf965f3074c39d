// Package delayq is a leased delay queue on Redis sorted sets.
//
// A queue is split into shards, each a hash-tagged group of keys on one cluster
// slot (see Keys). A job is an id scheduled at a due time. The poller claims due
// jobs under a lease (they move to the inflight set, scored by the lease deadline),
// hands them on, then acks them; a job whose lease runs out is returned to the due
// set, so a crash between claim and ack loses nothing. The queue holds references
// only: whatever a job means lives in records beside it, in the same slot.
//
// Every operation is one Lua script or one command on one slot. "Now" always
// comes from the caller, never from Redis, so tests control time.
package delayq

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxBatch bounds a claim: Lua's unpack() limit allows a few thousand
// arguments, and larger batches only lengthen the time Redis is blocked.
const MaxBatch = 1000

var (
	//go:embed lua/claim.lua
	claimSrc string
	//go:embed lua/ack.lua
	ackSrc string
	//go:embed lua/retry.lua
	retrySrc string
	//go:embed lua/kill.lua
	killSrc string
	//go:embed lua/reap.lua
	reapSrc string

	claimScript = redis.NewScript(claimSrc)
	ackScript   = redis.NewScript(ackSrc)
	retryScript = redis.NewScript(retrySrc)
	killScript  = redis.NewScript(killSrc)
	reapScript  = redis.NewScript(reapSrc)
)

// ErrLeaseLost reports that a job is no longer held under the given lease: it
// expired and the job was returned or claimed again.
var ErrLeaseLost = errors.New("delayq: lease lost")

// Job is one claimed job, as handed to dispatchers and, encoded as JSON, carried
// in work-queue messages.
type Job struct {
	// Kind tells the consumer what the job is for ("withdrawal.payout").
	Kind string `json:"kind"`
	// Queue and Shard locate the job and the records beside it.
	Queue string `json:"queue"`
	Shard int    `json:"shard"`
	// ID is the job id, which is also the id of the record it refers to.
	ID string `json:"id"`
	// Due is the time the job fell due, unix ms.
	Due int64 `json:"due_ms"`
	// Lease is the lease token (its deadline, unix ms); 0 when not leased.
	Lease int64 `json:"lease,omitempty"`
}

// Options configures a Queue.
type Options struct {
	// Prefix starts every key (default "hg:").
	Prefix string
	// Name is the queue name ("withdrawals").
	Name string
	// Kind is the job kind of the queue's jobs.
	Kind string
	// Shards is the number of shards (default 1).
	Shards int
}

// Queue is one named delay queue over its shards.
type Queue struct {
	rdb    redis.Cmdable
	name   string
	kind   string
	keys   []Keys
	prefix string
}

// New returns the queue described by opts on rdb.
func New(rdb redis.Cmdable, opts Options) (*Queue, error) {
	if opts.Name == "" {
		return nil, errors.New("delayq: queue name is empty")
	}
	opts.Shards = cmp.Or(opts.Shards, 1)
	if opts.Shards < 1 || opts.Shards > 1024 {
		return nil, fmt.Errorf("delayq: shard count %d outside 1..1024", opts.Shards)
	}
	opts.Prefix = cmp.Or(opts.Prefix, "hg:")
	q := &Queue{rdb: rdb, name: opts.Name, kind: opts.Kind, prefix: opts.Prefix}
	for i := range opts.Shards {
		q.keys = append(q.keys, newKeys(opts.Prefix, opts.Name, i))
	}
	return q, nil
}

// Name is the queue name.
func (q *Queue) Name() string { return q.name }

// Kind is the job kind of the queue.
func (q *Queue) Kind() string { return q.kind }

// Shards is the number of shards.
func (q *Queue) Shards() int { return len(q.keys) }

// Keys returns the keys of shard n.
func (q *Queue) Keys(n int) Keys { return q.keys[n] }

// ShardFor maps a key (a user id, an item id) to a shard, stably.
func (q *Queue) ShardFor(key string) int { return ShardOf(key, len(q.keys)) }

// ShardOf maps key to one of shards shards, stably (FNV-1a).
func ShardOf(key string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(shards))
}

func (q *Queue) shard(n int) (Keys, error) {
	if n < 0 || n >= len(q.keys) {
		return Keys{}, fmt.Errorf("delayq: %s has no shard %d", q.name, n)
	}
	return q.keys[n], nil
}

// Add schedules job id on shard n at due (a job already scheduled moves).
func (q *Queue) Add(ctx context.Context, n int, id string, due time.Time) error {
	return q.add(ctx, n, id, due, q.rdb.ZAdd)
}

// AddNoEarlier schedules job id on shard n at due, unless it is scheduled
// later already (ZADD GT): a follow-up that must not pull an existing later
// schedule forward.
func (q *Queue) AddNoEarlier(ctx context.Context, n int, id string, due time.Time) error {
	return q.add(ctx, n, id, due, q.rdb.ZAddGT)
}

// AddNoLater schedules job id on shard n at due, unless it is scheduled
// earlier already (ZADD LT): an early job is harmless (the ledger puts it
// back at its record's time), a late one pays late.
func (q *Queue) AddNoLater(ctx context.Context, n int, id string, due time.Time) error {
	return q.add(ctx, n, id, due, q.rdb.ZAddLT)
}

func (q *Queue) add(ctx context.Context, n int, id string, due time.Time,
	zadd func(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd) error {
	k, err := q.shard(n)
	if err != nil {
		return err
	}
	if err := zadd(ctx, k.Due, redis.Z{Score: float64(due.UnixMilli()), Member: id}).Err(); err != nil {
		return fmt.Errorf("delayq: add %s to %s: %w", id, k.Tag, err)
	}
	return nil
}

// DueAt reports when job id of shard n is scheduled, and false if it is not
// (it may be leased, or absent).
func (q *Queue) DueAt(ctx context.Context, n int, id string) (time.Time, bool, error) {
	k, err := q.shard(n)
	if err != nil {
		return time.Time{}, false, err
	}
	score, err := q.rdb.ZScore(ctx, k.Due, id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("delayq: look up %s in %s: %w", id, k.Tag, err)
	}
	return time.UnixMilli(int64(score)).UTC(), true, nil
}

// Cancel removes a scheduled (not claimed) job; it reports whether it was there.
func (q *Queue) Cancel(ctx context.Context, n int, id string) (bool, error) {
	k, err := q.shard(n)
	if err != nil {
		return false, err
	}
	removed, err := q.rdb.ZRem(ctx, k.Due, id).Result()
	if err != nil {
		return false, fmt.Errorf("delayq: cancel %s in %s: %w", id, k.Tag, err)
	}
	return removed == 1, nil
}

// Claim is the result of one claim call on one shard.
type Claim struct {
	// Jobs are the claimed jobs, oldest due first, all under one lease.
	Jobs []Job
	// Lease is the lease token (deadline, unix ms) of the claimed jobs.
	Lease int64
	// Next is the due time of the earliest job still waiting; zero if none.
	Next time.Time
	// Reaped counts expired leases returned to the due set by this call.
	Reaped int
}

// Claim returns up to limit expired leases of shard n to the due set, then
// claims up to limit jobs due at now under a lease until now+lease.
func (q *Queue) Claim(ctx context.Context, n int, now time.Time, lease time.Duration, limit int) (Claim, error) {
	_, c, err := q.AckClaim(ctx, n, 0, false, nil, now, lease, limit)
	return c, err
}

func (q *Queue) decodeClaim(n int, token int64, res []any) (Claim, error) {
	if len(res) != 4 {
		return Claim{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	if t, ok := res[3].(int64); ok {
		token = t // moved on past a lease of the same deadline
	}
	flat, _ := res[0].([]any)
	c := Claim{Lease: token, Jobs: make([]Job, 0, len(flat)/2)}
	for i := 0; i+1 < len(flat); i += 2 {
		id, _ := flat[i].(string)
		due, err := parseScore(flat[i+1])
		if err != nil {
			return Claim{}, err
		}
		c.Jobs = append(c.Jobs, Job{Kind: q.kind, Queue: q.name, Shard: n, ID: id, Due: due, Lease: token})
	}
	if s, _ := res[1].(string); s != "" {
		ms, err := parseScore(s)
		if err != nil {
			return Claim{}, err
		}
		c.Next = time.UnixMilli(ms).UTC()
	}
	reaped, _ := res[2].(int64)
	c.Reaped = int(reaped)
	return c, nil
}

// parseScore reads a sorted-set score reply (a decimal string) as unix ms.
func parseScore(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("score %v is not a string", v)
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("bad score %q: %w", s, err)
	}
	return int64(f), nil
}

// Ack finishes jobs of shard n claimed under lease token; it returns how many
// were still held by that lease.
func (q *Queue) Ack(ctx context.Context, n int, token int64, ids ...string) (int, error) {
	k, err := q.shard(n)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	acked, err := ackScript.Run(ctx, q.rdb, []string{k.Inflight}, ackArgs(token, ids)...).Int()
	if err != nil {
		return 0, fmt.Errorf("delayq: ack %d jobs in %s: %w", len(ids), k.Tag, err)
	}
	return acked, nil
}

// ackArgs are ARGV of ack.lua: the lease token, then the ids.
func ackArgs(token int64, ids []string) []any {
	args := make([]any, 0, len(ids)+1)
	args = append(args, token)
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// AckClaim acks jobs of shard n under lease token, then claims the next
// batch (as Claim), in one round trip: a poller working through a backlog
// pays one round trip per batch instead of two. With whole, every job still
// under the lease is acked (as AckLease) and ids is not used; otherwise ids
// are (as Ack); with neither, it only claims. If the round trip fails, either
// step may have happened: jobs not acked are sent again when their lease
// expires, jobs claimed come back the same way; nothing is lost.
func (q *Queue) AckClaim(ctx context.Context, n int, token int64, whole bool, ids []string, now time.Time, lease time.Duration, limit int) (int, Claim, error) {
	k, err := q.shard(n)
	if err != nil {
		return 0, Claim{}, err
	}
	if limit < 1 || limit > MaxBatch {
		return 0, Claim{}, fmt.Errorf("delayq: claim limit %d outside 1..%d", limit, MaxBatch)
	}
	var args []any
	if !whole {
		args = ackArgs(token, ids)
	}
	next := now.Add(lease).UnixMilli()
	t := strconv.FormatInt(token, 10)
	pipe := q.rdb.Pipeline()
	var (
		leaseCmd *redis.IntCmd
		idsCmd   *redis.Cmd
	)
	switch {
	case whole:
		leaseCmd = pipe.ZRemRangeByScore(ctx, k.Inflight, t, t)
	case len(ids) > 0:
		idsCmd = ackScript.EvalSha(ctx, pipe, []string{k.Inflight}, args...)
	}
	claimCmd := claimScript.EvalSha(ctx, pipe, []string{k.Due, k.Inflight, k.Lease}, now.UnixMilli(), next, limit)
	_, _ = pipe.Exec(ctx) // each command's own error is looked at below

	var acked int
	switch {
	case leaseCmd != nil:
		removed, err := leaseCmd.Result()
		if err != nil {
			return 0, Claim{}, fmt.Errorf("delayq: ack lease %d in %s: %w", token, k.Tag, err)
		}
		acked = int(removed)
	case idsCmd != nil:
		// A script Redis does not hold yet (NOSCRIPT) did not run: run it
		// again the way that loads it.
		acked, err = idsCmd.Int()
		if noScript(err) {
			acked, err = ackScript.Run(ctx, q.rdb, []string{k.Inflight}, args...).Int()
		}
		if err != nil {
			return 0, Claim{}, fmt.Errorf("delayq: ack %d jobs in %s: %w", len(ids), k.Tag, err)
		}
	}
	res, err := claimCmd.Slice()
	if noScript(err) {
		res, err = claimScript.Run(ctx, q.rdb, []string{k.Due, k.Inflight, k.Lease}, now.UnixMilli(), next, limit).Slice()
	}
	if err != nil {
		return acked, Claim{}, fmt.Errorf("delayq: claim %s: %w", k.Tag, err)
	}
	c, err := q.decodeClaim(n, next, res)
	if err != nil {
		return acked, Claim{}, fmt.Errorf("delayq: claim %s: %w", k.Tag, err)
	}
	return acked, c, nil
}

func noScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// AckLease finishes every job of shard n still held under lease token:
// one command, whatever the batch size, for a claim whose jobs were all
// handed over. (A job whose lease expired and was claimed again is under
// a newer token: a shard's tokens only grow.)
func (q *Queue) AckLease(ctx context.Context, n int, token int64) (int, error) {
	k, err := q.shard(n)
	if err != nil {
		return 0, err
	}
	t := strconv.FormatInt(token, 10)
	acked, err := q.rdb.ZRemRangeByScore(ctx, k.Inflight, t, t).Result()
	if err != nil {
		return 0, fmt.Errorf("delayq: ack lease %d in %s: %w", token, k.Tag, err)
	}
	return int(acked), nil
}

// RetryAt takes job id of shard n out of its lease (token; 0 for any) and
// schedules it again at at. It returns ErrLeaseLost when the lease no longer
// holds the job.
func (q *Queue) RetryAt(ctx context.Context, n int, id string, token int64, at time.Time) error {
	k, err := q.shard(n)
	if err != nil {
		return err
	}
	ok, err := retryScript.Run(ctx, q.rdb, []string{k.Due, k.Inflight}, id, at.UnixMilli(), token).Int()
	if err != nil {
		return fmt.Errorf("delayq: retry %s in %s: %w", id, k.Tag, err)
	}
	if ok == 0 {
		return fmt.Errorf("retry %s in %s: %w", id, k.Tag, ErrLeaseLost)
	}
	return nil
}

// Kill moves job id of shard n from its lease (token; 0 for any) to the dead
// set. It returns ErrLeaseLost when the lease no longer holds the job.
func (q *Queue) Kill(ctx context.Context, n int, id string, token int64, now time.Time) error {
	k, err := q.shard(n)
	if err != nil {
		return err
	}
	ok, err := killScript.Run(ctx, q.rdb, []string{k.Inflight, k.Dead}, id, token, now.UnixMilli()).Int()
	if err != nil {
		return fmt.Errorf("delayq: kill %s in %s: %w", id, k.Tag, err)
	}
	if ok == 0 {
		return fmt.Errorf("kill %s in %s: %w", id, k.Tag, ErrLeaseLost)
	}
	return nil
}

// Reap returns up to limit jobs of shard n whose lease expired by now to the
// due set, and reports how many it returned.
func (q *Queue) Reap(ctx context.Context, n int, now time.Time, limit int) (int, error) {
	k, err := q.shard(n)
	if err != nil {
		return 0, err
	}
	reaped, err := reapScript.Run(ctx, q.rdb, []string{k.Due, k.Inflight}, now.UnixMilli(), limit).Int()
	if err != nil {
		return 0, fmt.Errorf("delayq: reap %s: %w", k.Tag, err)
	}
	return reaped, nil
}

// NextDue returns the due time of the earliest scheduled job of shard n, and
// false when the shard has none.
func (q *Queue) NextDue(ctx context.Context, n int) (time.Time, bool, error) {
	k, err := q.shard(n)
	if err != nil {
		return time.Time{}, false, err
	}
	head, err := q.rdb.ZRangeWithScores(ctx, k.Due, 0, 0).Result()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("delayq: next due in %s: %w", k.Tag, err)
	}
	if len(head) == 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(int64(head[0].Score)).UTC(), true, nil
}

// Stats are a queue's counters, summed over its shards.
type Stats struct {
	// Due counts scheduled jobs, DueNow those of them already due.
	Due    int64 `json:"due"`
	DueNow int64 `json:"due_now"`
	// OldestDueLagMS is how long the oldest due job has waited past its due time.
	OldestDueLagMS int64 `json:"oldest_due_lag_ms"`
	// Inflight counts claimed jobs not yet acked, Dead those given up on.
	Inflight int64 `json:"inflight"`
	Dead     int64 `json:"dead"`
}

// Stats reads the queue's counters at now, in one pipelined round trip.
func (q *Queue) Stats(ctx context.Context, now time.Time) (Stats, error) {
	type shardCmds struct {
		due, dueNow, inflight, dead *redis.IntCmd
		head                        *redis.ZSliceCmd
	}
	cmds := make([]shardCmds, len(q.keys))
	nowS := strconv.FormatInt(now.UnixMilli(), 10)
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range q.keys {
			cmds[i] = shardCmds{
				due:      p.ZCard(ctx, k.Due),
				dueNow:   p.ZCount(ctx, k.Due, "-inf", nowS),
				head:     p.ZRangeWithScores(ctx, k.Due, 0, 0),
				inflight: p.ZCard(ctx, k.Inflight),
				dead:     p.ZCard(ctx, k.Dead),
			}
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("delayq: stats of %s: %w", q.name, err)
	}
	var s Stats
	for _, c := range cmds {
		s.Due += c.due.Val()
		s.DueNow += c.dueNow.Val()
		s.Inflight += c.inflight.Val()
		s.Dead += c.dead.Val()
		if head := c.head.Val(); len(head) > 0 {
			if lag := now.UnixMilli() - int64(head[0].Score); lag > s.OldestDueLagMS {
				s.OldestDueLagMS = lag
			}
		}
	}
	return s, nil
}

// Ref names a job: its shard and id.
type Ref struct {
	Shard int
	ID    string
}

// Holds reports, in one pipelined round trip, which jobs the queue holds
// (scheduled or leased). Jobs on shards the queue does not have are not held.
func (q *Queue) Holds(ctx context.Context, refs []Ref) ([]bool, error) {
	return q.HoldsBy(ctx, refs, nil)
}

// HoldsBy is Holds where a scheduled job counts as held only if it is due
// no later than by[i] (a zero by[i], or a nil by: at any time); a leased
// job is held.
func (q *Queue) HoldsBy(ctx context.Context, refs []Ref, by []time.Time) ([]bool, error) {
	out := make([]bool, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	type pair struct{ due, inflight *redis.FloatCmd }
	cmds := make([]pair, len(refs))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range refs {
			if r.Shard < 0 || r.Shard >= len(q.keys) {
				continue
			}
			k := q.keys[r.Shard]
			cmds[i] = pair{p.ZScore(ctx, k.Due, r.ID), p.ZScore(ctx, k.Inflight, r.ID)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("delayq: look up %d jobs of %s: %w", len(refs), q.name, err)
	}
	for i, c := range cmds {
		if c.due == nil {
			continue
		}
		scheduled := c.due.Err() == nil
		if scheduled && by != nil && !by[i].IsZero() && int64(c.due.Val()) > by[i].UnixMilli() {
			scheduled = false // too late: it must be due by then
		}
		out[i] = scheduled || c.inflight.Err() == nil
	}
	return out, nil
}
