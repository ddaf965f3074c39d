package ledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// DynamoAPI is the part of the DynamoDB client the ledger uses.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Tables names the DynamoDB tables of the ledger.
//
//	withdrawals  pk "id"; GSI "by_user" (user_id, id) for listing newest
//	             first; GSI "by_state" (state_key, due_at) for the reconciler:
//	             state_key is the status while a withdrawal is on its way
//	             (scheduled, retrying, processing) and "unnotified" while finance
//	             has not heard of its outcome, absent otherwise (a sparse index),
//	             followed by "#" and the withdrawal's state shard (StateShards)
//	orders       pk "id"
//	idempotency  pk "pk" (a digest of user and key); TTL attribute "expires_at"
type Tables struct {
	Withdrawals, Orders, Idempotency string
}

// Index names of the withdrawals table.
const (
	IndexByUser  = "by_user"
	IndexByState = "by_state"
	unnotified   = "unnotified"
)

// DefaultHorizon is how far ahead the Redis queue holds withdrawals when the
// ledger is DynamoDB; later ones wait in the ledger until the reconciler
// promotes them.
const DefaultHorizon = time.Hour

// Dynamo is the ledger on DynamoDB, the system of record in AWS: every state
// change is a conditional write, and Redis holds only the schedule, which the
// reconciler rebuilds from here if Redis loses it.
type Dynamo struct {
	// Records runs the transitions over Load and Commit.
	withdrawal.Records
	db     DynamoAPI
	tables Tables
	q      *delayq.Queue
	opts   DynamoOptions
	log    *slog.Logger
}

// DynamoOptions tunes the DynamoDB ledger.
type DynamoOptions struct {
	// Horizon: withdrawals due further ahead stay out of Redis until the
	// reconciler promotes them (default DefaultHorizon). At least two
	// reconcile intervals, so that a promotion comes one interval ahead
	// (config.MinHorizonIntervals checks it).
	Horizon time.Duration
	// Grace is how long the pipeline has to move a withdrawal on before the
	// reconciler steps in: a job due a moment ago (or an attempt's watch,
	// due at its deadline) may sit in the work queue, waiting or redelivered
	// (SQS holds it, not Redis), and a paid one's consumer may still be
	// telling finance. In AWS: the work queue's visibility timeout x its
	// maxReceiveCount + the consumer's batch window (default 1m).
	Grace  time.Duration
	Logger *slog.Logger
}

var (
	_ withdrawal.Ledger   = (*Dynamo)(nil)
	_ seckill.OrderLedger = (*Dynamo)(nil)
)

// NewDynamo returns the DynamoDB ledger scheduling on the withdrawal queue q.
func NewDynamo(db DynamoAPI, tables Tables, q *delayq.Queue, opts DynamoOptions) *Dynamo {
	if opts.Horizon <= 0 {
		opts.Horizon = DefaultHorizon
	}
	if opts.Grace <= 0 {
		opts.Grace = time.Minute
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	d := &Dynamo{db: db, tables: tables, q: q, opts: opts, log: opts.Logger}
	d.Records = withdrawal.Records{Store: d}
	return d
}

func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func ms(t time.Time) types.AttributeValue {
	return n(t.UnixMilli())
}

type item map[string]types.AttributeValue

func (it item) str(k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func (it item) num(k string) int64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		i, _ := strconv.ParseInt(v.Value, 10, 64)
		return i
	}
	return 0
}

func (it item) time(k string) time.Time {
	if _, ok := it[k]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(it.num(k)).UTC()
}

func (it item) boolean(k string) bool {
	v, ok := it[k].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

func (it item) strings(k string) []string {
	if v, ok := it[k].(*types.AttributeValueMemberSS); ok {
		return v.Value
	}
	return nil
}

// StateShards is how many by_state partition keys each state is spread
// over: "scheduled#0" .. "scheduled#15". DynamoDB serves about 1,000 writes
// a second per partition key value (and splits a hot one only after the
// heat shows, while a throttled index holds back writes to the table);
// every state change of a withdrawal writes the index under its old and
// its new key, so one key per state capped the pipeline near 1,000
// withdrawals a second. Spread, a state takes about 16,000 writes a
// second. A withdrawal's shard is a hash of its id, the same through all
// its states. Readers query every shard (stateKeys); the count may be
// raised (readers then cover the old shards too), never lowered.
const StateShards = 16

// stateShard is the by_state shard of the withdrawal with id: FNV-1a of
// the id, stable across processes and releases.
func stateShard(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % StateShards)
}

