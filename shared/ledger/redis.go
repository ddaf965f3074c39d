// Package ledger holds the backends of the system of record. Redis keeps
// records next to their delay-queue shard so that record changes and queue
// changes are one atomic script.
package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var (
	//go:embed lua/reserve.lua
	reserveSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/create.lua
	createSrc string
	//go:embed lua/cancel.lua
	cancelSrc string
	//go:embed lua/begin.lua
	beginSrc string
	//go:embed lua/finish.lua
	finishSrc string
	//go:embed lua/retry.lua
	retrySrc string
	//go:embed lua/notified.lua
	notifiedSrc string
	//go:embed lua/purge_keys.lua
	purgeKeysSrc string
	//go:embed lua/purge_idem.lua
	purgeIdemSrc string
	//go:embed lua/send.lua
	sendSrc string
	//go:embed lua/resolve.lua
	resolveSrc string
	//go:embed lua/apply.lua
	applySrc string
	//go:embed lua/reschedule.lua
	rescheduleSrc string

	reserveScript    = redis.NewScript(reserveSrc)
	releaseScript    = redis.NewScript(releaseSrc)
	createScript     = redis.NewScript(createSrc)
	cancelScript     = redis.NewScript(cancelSrc)
	beginScript      = redis.NewScript(beginSrc)
	finishScript     = redis.NewScript(finishSrc)
	retryScript      = redis.NewScript(retrySrc)
	notifiedScript   = redis.NewScript(notifiedSrc)
	purgeKeysScript  = redis.NewScript(purgeKeysSrc)
	purgeIdemScript  = redis.NewScript(purgeIdemSrc)
	sendScript       = redis.NewScript(sendSrc)
	resolveScript    = redis.NewScript(resolveSrc)
	applyScript      = redis.NewScript(applySrc)
	rescheduleScript = redis.NewScript(rescheduleSrc)
)

// keptEvents bounds the callback event ids a record keeps to tell a replay.
const keptEvents = 16

// newOp names one ledger write: the write stores it, so that a write whose
// answer was lost and which was sent again (go-redis and the AWS SDK resend
// on a dropped connection) is recognised as our own.
func newOp() string { return ulid.Make().String() }

// ClockSkew is how far a consumer's clock may run behind the poller's that
// claimed a job before the job counts as not due yet.
const ClockSkew = time.Second

// Redis is the withdrawal ledger on Redis, beside the withdrawal queue.
type Redis struct {
	rdb redis.Cmdable
	q   *delayq.Queue
	// Grace is how long a withdrawal may go without a job (it may be in the
	// work queue, or its consumer still telling finance) before Reconcile
	// gives it one back (default 1m).
	Grace time.Duration
}

var _ withdrawal.Ledger = (*Redis)(nil)

// NewRedis returns the Redis ledger of the withdrawals in queue q.
func NewRedis(rdb redis.Cmdable, q *delayq.Queue) *Redis {
	return &Redis{rdb: rdb, q: q}
}

func (l *Redis) shardKeys(shard int) (delayq.Keys, error) {
	if shard < 0 || shard >= l.q.Shards() {
		return delayq.Keys{}, fmt.Errorf("ledger: withdrawal shard %d outside 0..%d", shard, l.q.Shards()-1)
	}
	return l.q.Keys(shard), nil
}

