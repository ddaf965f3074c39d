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
	//go:embed lua/commit.lua
	commitSrc string
	//go:embed lua/reserve.lua
	reserveSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/create.lua
	createSrc string
	//go:embed lua/purge_keys.lua
	purgeKeysSrc string
	//go:embed lua/purge_idem.lua
	purgeIdemSrc string

	commitScript    = redis.NewScript(commitSrc)
	reserveScript   = redis.NewScript(reserveSrc)
	releaseScript   = redis.NewScript(releaseSrc)
	createScript    = redis.NewScript(createSrc)
	purgeKeysScript = redis.NewScript(purgeKeysSrc)
	purgeIdemScript = redis.NewScript(purgeIdemSrc)
)

// newOp names one ledger write: the write stores it, so that a write whose
// answer was lost and which was sent again (go-redis and the AWS SDK resend
// on a dropped connection) is recognised as our own.
func newOp() string { return ulid.Make().String() }

// ClockSkew is how far a consumer's clock may run behind the poller's that
// claimed a job before the job counts as not due yet.
const ClockSkew = withdrawal.ClockSkew

// Redis is the withdrawal ledger on Redis, beside the withdrawal queue.
type Redis struct {
	// Records runs the transitions over Load and Commit.
	withdrawal.Records
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
	l := &Redis{rdb: rdb, q: q}
	l.Records = withdrawal.Records{Store: l}
	return l
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
	if st.Response, err = withdrawal.EncodeCreated(w.AsCreated(time.UnixMilli(dueMS).UTC())); err != nil {
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
// the created withdrawal (withdrawal.EncodeCreated), which Reserve rebuilds
// from the record.
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

// Load implements withdrawal.Store.
func (l *Redis) Load(ctx context.Context, ref withdrawal.Ref) (withdrawal.Withdrawal, error) {
	k, err := l.shardKeys(ref.Shard)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	fields, err := l.rdb.HGetAll(ctx, recordKey(k, ref.ID)).Result()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: read %s: %w", ref.ID, err)
	}
	if len(fields) == 0 {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrNotFound)
	}
	return decodeRecord(ref.Shard, ref.ID, fields)
}

// Commit implements withdrawal.Store: one script on the shard's slot
// (commit.lua) compares the revision, writes the whole record and applies
// the queue operations, so record and schedule change together or not at
// all. It is the only write of a withdrawal after its create.
func (l *Redis) Commit(ctx context.Context, c withdrawal.Commit) (withdrawal.Withdrawal, error) {
	k, err := l.shardKeys(c.Ref.Shard)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	args := []any{strconv.FormatInt(c.Rev, 10), c.Op, c.Ref.ID, 0}
	if c.Next != nil {
		fields := encodeRecord(*c.Next)
		args[3] = len(fields) / 2
		args = append(args, fields...)
	}
	for _, op := range c.Queue {
		at := ""
		if !op.At.IsZero() {
			at = strconv.FormatInt(op.At.UnixMilli(), 10)
		}
		args = append(args, string(op.Kind), at)
	}
	res, err := commitScript.Run(ctx, l.rdb, []string{recordKey(k, c.Ref.ID), k.Due, k.Inflight, openKey(k)}, args...).Slice()
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: commit %s: %w", c.Ref.ID, err)
	}
	code, w, err := decodeReply(c.Ref.Shard, c.Ref.ID, res)
	switch {
	case err != nil:
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: commit %s: %w", c.Ref.ID, err)
	case code == 0:
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: commit %s: %w", c.Ref.ID, withdrawal.ErrNotFound)
	case code == 2:
		return w, fmt.Errorf("ledger: commit %s at revision %d: %w", c.Ref.ID, c.Rev, withdrawal.ErrConflict)
	case c.Next == nil:
		return withdrawal.Withdrawal{}, nil
	}
	return *c.Next, nil
}

// encodeRecord is w as the field/value pairs of its record hash, in the
// current layout (decodeRecord reads it back): what create.lua writes for a
// new withdrawal, and everything a later change set. Empty fields are left
// out, as are the creation time the id tells and an update time that is
// the creation's.
func encodeRecord(w withdrawal.Withdrawal) []any {
	f := []any{fieldUser, w.UserID, "status", string(w.Status), fieldAmount, w.Amount.String(),
		fieldCurrency, w.Currency, fieldDest, w.Destination, "due", w.DueAt.UnixMilli()}
	if t, ok := idTime(w.ID); !ok || t.UnixMilli() != w.CreatedAt.UnixMilli() {
		f = append(f, fieldCreated, w.CreatedAt.UnixMilli())
	}
	if !w.UpdatedAt.Equal(w.CreatedAt) {
		f = append(f, "updated", w.UpdatedAt.UnixMilli())
	}
	for _, v := range []struct {
		name string
		val  string
	}{
		{fieldRequestID, w.RequestID}, {"last_error", w.LastError}, {"payout_id", w.PayoutID}, {"told", string(w.Told)},
		{"aid", w.Attempt}, {"op", w.Op}, {"resolved_by", w.ResolvedBy}, {"resched_by", w.RescheduledBy},
		{"resched_reason", w.RescheduleReason}, {"ev", strings.Join(w.Events, " ")},
	} {
		if v.val != "" {
			f = append(f, v.name, v.val)
		}
	}
	for _, t := range []struct {
		name string
		at   time.Time
	}{
		{"processed", w.ProcessedAt}, {"until", w.ProcessingUntil}, {"first_sent", w.FirstSentAt},
		{"sent_until", w.SentUntil}, {"resolved_at", w.ResolvedAt}, {"resched_at", w.RescheduledAt},
		{"resched_from", w.RescheduledFrom},
	} {
		if !t.at.IsZero() {
			f = append(f, t.name, t.at.UnixMilli())
		}
	}
	if w.MaybePaid {
		f = append(f, "maybe", "1")
	}
	if w.Attempts != 0 {
		f = append(f, "attempts", w.Attempts)
	}
	if w.Revision != 0 {
		f = append(f, "rev", w.Revision)
	}
	return f
}

// base36 is t in unix ms, base 36: how the idempotency entries keep times.
func base36(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 36) }

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
	fieldUser      = "u" // first layout: user
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
	if v := f["ev"]; v != "" {
		w.Events = strings.Fields(v)
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