// stateKey is the by_state index key of a withdrawal, "" for none.
func stateKey(w withdrawal.Withdrawal) string {
	var state string
	switch {
	case !w.Status.Final():
		state = string(w.Status)
	case w.Untold():
		state = unnotified
	default:
		return ""
	}
	return state + "#" + strconv.Itoa(stateShard(w.ID))
}

// stateKeys are the by_state keys a reader queries for state: each shard,
// and the state alone, the key of records written before the index was
// sharded (a record moves to its shard at its next write; until then, a
// withdrawal due in a month or an outcome finance has not heard of is
// found there).
func stateKeys(state string) []string {
	keys := make([]string, 0, StateShards+1)
	for n := range StateShards {
		keys = append(keys, state+"#"+strconv.Itoa(n))
	}
	return append(keys, state)
}

func encodeWithdrawal(w withdrawal.Withdrawal) item {
	it := item{
		"id": s(w.ID), "user_id": s(w.UserID), "shard": n(int64(w.Shard)), "status": s(string(w.Status)),
		"amount": s(w.Amount.String()), "currency": s(w.Currency), "dest": s(w.Destination),
		"due_at": ms(w.DueAt), "created_at": ms(w.CreatedAt), "updated_at": ms(w.UpdatedAt),
		"attempts": n(int64(w.Attempts)), "op": s(cmp.Or(w.Op, newOp())),
	}
	if k := stateKey(w); k != "" {
		it["state_key"] = s(k)
	}
	if w.RequestID != "" {
		it["request_id"] = s(w.RequestID)
	}
	return it
}

// recordAttrs are the attributes of a withdrawal that a record may lack:
// a commit removes the ones its record has not (encodeFull leaves empty
// ones out).
var recordAttrs = []string{"state_key", "request_id", "last_error", "payout_id", "processed_at", "until", "told",
	"maybe_paid", "first_sent", "sent_until", "aid", "resolved_by", "resolved_at", "rev", "resched_by", "resched_reason",
	"resched_at", "resched_from", "events"}

// encodeFull is the whole of w as its item: what a commit writes.
func encodeFull(w withdrawal.Withdrawal) item {
	it := encodeWithdrawal(w)
	for name, v := range map[string]string{"last_error": w.LastError, "payout_id": w.PayoutID, "told": string(w.Told),
		"aid": w.Attempt, "resolved_by": w.ResolvedBy, "resched_by": w.RescheduledBy, "resched_reason": w.RescheduleReason} {
		if v != "" {
			it[name] = s(v)
		}
	}
	for name, t := range map[string]time.Time{"processed_at": w.ProcessedAt, "until": w.ProcessingUntil,
		"first_sent": w.FirstSentAt, "sent_until": w.SentUntil, "resolved_at": w.ResolvedAt, "resched_at": w.RescheduledAt,
		"resched_from": w.RescheduledFrom} {
		if !t.IsZero() {
			it[name] = ms(t)
		}
	}
	if w.MaybePaid {
		it["maybe_paid"] = boolean(true)
	}
	if w.Revision != 0 {
		it["rev"] = n(w.Revision)
	}
	if len(w.Events) > 0 {
		it["events"] = &types.AttributeValueMemberSS{Value: slices.Clone(w.Events)}
	}
	return it
}

func decodeWithdrawal(it item) (withdrawal.Withdrawal, error) {
	amount, err := decimal.NewFromString(it.str("amount"))
	if err != nil {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: withdrawal %s: amount %q", it.str("id"), it.str("amount"))
	}
	return withdrawal.Withdrawal{
		ID: it.str("id"), UserID: it.str("user_id"), Shard: int(it.num("shard")), Status: withdrawal.Status(it.str("status")),
		Amount: amount, Currency: it.str("currency"), Destination: it.str("dest"),
		DueAt: it.time("due_at"), CreatedAt: it.time("created_at"), UpdatedAt: it.time("updated_at"),
		Attempts: int(it.num("attempts")), LastError: it.str("last_error"), PayoutID: it.str("payout_id"),
		ProcessedAt: it.time("processed_at"), ProcessingUntil: it.time("until"), Told: withdrawal.Status(it.str("told")),
		MaybePaid: it.boolean("maybe_paid"), FirstSentAt: it.time("first_sent"), SentUntil: it.time("sent_until"), Attempt: it.str("aid"), Op: it.str("op"),
		ResolvedBy: it.str("resolved_by"), ResolvedAt: it.time("resolved_at"), RequestID: it.str("request_id"),
		Revision: it.num("rev"), RescheduledBy: it.str("resched_by"), RescheduleReason: it.str("resched_reason"),
		RescheduledAt: it.time("resched_at"), RescheduledFrom: it.time("resched_from"),
		Events: it.strings("events"),
	}, nil
}