// Reserve implements withdrawal.Ledger. A completed key's record keeps no
// response body: the first answer is the withdrawal as it was created, read
// back from its record with the due time the key kept (a reschedule or a
// retry moves the record's), so a replay answers byte for byte what the
// first request got, whatever happened to the withdrawal since.
func (l *Redis) Reserve(ctx context.Context, r withdrawal.Reservation) (withdrawal.KeyState, error) {
	k, err := l.shardKeys(r.Key.Shard)
	if err != nil {
		return withdrawal.KeyState{}, err
	}
	digest := idemDigest(r.Key.UserID, r.Key.Key)
	fp := keptFingerprint(r.Fingerprint)
	res, err := reserveScript.Run(ctx, l.rdb,
		[]string{idemSetKey(k), idemKey(k, digest), idemExpiryKey(k)},
		fp, r.ID, r.Now.UnixMilli(), r.LockUntil.UnixMilli(), base36(r.ExpiresAt), digest, base36(r.LockUntil)).Slice()
	if err != nil {
		return withdrawal.KeyState{}, fmt.Errorf("ledger: reserve idempotency key: %w", err)
	}
	if len(res) != 5 {
		return withdrawal.KeyState{}, fmt.Errorf("ledger: reserve: unexpected reply %v", res)
	}
	phase, _ := res[0].(int64)
	st := withdrawal.KeyState{Phase: withdrawal.KeyPhase(phase)}
	st.Fingerprint, _ = res[1].(string)
	if st.Fingerprint == fp {
		st.Fingerprint = r.Fingerprint // the part kept is the request's
	}
	st.ID, _ = res[2].(string)
	if st.Phase != withdrawal.KeyCompleted {
		return st, nil
	}
	if resp, _ := res[3].(string); resp != "" {
		st.Response = []byte(resp) // kept by the first layout
		return st, nil
	}
	dueMS, err := strconv.ParseInt(fmt.Sprint(res[4]), 36, 64)
	if err != nil {
		return withdrawal.KeyState{}, fmt.Errorf("ledger: idempotency record of %s: due time %v: %w", st.ID, res[4], err)
	}
	w, err := l.Get(ctx, r.Key.UserID, st.ID)
	if err != nil {
		return withdrawal.KeyState{}, fmt.Errorf("ledger: first answer of %s: %w", st.ID, err)
	}
	if st.Response, err = withdrawal.CreatedBody(w.AsCreated(time.UnixMilli(dueMS).UTC())); err != nil {
		return withdrawal.KeyState{}, err
	}
	return st, nil
}

// Release implements withdrawal.Ledger. The reservation is dropped even
// after a Create was sent: create.lua checks the reservation and writes
// the record in one step, so a create that runs late, after this, finds
// the reservation gone (or another's) and writes nothing.
func (l *Redis) Release(ctx context.Context, key withdrawal.IdemKey, id string, _ bool) error {
	k, err := l.shardKeys(key.Shard)
	if err != nil {
		return err
	}
	digest := idemDigest(key.UserID, key.Key)
	err = releaseScript.Run(ctx, l.rdb, []string{idemSetKey(k), idemKey(k, digest), idemExpiryKey(k)}, id, digest).Err()
	if err != nil {
		return fmt.Errorf("ledger: release idempotency key: %w", err)
	}
	return nil
}

// Create implements withdrawal.Ledger. The response is not kept: it is
// w's view (withdrawal.CreatedBody), which Reserve rebuilds from the record.
func (l *Redis) Create(ctx context.Context, w withdrawal.Withdrawal, key withdrawal.IdemKey, _ []byte) error {
	k, err := l.shardKeys(w.Shard)
	if err != nil {
		return err
	}
	digest := idemDigest(key.UserID, key.Key)
	args := []any{w.ID, w.DueAt.UnixMilli(), digest, base36(w.DueAt),
		fieldUser, w.UserID,
		"status", string(w.Status),
		fieldAmount, w.Amount.String(),
		fieldCurrency, w.Currency,
		fieldDest, w.Destination,
		"due", w.DueAt.UnixMilli(),
	}
	if t, ok := idTime(w.ID); !ok || t.UnixMilli() != w.CreatedAt.UnixMilli() {
		args = append(args, fieldCreated, w.CreatedAt.UnixMilli())
	}
	// A new record's update time is its creation's and it has no attempts
	// yet: left out (a record read without them says so), the record keeps
	// to a smaller allocation.
	if !w.UpdatedAt.Equal(w.CreatedAt) {
		args = append(args, "updated", w.UpdatedAt.UnixMilli())
	}
	if w.Attempts != 0 {
		args = append(args, "attempts", w.Attempts)
	}
	if w.RequestID != "" {
		args = append(args, fieldRequestID, w.RequestID)
	}
	code, err := createScript.Run(ctx, l.rdb, []string{
		recordKey(k, w.ID), userIndexKey(k, w.UserID), k.Due, idemSetKey(k), openKey(k),
		idemKey(k, digest), idemExpiryKey(k),
	}, args...).Int()
	if err != nil {
		return fmt.Errorf("ledger: create %s: %w", w.ID, err)
	}
	switch code {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("ledger: create %s: %w", w.ID, withdrawal.ErrExists)
	default:
		return fmt.Errorf("ledger: create %s: %w", w.ID, withdrawal.ErrReservationLost)
	}
}

