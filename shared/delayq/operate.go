package delayq

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// What operators do with a queue: look at what is next and at what died, and
// give dead jobs another chance or forget them.

var (
	//go:embed lua/dead.lua
	deadSrc    string
	deadScript = redis.NewScript(deadSrc)
)

// Scheduled is a job waiting in a due set.
type Scheduled struct {
	Shard int       `json:"shard"`
	ID    string    `json:"id"`
	Due   time.Time `json:"due_at"`
}

// DeadJob is a job in a dead set.
type DeadJob struct {
	Shard  int       `json:"shard"`
	ID     string    `json:"id"`
	DiedAt time.Time `json:"died_at"`
}

// Peek returns up to limit scheduled jobs over every shard, earliest due
// first, in one pipelined round trip. It claims nothing.
func (q *Queue) Peek(ctx context.Context, limit int) ([]Scheduled, error) {
	heads, err := q.heads(ctx, limit, func(k Keys) string { return k.Due })
	if err != nil {
		return nil, fmt.Errorf("delayq: peek %s: %w", q.name, err)
	}
	out := make([]Scheduled, len(heads))
	for i, h := range heads {
		out[i] = Scheduled{Shard: h.shard, ID: h.id, Due: time.UnixMilli(h.score).UTC()}
	}
	return out, nil
}

// Dead returns up to limit dead jobs over every shard, longest dead first.
func (q *Queue) Dead(ctx context.Context, limit int) ([]DeadJob, error) {
	heads, err := q.heads(ctx, limit, func(k Keys) string { return k.Dead })
	if err != nil {
		return nil, fmt.Errorf("delayq: dead jobs of %s: %w", q.name, err)
	}
	out := make([]DeadJob, len(heads))
	for i, h := range heads {
		out[i] = DeadJob{Shard: h.shard, ID: h.id, DiedAt: time.UnixMilli(h.score).UTC()}
	}
	return out, nil
}

type head struct {
	shard int
	id    string
	score int64
}