func (d *Dynamo) load(ctx context.Context, id string) (withdrawal.Withdrawal, bool, error) {
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &d.tables.Withdrawals, Key: item{"id": s(id)}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return withdrawal.Withdrawal{}, false, fmt.Errorf("ledger: read %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return withdrawal.Withdrawal{}, false, nil
	}
	w, err := decodeWithdrawal(out.Item)
	return w, err == nil, err
}

func idemPK(userID, key string) string {
	h := sha256.New()
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(len(userID)))
	h.Write(l[:])
	h.Write([]byte(userID))
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Reserve implements withdrawal.Ledger with a conditional put; a key past its
// expiry (DynamoDB's TTL deletes lazily) counts as free.
func (d *Dynamo) Reserve(ctx context.Context, r withdrawal.Reservation) (withdrawal.KeyState, error) {
	pk := idemPK(r.Key.UserID, r.Key.Key)
	_, err := d.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &d.tables.Idempotency,
		Item: item{
			"pk": s(pk), "state": s("pending"), "fp": s(r.Fingerprint), "wid": s(r.ID),
			"lock_until": ms(r.LockUntil), TTLAttribute: n(r.ExpiresAt.Unix()), "user": s(r.Key.UserID), "key": s(r.Key.Key),
		},
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR expires_at <= :now"),
		ExpressionAttributeValues: item{":now": n(r.Now.Unix())},
	})
	if err == nil {
		return withdrawal.KeyState{Phase: withdrawal.KeyAcquired, Fingerprint: r.Fingerprint, ID: r.ID}, nil
	}
	if !conditionFailed(err) {
		return withdrawal.KeyState{}, fmt.Errorf("ledger: reserve idempotency key: %w", err)
	}
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &d.tables.Idempotency, Key: item{"pk": s(pk)}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return withdrawal.KeyState{}, fmt.Errorf("ledger: read idempotency key: %w", err)
	}
	cur := item(out.Item)
	st := withdrawal.KeyState{Fingerprint: cur.str("fp"), ID: cur.str("wid")}
	switch {
	case len(cur) == 0: // deleted meanwhile (released): the caller retries
		return withdrawal.KeyState{}, errors.New("ledger: idempotency key changed while reserving; retry")
	case cur.str("state") == "done":
		st.Phase, st.Response = withdrawal.KeyCompleted, []byte(cur.str("resp"))
		return st, nil
	case st.ID == r.ID && st.Fingerprint == r.Fingerprint:
		// Held for this request's own candidate id: our put landed and its
		// answer was lost, and the SDK's resend found it.
		st.Phase = withdrawal.KeyAcquired
		return st, nil
	case cur.num("lock_until") > r.Now.UnixMilli() || st.Fingerprint != r.Fingerprint:
		st.Phase = withdrawal.KeyInFlight
		return st, nil
	}
	// Take over a reservation whose request died, keeping its withdrawal id.
	_, err = d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.tables.Idempotency, Key: item{"pk": s(pk)},
		UpdateExpression:          aws.String("SET lock_until = :new"),
		ConditionExpression:       aws.String("#state = :pending AND lock_until = :old"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: item{":new": ms(r.LockUntil), ":pending": s("pending"), ":old": cur["lock_until"]},
	})
	switch {
	case conditionFailed(err):
		st.Phase = withdrawal.KeyInFlight
	case err != nil:
		return withdrawal.KeyState{}, fmt.Errorf("ledger: take over idempotency key: %w", err)
	default:
		st.Phase = withdrawal.KeyAcquired
	}
	return st, nil
}