// Get implements withdrawal.Ledger.
func (l *Redis) Get(ctx context.Context, userID, id string) (withdrawal.Withdrawal, error) {
	shard := l.q.ShardFor(userID)
	fields, err := l.rdb.HGetAll(ctx, recordKey(l.q.Keys(shard), id)).Result()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: get %s: %w", id, err)
	}
	if len(fields) == 0 || field(fields, fieldUser, "user") != userID {
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	}
	return decodeRecord(shard, id, fields)
}

// List implements withdrawal.Ledger.
func (l *Redis) List(ctx context.Context, userID string, limit int, after string) ([]withdrawal.Withdrawal, error) {
	shard := l.q.ShardFor(userID)
	k := l.q.Keys(shard)
	max := "+"
	if after != "" {
		max = "(" + after
	}
	ids, err := l.rdb.ZRevRangeByLex(ctx, userIndexKey(k, userID), &redis.ZRangeBy{
		Max: max, Min: "-", Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: list withdrawals: %w", err)
	}
	return l.records(ctx, shard, ids)
}

// records reads the records ids of shard n in one pipelined round trip,
// leaving out ids without one.
func (l *Redis) records(ctx context.Context, n int, ids []string) ([]withdrawal.Withdrawal, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	k := l.q.Keys(n)
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, recordKey(k, id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: read withdrawals of %s: %w", k.Tag, err)
	}
	out := make([]withdrawal.Withdrawal, 0, len(ids))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		w, err := decodeRecord(n, ids[i], c.Val())
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// Cancel implements withdrawal.Ledger.
func (l *Redis) Cancel(ctx context.Context, userID, id string, now time.Time) (withdrawal.Withdrawal, error) {
	shard := l.q.ShardFor(userID)
	k := l.q.Keys(shard)
	res, err := cancelScript.Run(ctx, l.rdb, []string{recordKey(k, id), k.Due, k.Inflight, openKey(k)},
		userID, now.UnixMilli(), id).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: cancel %s: %w", id, err)
	}
	code, w, err := decodeReply(shard, id, res)
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: cancel %s: %w", id, err)
	}
	switch code {
	case 0:
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case 3:
		return w, withdrawal.ErrNotCancellable
	default:
		return w, nil
	}
}

// Reschedule implements withdrawal.Ledger: one script on the owner's shard
// moves the record's due time and its job together.
func (l *Redis) Reschedule(ctx context.Context, r withdrawal.Reschedule) (withdrawal.Withdrawal, error) {
	shard := l.q.ShardFor(r.UserID)
	k := l.q.Keys(shard)
	rev := ""
	if r.IfRevision != nil {
		rev = strconv.FormatInt(*r.IfRevision, 10)
	}
	res, err := rescheduleScript.Run(ctx, l.rdb, []string{recordKey(k, r.ID), k.Due, k.Inflight, openKey(k)},
		r.UserID, r.Now.UnixMilli(), r.ID, r.DueAt.UnixMilli(), rev, r.By, r.Reason, newOp()).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: reschedule %s: %w", r.ID, err)
	}
	code, w, err := decodeReply(shard, r.ID, res)
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: reschedule %s: %w", r.ID, err)
	}
	return rescheduled(code, w)
}