// heads merges the first limit members of one sorted set of every shard.
func (q *Queue) heads(ctx context.Context, limit int, set func(Keys) string) ([]head, error) {
	if limit < 1 {
		return nil, nil
	}
	cmds := make([]*redis.ZSliceCmd, len(q.keys))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range q.keys {
			cmds[i] = p.ZRangeWithScores(ctx, set(k), 0, int64(limit-1))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var all []head
	for n, c := range cmds {
		for _, z := range c.Val() {
			id, _ := z.Member.(string)
			all = append(all, head{shard: n, id: id, score: int64(z.Score)})
		}
	}
	slices.SortStableFunc(all, func(a, b head) int {
		return cmp.Or(cmp.Compare(a.score, b.score), cmp.Compare(a.shard, b.shard), cmp.Compare(a.id, b.id))
	})
	return all[:min(limit, len(all))], nil
}

// DeadCount is the number of dead jobs over every shard.
func (q *Queue) DeadCount(ctx context.Context) (int64, error) {
	cmds := make([]*redis.IntCmd, len(q.keys))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range q.keys {
			cmds[i] = p.ZCard(ctx, k.Dead)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delayq: count dead jobs of %s: %w", q.name, err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// Batch is one bounded step of moving dead jobs on one shard.
type Batch struct {
	// IDs are the jobs moved (requeued or purged).
	IDs []string
	// Left is the number of dead jobs the shard still holds.
	Left int64
}

// RequeueDead moves dead jobs of shard n back to the due set, due at now, in
// one script: the named ids (at most MaxBatch; those not dead are skipped), or
// when none are named up to limit of the longest dead. Call it until Left is
// 0 to requeue a whole shard.
func (q *Queue) RequeueDead(ctx context.Context, n int, now time.Time, limit int, ids ...string) (Batch, error) {
	return q.takeDead(ctx, n, "requeue", now, limit, ids)
}

// PurgeDead deletes dead jobs of shard n for good, in one script: the named
// ids (at most MaxBatch; those not dead are skipped), or when none are named
// up to limit of the longest dead. Whatever records the jobs referred to stay
// as they are.
func (q *Queue) PurgeDead(ctx context.Context, n int, limit int, ids ...string) (Batch, error) {
	return q.takeDead(ctx, n, "purge", time.Time{}, limit, ids)
}

// takeDead runs dead.lua on shard n: how is "requeue" or "purge".
func (q *Queue) takeDead(ctx context.Context, n int, how string, now time.Time, limit int, ids []string) (Batch, error) {
	k, err := q.shard(n)
	if err != nil {
		return Batch{}, err
	}
	if limit < 1 || limit > MaxBatch {
		return Batch{}, fmt.Errorf("delayq: batch limit %d outside 1..%d", limit, MaxBatch)
	}
	if len(ids) > MaxBatch {
		return Batch{}, fmt.Errorf("delayq: %d ids in one batch, at most %d", len(ids), MaxBatch)
	}
	args := make([]any, 0, 3+len(ids))
	args = append(args, how, now.UnixMilli(), limit)
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := deadScript.Run(ctx, q.rdb, []string{k.Due, k.Inflight, k.Dead}, args...).Slice()
	if err == nil {
		var b Batch
		if b, err = decodeBatch(res); err == nil {
			return b, nil
		}
	}
	return Batch{}, fmt.Errorf("delayq: %s dead jobs of %s: %w", how, k.Tag, err)
}

func decodeBatch(res []any) (Batch, error) {
	if len(res) != 2 {
		return Batch{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	raw, _ := res[0].([]any)
	b := Batch{IDs: make([]string, 0, len(raw))}
	for _, v := range raw {
		id, _ := v.(string)
		b.IDs = append(b.IDs, id)
	}
	b.Left, _ = res[1].(int64)
	return b, nil
}

// Job states a Place reports.
const (
	StateScheduled = "scheduled"
	StateInFlight  = "in_flight"
	StateDead      = "dead"
)

// Place is where a job is in a queue.
type Place struct {
	Queue string `json:"queue"`
	Shard int    `json:"shard"`
	ID    string `json:"id"`
	// State is scheduled, in_flight or dead.
	State string `json:"state"`
	// At is when it is due (scheduled), when its lease ends (in flight),
	// or when it died (dead).
	At time.Time `json:"at"`
}

// Locate reports where the jobs refs name are, in one pipelined round trip:
// one Place per set holding one of them (none for a job the queue does not
// hold). Refs on shards the queue does not have are skipped.
func (q *Queue) Locate(ctx context.Context, refs ...Ref) ([]Place, error) {
	type look struct {
		ref   Ref
		state string
		cmd   *redis.FloatCmd
	}
	var looks []look
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range refs {
			if r.Shard < 0 || r.Shard >= len(q.keys) {
				continue
			}
			k := q.keys[r.Shard]
			for _, s := range []struct{ state, key string }{{StateScheduled, k.Due}, {StateInFlight, k.Inflight}, {StateDead, k.Dead}} {
				looks = append(looks, look{ref: r, state: s.state, cmd: p.ZScore(ctx, s.key, r.ID)})
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("delayq: locate %d jobs of %s: %w", len(refs), q.name, err)
	}
	var out []Place
	for _, l := range looks {
		if l.cmd.Err() != nil {
			continue
		}
		out = append(out, Place{Queue: q.name, Shard: l.ref.Shard, ID: l.ref.ID, State: l.state,
			At: time.UnixMilli(int64(l.cmd.Val())).UTC()})
	}
	return out, nil
}

// Search scans every shard's due, in-flight and dead sets for jobs whose id
// matches the glob pattern (ZSCAN MATCH: it reads the whole sets, in steps
// of a few hundred, for operators' look-ups, not hot paths) and returns up
// to limit of them.
func (q *Queue) Search(ctx context.Context, pattern string, limit int) ([]Place, error) {
	var out []Place
	for n, k := range q.keys {
		for _, s := range []struct{ state, key string }{{StateScheduled, k.Due}, {StateInFlight, k.Inflight}, {StateDead, k.Dead}} {
			var cursor uint64
			for {
				kv, next, err := q.rdb.ZScan(ctx, s.key, cursor, pattern, 500).Result()
				if err != nil {
					return nil, fmt.Errorf("delayq: search %s: %w", k.Tag, err)
				}
				for i := 0; i+1 < len(kv); i += 2 {
					score, err := strconv.ParseFloat(kv[i+1], 64)
					if err != nil {
						continue
					}
					out = append(out, Place{Queue: q.name, Shard: n, ID: kv[i], State: s.state, At: time.UnixMilli(int64(score)).UTC()})
					if len(out) >= limit {
						return out, nil
					}
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
	}
	return out, nil
}