// Release implements withdrawal.Ledger. After a Create was sent (sent),
// the reservation is not deleted but unlocked, keeping its withdrawal id:
// the retry takes it over at once and creates that same withdrawal. A
// create's record write can land after its caller gave up on it (a request
// that timed out, applied late), and after this release: with the key
// deleted, the retry would reserve it for a new id and the late write would
// make a second withdrawal, scheduled by the reconciler and paid twice.
// With the id kept, both writes are of one record (the second finds it,
// conditionally); another body under the key is refused as a conflict.
// Issue 21 (c03). A reservation no Create was sent for is deleted.
func (d *Dynamo) Release(ctx context.Context, key withdrawal.IdemKey, id string, sent bool) error {
	if !sent {
		_, err := d.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &d.tables.Idempotency, Key: item{"pk": s(idemPK(key.UserID, key.Key))},
			ConditionExpression:       aws.String("#state = :pending AND wid = :id"),
			ExpressionAttributeNames:  map[string]string{"#state": "state"},
			ExpressionAttributeValues: item{":pending": s("pending"), ":id": s(id)},
		})
		if err != nil && !conditionFailed(err) {
			return fmt.Errorf("ledger: release idempotency key: %w", err)
		}
		return nil
	}
	_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.tables.Idempotency, Key: item{"pk": s(idemPK(key.UserID, key.Key))},
		UpdateExpression:          aws.String("SET lock_until = :open"),
		ConditionExpression:       aws.String("#state = :pending AND wid = :id"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: item{":pending": s("pending"), ":id": s(id), ":open": n(0)},
	})
	if err != nil && !conditionFailed(err) {
		return fmt.Errorf("ledger: release idempotency key: %w", err)
	}
	return nil
}

// Create implements withdrawal.Ledger: the record first (conditional), then
// the key's completion, then the schedule in Redis if the withdrawal is due
// within the horizon. A record found from an earlier attempt under the same
// key (its request died after the write) is that attempt's own and is kept. A failed schedule is
// not an error: the reconciler schedules what the ledger says is due.
func (d *Dynamo) Create(ctx context.Context, w withdrawal.Withdrawal, key withdrawal.IdemKey, response []byte) error {
	// Without transactions, check the reservation first, so a create that
	// cannot complete its key writes nothing. (A takeover of the reservation
	// keeps its withdrawal id, so it cannot make this record wrong.)
	pk := idemPK(key.UserID, key.Key)
	held, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &d.tables.Idempotency, Key: item{"pk": s(pk)}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("ledger: read idempotency key of %s: %w", w.ID, err)
	}
	if cur := item(held.Item); cur.str("wid") != w.ID || cur.str("state") == "" {
		return fmt.Errorf("ledger: create %s: %w", w.ID, withdrawal.ErrReservationLost)
	}
	rec := encodeWithdrawal(w)
	rec["idem_pk"] = s(pk) // which reservation wrote it, to tell a retry from a clash
	// Beyond the horizon it waits here alone, which the reconciler must
	// know: such a record cannot be in the work queue (see deferredAttr).
	rec[deferredAttr] = boolean(d.beyond(w.DueAt, w.CreatedAt))
	_, err = d.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &d.tables.Withdrawals, Item: rec,
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	if conditionFailed(err) {
		out, gerr := d.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &d.tables.Withdrawals, Key: item{"id": s(w.ID)}, ConsistentRead: aws.Bool(true),
		})
		if gerr != nil {
			return fmt.Errorf("ledger: read %s: %w", w.ID, gerr)
		}
		if item(out.Item).str("idem_pk") != pk {
			return fmt.Errorf("ledger: create %s: %w", w.ID, withdrawal.ErrExists)
		}
	} else if err != nil {
		return fmt.Errorf("ledger: create %s: %w", w.ID, err)
	}
	_, err = d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.tables.Idempotency, Key: item{"pk": s(pk)},
		UpdateExpression:          aws.String("SET #state = :done, resp = :resp REMOVE lock_until"),
		ConditionExpression:       aws.String("wid = :id AND (#state = :pending OR #state = :done)"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: item{":done": s("done"), ":resp": s(string(response)), ":id": s(w.ID), ":pending": s("pending")},
	})
	if conditionFailed(err) {
		return fmt.Errorf("ledger: create %s: %w", w.ID, withdrawal.ErrReservationLost)
	}
	if err != nil {
		return fmt.Errorf("ledger: complete idempotency key of %s: %w", w.ID, err)
	}
	d.schedule(ctx, w, w.CreatedAt)
	return nil
}