// rescheduled maps a reschedule's outcome (the codes of reschedule.lua)
// to the record and its error.
func rescheduled(code int64, w withdrawal.Withdrawal) (withdrawal.Withdrawal, error) {
	switch code {
	case 0:
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case 3:
		return w, fmt.Errorf("ledger: %s is %s: %w", w.ID, w.Shown(), withdrawal.ErrNotReschedulable)
	case 4:
		return w, fmt.Errorf("ledger: %s is at revision %d: %w", w.ID, w.Revision, withdrawal.ErrPreconditionFailed)
	}
	return w, nil
}

// claimedMS is the Begin's claimed due time as the scripts take it: unix
// ms, 0 when unknown.
func claimedMS(b withdrawal.Begin) int64 {
	if b.Claimed.IsZero() {
		return 0
	}
	return b.Claimed.UnixMilli()
}

// Find implements withdrawal.Ledger: the record is on its owner's shard,
// which the id does not tell, so every shard is asked in one round trip.
func (l *Redis) Find(ctx context.Context, id string) (withdrawal.Withdrawal, error) {
	cmds := make([]*redis.MapStringStringCmd, l.q.Shards())
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := range cmds {
			cmds[n] = p.HGetAll(ctx, recordKey(l.q.Keys(n), id))
		}
		return nil
	})
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: find %s: %w", id, err)
	}
	for n, c := range cmds {
		if len(c.Val()) > 0 {
			return decodeRecord(n, id, c.Val())
		}
	}
	return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
}

// Begin implements withdrawal.Ledger.
func (l *Redis) Begin(ctx context.Context, ref withdrawal.Ref, b withdrawal.Begin) (withdrawal.Withdrawal, withdrawal.Start, error) {
	k, err := l.shardKeys(ref.Shard)
	if err != nil {
		return withdrawal.Withdrawal{}, 0, err
	}
	res, err := beginScript.Run(ctx, l.rdb, []string{recordKey(k, ref.ID), k.Due, openKey(k)},
		b.Now.UnixMilli(), b.Until.UnixMilli(), ClockSkew.Milliseconds(), ref.ID, b.Attempt, claimedMS(b)).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: begin payout of %s: %w", ref.ID, err)
	}
	code, w, err := decodeReply(ref.Shard, ref.ID, res)
	if err != nil {
		return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: begin payout of %s: %w", ref.ID, err)
	}
	if code == 0 {
		return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: begin payout of %s: %w", ref.ID, withdrawal.ErrNotFound)
	}
	return w, withdrawal.Start(code), nil
}

// Send implements withdrawal.Ledger.
func (l *Redis) Send(ctx context.Context, ref withdrawal.Ref, attempt string, now time.Time, neverReceived bool) (withdrawal.Withdrawal, error) {
	k, err := l.shardKeys(ref.Shard)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	res, err := sendScript.Run(ctx, l.rdb, []string{recordKey(k, ref.ID)},
		attempt, now.UnixMilli(), flag(neverReceived), newOp()).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: count the call of %s: %w", ref.ID, err)
	}
	return transitioned(ref, res)
}

// Finish implements withdrawal.Ledger.
func (l *Redis) Finish(ctx context.Context, ref withdrawal.Ref, attempt string, r withdrawal.Result) (withdrawal.Withdrawal, error) {
	k, err := l.shardKeys(ref.Shard)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	if r.Status != withdrawal.Paid && r.Status != withdrawal.Failed {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: finish %s as %q: not a final payout status", ref.ID, r.Status)
	}
	res, err := finishScript.Run(ctx, l.rdb, []string{recordKey(k, ref.ID), openKey(k)},
		attempt, string(r.Status), r.At.UnixMilli(), r.PayoutID, r.LastError, ref.ID, newOp()).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: finish %s: %w", ref.ID, err)
	}
	return transitioned(ref, res)
}