// schedule puts w in the Redis queue if it falls due within the horizon,
// keeping an earlier schedule the queue holds: the record and the queue are
// written apart, so a write of an older due time may come after a newer
// one; an early job is put back by Begin, a late one would pay late.
func (d *Dynamo) schedule(ctx context.Context, w withdrawal.Withdrawal, now time.Time) {
	if d.beyond(w.DueAt, now) {
		return // the reconciler promotes it nearer the time
	}
	if err := d.q.AddNoLater(ctx, w.Shard, w.ID, w.DueAt); err != nil {
		d.log.Warn("withdrawal recorded but not scheduled; the reconciler will", "withdrawal_id", w.ID, "error", err.Error())
	}
}

// Get implements withdrawal.Ledger.
func (d *Dynamo) Get(ctx context.Context, userID, id string) (withdrawal.Withdrawal, error) {
	w, ok, err := d.load(ctx, id)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	if !ok || w.UserID != userID {
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	}
	return w, nil
}

// List implements withdrawal.Ledger from the by_user index (eventually
// consistent: a withdrawal made a moment ago may not be listed yet).
func (d *Dynamo) List(ctx context.Context, userID string, limit int, after string) ([]withdrawal.Withdrawal, error) {
	cond := "user_id = :u"
	vals := item{":u": s(userID)}
	if after != "" {
		cond += " AND id < :after"
		vals[":after"] = s(after)
	}
	out, err := d.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &d.tables.Withdrawals, IndexName: aws.String(IndexByUser),
		KeyConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list withdrawals: %w", err)
	}
	ws := make([]withdrawal.Withdrawal, 0, len(out.Items))
	for _, it := range out.Items {
		w, err := decodeWithdrawal(it)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// unchanged is the condition that the record's last write is still w's: a
// compare-and-set on what the caller read.
func unchanged(w withdrawal.Withdrawal, vals item) string {
	if w.Op == "" {
		return "attribute_not_exists(op)"
	}
	vals[":seen"] = s(w.Op)
	return "op = :seen"
}

// Find implements withdrawal.Store.
func (d *Dynamo) Find(ctx context.Context, id string) (withdrawal.Withdrawal, error) {
	w, ok, err := d.load(ctx, id)
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	if !ok {
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	}
	return w, nil
}

// Load implements withdrawal.Store.
func (d *Dynamo) Load(ctx context.Context, ref withdrawal.Ref) (withdrawal.Withdrawal, error) {
	return d.Find(ctx, ref.ID)
}

// revisionIs is the condition that the record is at revision rev (one
// written before revisions were kept is at 0).
func revisionIs(rev int64, vals item) string {
	vals[":rev"] = n(rev)
	if rev == 0 {
		return "(attribute_not_exists(rev) OR rev = :rev)"
	}
	return "rev = :rev"
}

// Commit implements withdrawal.Store: one conditional write of the whole
// record on the revision read (attributes it does not model, the
// reservation that wrote it and the promotion flag, are kept), then the
// queue operations in Redis. A process that dies between the two leaves
// the schedule behind the record, which the reconciler repairs (it holds
// every record on its way to a job due by its time); a failed queue
// operation after a write is logged and left to it too. Queue operations
// alone (Begin's follow-ups) are checked against the revision by a
// consistent read, and their failure is the caller's error: nothing was
// written, so the delivery is tried again.
func (d *Dynamo) Commit(ctx context.Context, c withdrawal.Commit) (withdrawal.Withdrawal, error) {
	conflict := func(cur withdrawal.Withdrawal) (withdrawal.Withdrawal, error) {
		return cur, fmt.Errorf("ledger: commit %s at revision %d: %w", c.Ref.ID, c.Rev, withdrawal.ErrConflict)
	}
	if c.Next == nil {
		cur, err := d.Find(ctx, c.Ref.ID)
		switch {
		case err != nil:
			return withdrawal.Withdrawal{}, err
		case cur.Revision != c.Rev:
			return conflict(cur)
		}
		return withdrawal.Withdrawal{}, d.queue(ctx, cur, c)
	}
	next := *c.Next
	vals := item{":op": s(c.Op)}
	cond := "attribute_exists(id) AND " + revisionIs(c.Rev, vals) + " AND (attribute_not_exists(op) OR op <> :op)"
	names := map[string]string{}
	var set, remove []string
	full := encodeFull(next)
	delete(full, "id") // the key
	if slices.ContainsFunc(c.Queue, func(o withdrawal.QueueOp) bool { return o.Kind == withdrawal.DropLease }) &&
		!next.Status.Final() {
		// A new due time: Redis holds it unless it lies beyond the horizon.
		full[deferredAttr] = boolean(d.beyond(next.DueAt, c.At))
	}
	for _, name := range slices.Sorted(maps.Keys(full)) {
		i := strconv.Itoa(len(names))
		names["#a"+i] = name
		if name == "op" {
			set = append(set, "#a"+i+" = :op")
			continue
		}
		vals[":v"+i] = full[name]
		set = append(set, "#a"+i+" = :v"+i)
	}
	for _, name := range recordAttrs {
		if _, ok := full[name]; !ok {
			i := strconv.Itoa(len(names))
			names["#a"+i] = name
			remove = append(remove, "#a"+i)
		}
	}
	expr := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.tables.Withdrawals, Key: item{"id": s(c.Ref.ID)},
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
	})
	if err != nil && !conditionFailed(err) {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: commit %s: %w", c.Ref.ID, err)
	}
	if err != nil {
		cur, ferr := d.Find(ctx, c.Ref.ID)
		switch {
		case ferr != nil:
			return withdrawal.Withdrawal{}, ferr
		case cur.Op != c.Op:
			return conflict(cur)
		}
		// This very write landed and its answer was lost (the SDK resent
		// it): its queue operations may not have run.
	}
	if err := d.queue(ctx, next, c); err != nil {
		d.log.Warn("withdrawal written in the ledger, its schedule not in Redis; the reconciler will", "withdrawal_id", next.ID,
			"error", err.Error())
	}
	return next, nil
}