// Retry implements withdrawal.Ledger.
func (l *Redis) Retry(ctx context.Context, ref withdrawal.Ref, attempt string, r withdrawal.RetryAt) (withdrawal.Withdrawal, error) {
	k, err := l.shardKeys(ref.Shard)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	res, err := retryScript.Run(ctx, l.rdb, []string{recordKey(k, ref.ID), k.Due, k.Inflight, openKey(k)},
		attempt, r.At.UnixMilli(), r.Now.UnixMilli(), r.LastError, ref.ID, flag(r.MaybePaid), newOp()).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: retry %s: %w", ref.ID, err)
	}
	return transitioned(ref, res)
}

// Resolve implements withdrawal.Ledger.
func (l *Redis) Resolve(ctx context.Context, id string, r withdrawal.Resolution) (withdrawal.Withdrawal, error) {
	if r.Status != withdrawal.Paid && r.Status != withdrawal.Failed {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: resolve %s as %q: not a final payout status", id, r.Status)
	}
	w, err := l.Find(ctx, id)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	k := l.q.Keys(w.Shard)
	res, err := resolveScript.Run(ctx, l.rdb, []string{recordKey(k, id), k.Due, openKey(k)},
		string(r.Status), r.PayoutID, r.Reason, r.By, r.At.UnixMilli(), id, newOp(), max(r.MaxAttempts, 0)).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: resolve %s: %w", id, err)
	}
	code, got, err := decodeReply(w.Shard, id, res)
	switch {
	case err != nil:
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: resolve %s: %w", id, err)
	case code == 0:
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case code != 1:
		return got, notResolvable(got, r)
	}
	return got, nil
}

// notResolvable is the refusal of resolution r of w, as the ledger's
// atomic step found w: ErrNotResolvable with the reason.
func notResolvable(w withdrawal.Withdrawal, r withdrawal.Resolution) error {
	why := withdrawal.Unresolvable(w, r)
	if why == "" {
		why = "it changed meanwhile; look at it again" // the step saw what this read does not
	}
	return fmt.Errorf("ledger: %s is not an operator's to resolve as %s: %s: %w", w.ID, r.Status, why, withdrawal.ErrNotResolvable)
}

// Apply implements withdrawal.Ledger: read, decide the step, then write it
// if the record did not move meanwhile (a compare-and-set on its
// revision); the script refuses a withdrawal never sent as it finds it.
func (l *Redis) Apply(ctx context.Context, id string, c withdrawal.Callback) (withdrawal.Withdrawal, withdrawal.Applied, error) {
	w, err := l.Find(ctx, id)
	if err != nil {
		return withdrawal.Withdrawal{}, 0, err
	}
	k := l.q.Keys(w.Shard)
	op := newOp()
	for range 10 {
		to, applied := withdrawal.Step(w.Status, c.Status)
		move := ""
		if applied == withdrawal.Changed {
			move = string(to)
		}
		res, err := applyScript.Run(ctx, l.rdb, []string{recordKey(k, id), k.Due, openKey(k)},
			strconv.FormatInt(w.Revision, 10), c.EventID, move, c.PayoutID, c.Reason, c.At.UnixMilli(), id, op, keptEvents).Slice()
		if err != nil {
			return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: apply callback %s to %s: %w", c.EventID, id, err)
		}
		code, got, err := decodeReply(w.Shard, id, res)
		switch {
		case err != nil:
			return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: apply callback to %s: %w", id, err)
		case code == 0:
			return withdrawal.Withdrawal{}, 0, withdrawal.ErrNotFound
		case code == 1:
			return got, applied, nil
		case code == 3:
			return got, withdrawal.Duplicate, nil
		case code == 4:
			return got, 0, fmt.Errorf("ledger: callback %s: %s is %s with %d calls: %w", c.EventID, id, got.Status,
				got.Attempts, withdrawal.ErrNotSent)
		}
		w = got // it moved: decide again
	}
	return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: apply callback to %s: the record keeps changing", id)
}