// queue applies c's queue operations in Redis for the record w. The open
// set is Redis's own: here the by_state index, kept with the record,
// does its work.
func (d *Dynamo) queue(ctx context.Context, w withdrawal.Withdrawal, c withdrawal.Commit) error {
	drop := slices.ContainsFunc(c.Queue, func(o withdrawal.QueueOp) bool { return o.Kind == withdrawal.DropLease })
	for _, op := range c.Queue {
		var err error
		switch op.Kind {
		case withdrawal.Schedule:
			switch {
			case drop && d.beyond(op.At, w.UpdatedAt):
				_, err = d.q.Cancel(ctx, w.Shard, w.ID) // the reconciler promotes it nearer the time
			case drop:
				// A new due time (a retry, a reschedule), which may be later
				// than the job's; then the record is read again, as a write
				// of another due time may have reached Redis first.
				d.reschedule(ctx, w, c.At, func() error { return d.q.RetryAt(ctx, w.Shard, w.ID, 0, op.At) })
			case !d.beyond(op.At, c.At):
				err = d.q.AddNoLater(ctx, w.Shard, w.ID, op.At)
			}
		case withdrawal.ScheduleNoEarlier:
			err = d.q.AddNoEarlier(ctx, w.Shard, w.ID, op.At)
		case withdrawal.Unschedule:
			_, err = d.q.Cancel(ctx, w.Shard, w.ID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reschedule moves w's job with move (to w's new time, which may be later
// than the job's), then reads the record again: a write of another due time
// that landed in the ledger meanwhile (a reschedule, a retry) may have
// reached Redis before move, and must not be left standing later than the
// record. Every writer of a due time does the same, so the last to read
// leaves a job due by the record's time (or earlier: Begin puts that back).
func (d *Dynamo) reschedule(ctx context.Context, w withdrawal.Withdrawal, now time.Time, move func() error) {
	if err := move(); err != nil {
		d.log.Warn("withdrawal rescheduled in the ledger, not in Redis; the reconciler will", "withdrawal_id", w.ID,
			"error", err.Error())
		return
	}
	cur, found, err := d.load(ctx, w.ID)
	if err == nil && found && (cur.Status == withdrawal.Scheduled || cur.Status == withdrawal.Retrying) && !cur.DueAt.Equal(w.DueAt) {
		d.schedule(ctx, cur, now)
	}
}