// base36 is t in unix ms, base 36: how the idempotency entries keep times.
func base36(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 36) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func transitioned(ref withdrawal.Ref, res []any) (withdrawal.Withdrawal, error) {
	code, w, err := decodeReply(ref.Shard, ref.ID, res)
	switch {
	case err != nil:
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: %s: %w", ref.ID, err)
	case code == 0:
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrNotFound)
	case code == 2:
		return w, fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrStale)
	}
	return w, nil
}

// MarkNotified implements withdrawal.Ledger.
func (l *Redis) MarkNotified(ctx context.Context, ref withdrawal.Ref, status withdrawal.Status) error {
	k, err := l.shardKeys(ref.Shard)
	if err != nil {
		return err
	}
	if err := notifiedScript.Run(ctx, l.rdb, []string{recordKey(k, ref.ID), openKey(k)}, ref.ID, string(status)).Err(); err != nil {
		return fmt.Errorf("ledger: mark %s notified: %w", ref.ID, err)
	}
	return nil
}

// purgeBatch bounds one purge script of the first layout; purgePage and
// purgePages bound the pages of a shard's idempotency hash that one
// PurgeExpiredKeys looks through. It runs between poller rounds every
// minute, so it stays short (20 scripts of about 500 entries a shard), and
// 10,000 entries a minute is a pass over a day of a million keys a shard in
// under two hours: what expired meanwhile, some 7% more entries, waits.
const (
	purgeBatch = 100
	purgePages = 20
	purgePage  = 500
)

// PurgeExpiredKeys forgets idempotency entries past their retention, in
// bounded batches per shard, and reports how many it removed. It goes on
// through a shard's entries where the last call stopped, so a call that
// stops at its bound leaves entries past their retention for the next one
// (Reserve never answers with those).
func (l *Redis) PurgeExpiredKeys(ctx context.Context, now time.Time) (int, error) {
	total := 0
	nowMS := strconv.FormatInt(now.UnixMilli(), 10)
	for n := range l.q.Shards() {
		k := l.q.Keys(n)
		for range purgePages {
			res, err := purgeIdemScript.Run(ctx, l.rdb, []string{idemSetKey(k), idemPurgeKey(k)}, nowMS, purgePage).Int64Slice()
			if err != nil || len(res) != 2 {
				return total, fmt.Errorf("ledger: purge idempotency keys: %v %w", res, err)
			}
			total += int(res[0])
			if res[1] == 1 {
				break
			}
		}
		removed, err := l.purgeFirstLayout(ctx, k, nowMS)
		total += removed
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// purgeFirstLayout forgets the first layout's idempotency records past
// their retention: the ones written before the upgrade, gone a retention
// after it.
func (l *Redis) purgeFirstLayout(ctx context.Context, k delayq.Keys, nowMS string) (int, error) {
	total := 0
	for {
		names, err := l.rdb.ZRangeByScore(ctx, idemExpiryKey(k), &redis.ZRangeBy{
			Min: "-inf", Max: nowMS, Count: purgeBatch,
		}).Result()
		if err != nil {
			return total, fmt.Errorf("ledger: purge idempotency keys: %w", err)
		}
		if len(names) == 0 {
			return total, nil
		}
		removed, err := purgeKeysScript.Run(ctx, l.rdb, append([]string{idemExpiryKey(k)}, names...), nowMS).Int()
		if err != nil {
			return total, fmt.Errorf("ledger: purge idempotency keys: %w", err)
		}
		total += removed
		if len(names) < purgeBatch {
			return total, nil
		}
	}
}

// decodeReply reads a {code, HGETALL...} script reply about record id.
func decodeReply(shard int, id string, res []any) (int64, withdrawal.Withdrawal, error) {
	if len(res) == 0 {
		return 0, withdrawal.Withdrawal{}, errors.New("empty reply")
	}
	code, _ := res[0].(int64)
	if len(res) < 2 {
		return code, withdrawal.Withdrawal{}, nil
	}
	flat, _ := res[1].([]any)
	fields := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		fields[k] = v
	}
	w, err := decodeRecord(shard, id, fields)
	return code, w, err
}

// Record fields that only Go reads have one-letter names, and the id is the
// key's: a short record stays a small listpack. A record of the first
// layout (written before) has the long names, read as a fallback.
const (
	fieldUser      = "u" // first layout: user (cancel.lua and reschedule.lua read it too)
	fieldAmount    = "a" // first layout: amount
	fieldCurrency  = "c" // currency
	fieldDest      = "d" // dest
	fieldCreated   = "t" // created; left out when the id's ULID tells it
	fieldRequestID = "r" // request_id
)

// idTime is the creation time a withdrawal id tells: its ULID's (ids are
// "wd_" and a ULID of their creation, withdrawal.NewID).
func idTime(id string) (time.Time, bool) {
	i := strings.LastIndexByte(id, '_')
	u, err := ulid.ParseStrict(id[i+1:])
	if err != nil {
		return time.Time{}, false
	}
	return ulid.Time(u.Time()).UTC(), true
}

// field is f's value of name, or of the first layout's name for it.
func field(f map[string]string, name, first string) string {
	if v, ok := f[name]; ok {
		return v
	}
	return f[first]
}

func decodeRecord(shard int, id string, f map[string]string) (withdrawal.Withdrawal, error) {
	w := withdrawal.Withdrawal{
		ID:          id,
		UserID:      field(f, fieldUser, "user"),
		Shard:       shard,
		Status:      withdrawal.Status(f["status"]),
		Currency:    field(f, fieldCurrency, "currency"),
		Destination: field(f, fieldDest, "dest"),
		LastError:   f["last_error"],
		PayoutID:    f["payout_id"],
		Told:        withdrawal.Status(f["told"]),
		MaybePaid:   f["maybe"] == "1",
		Attempt:     f["aid"],
		Op:          f["op"],
		ResolvedBy:  f["resolved_by"],
		RequestID:   field(f, fieldRequestID, "request_id"),

		RescheduledBy:    f["resched_by"],
		RescheduleReason: f["resched_reason"],
	}
	var err error
	amount := field(f, fieldAmount, "amount")
	if w.Amount, err = decimal.NewFromString(amount); err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: record %s: amount %q: %w", w.ID, amount, err)
	}
	for _, t := range []struct {
		field string
		dst   *time.Time
	}{
		{"due", &w.DueAt}, {"created", &w.CreatedAt}, {fieldCreated, &w.CreatedAt}, {"updated", &w.UpdatedAt},
		{"processed", &w.ProcessedAt}, {"until", &w.ProcessingUntil},
		{"first_sent", &w.FirstSentAt}, {"sent_until", &w.SentUntil}, {"resolved_at", &w.ResolvedAt},
		{"resched_at", &w.RescheduledAt}, {"resched_from", &w.RescheduledFrom},
	} {
		v := f[t.field]
		if v == "" {
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return withdrawal.Withdrawal{}, fmt.Errorf("ledger: record %s: %s %q: %w", w.ID, t.field, v, err)
		}
		*t.dst = time.UnixMilli(ms).UTC()
	}
	if _, ok := f[fieldCreated]; !ok && f["created"] == "" {
		w.CreatedAt, _ = idTime(id) // written only when the id does not tell it
	}
	if _, ok := f["updated"]; !ok {
		w.UpdatedAt = w.CreatedAt // not written until the first change
	}
	if v := f["rev"]; v != "" {
		if w.Revision, err = strconv.ParseInt(v, 10, 64); err != nil {
			return withdrawal.Withdrawal{}, fmt.Errorf("ledger: record %s: rev %q: %w", w.ID, v, err)
		}
	}
	if v := f["attempts"]; v != "" {
		if w.Attempts, err = strconv.Atoi(v); err != nil {
			return withdrawal.Withdrawal{}, fmt.Errorf("ledger: record %s: attempts %q: %w", w.ID, v, err)
		}
	}
	return w, nil
}
