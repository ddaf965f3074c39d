package ledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
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
//	             has not heard of its outcome, absent otherwise (a sparse index)
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
	// reconciler steps in: a job due a moment ago may sit in the work queue
	// (SQS holds it, not Redis), and a paid one's consumer may still be telling
	// finance (default 1m).
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
	return &Dynamo{db: db, tables: tables, q: q, opts: opts, log: opts.Logger}
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

// stateKey is the by_state index key of a withdrawal, "" for none.
func stateKey(w withdrawal.Withdrawal) string {
	switch {
	case !w.Status.Final():
		return string(w.Status)
	case w.Untold():
		return unnotified
	}
	return ""
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

// change is one conditional update of a withdrawal.
type change struct {
	set, remove, add string // the clauses, without their keywords
	cond             string
	names            map[string]string
	vals             item
}

// update applies c, stamping the record with a new op (the id of this
// write), and returns the record after it (ok), or as it stands when the
// condition failed (not ok). The condition also requires that the record
// does not carry our op yet, so a resent write never applies twice (its
// update may not be idempotent: attempts + 1); a record that carries our op
// after a failed condition was changed by this very write: it landed, its
// answer was lost, and the SDK sent it again.
func (d *Dynamo) update(ctx context.Context, id string, c change) (withdrawal.Withdrawal, bool, error) {
	op := newOp()
	vals := item{":op": s(op), ":rev0": n(0), ":rev1": n(1)}
	for k, v := range c.vals {
		vals[k] = v
	}
	// Every write counts a revision (the ETag); a record written before
	// revisions were kept is at 0.
	expr := "SET op = :op, rev = if_not_exists(rev, :rev0) + :rev1"
	if c.set != "" {
		expr += ", " + c.set
	}
	if c.remove != "" {
		expr += " REMOVE " + c.remove
	}
	if c.add != "" {
		expr += " ADD " + c.add
	}
	in := &dynamodb.UpdateItemInput{
		TableName: &d.tables.Withdrawals, Key: item{"id": s(id)},
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("(" + c.cond + ") AND (attribute_not_exists(op) OR op <> :op)"),
		ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueAllNew,
	}
	if len(c.names) > 0 {
		in.ExpressionAttributeNames = c.names
	}
	out, err := d.db.UpdateItem(ctx, in)
	if err == nil {
		w, err := decodeWithdrawal(out.Attributes)
		return w, true, err
	}
	if !conditionFailed(err) {
		return withdrawal.Withdrawal{}, false, fmt.Errorf("ledger: update %s: %w", id, err)
	}
	cur, found, err := d.load(ctx, id)
	if err != nil {
		return withdrawal.Withdrawal{}, false, err
	}
	if !found {
		return withdrawal.Withdrawal{}, false, fmt.Errorf("ledger: %s: %w", id, withdrawal.ErrNotFound)
	}
	return cur, cur.Op == op, nil
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

var statusName = map[string]string{"#status": "status"}

var statusUntil = map[string]string{"#status": "status", "#until": "until"}

// Cancel implements withdrawal.Ledger.
func (d *Dynamo) Cancel(ctx context.Context, userID, id string, now time.Time) (withdrawal.Withdrawal, error) {
	w, ok, err := d.update(ctx, id, change{
		set:    "#status = :cancelled, updated_at = :now",
		remove: "state_key",
		cond:   "user_id = :u AND (#status = :scheduled OR #status = :retrying) AND attribute_not_exists(maybe_paid)",
		names:  statusName,
		vals: item{":cancelled": s(string(withdrawal.Cancelled)), ":now": ms(now), ":u": s(userID),
			":scheduled": s(string(withdrawal.Scheduled)), ":retrying": s(string(withdrawal.Retrying))},
	})
	switch {
	case errors.Is(err, withdrawal.ErrNotFound):
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case err != nil:
		return withdrawal.Withdrawal{}, err
	case w.UserID != userID:
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case ok:
		if _, err := d.q.Cancel(ctx, w.Shard, w.ID); err != nil {
			// The consumer finds it cancelled and drops the job.
			d.log.Warn("cancelled withdrawal left scheduled in Redis", "withdrawal_id", id, "error", err.Error())
		}
		return w, nil
	case w.Status == withdrawal.Cancelled:
		return w, nil
	}
	return w, withdrawal.ErrNotCancellable
}

// Reschedule implements withdrawal.Ledger: a conditional write of the
// record (owner, state, no call that may have paid, the revision asked),
// then the schedule in Redis, no later than one it holds. A process that
// dies between the two leaves the old job: one due earlier than the new
// time fires and Begin puts it back at the record's time (it starts a record
// only at its own due time); one due later is brought forward by the
// reconciler, which holds every scheduled record to a job due by its time.
func (d *Dynamo) Reschedule(ctx context.Context, r withdrawal.Reschedule) (withdrawal.Withdrawal, error) {
	beyond := d.beyond(r.DueAt, r.Now)
	vals := item{":due": ms(r.DueAt), ":now": ms(r.Now), ":u": s(r.UserID), ":by": s(r.By), ":why": s(r.Reason),
		":scheduled": s(string(withdrawal.Scheduled)), ":retrying": s(string(withdrawal.Retrying)), ":deferred": boolean(beyond)}
	cond := "user_id = :u AND (#status = :scheduled OR #status = :retrying) AND attribute_not_exists(maybe_paid)"
	if r.IfRevision != nil {
		cond += " AND " + revisionIs(*r.IfRevision, vals)
	}
	w, ok, err := d.update(ctx, r.ID, change{
		set: "resched_from = due_at, due_at = :due, updated_at = :now, resched_by = :by, resched_reason = :why, " +
			"resched_at = :now, " + deferredAttr + " = :deferred",
		cond: cond, names: statusName, vals: vals,
	})
	switch {
	case errors.Is(err, withdrawal.ErrNotFound):
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case err != nil:
		return withdrawal.Withdrawal{}, err
	case w.UserID != r.UserID:
		return withdrawal.Withdrawal{}, withdrawal.ErrNotFound
	case ok:
		d.reschedule(ctx, w, r.Now, func() error {
			if beyond {
				_, err := d.q.Cancel(ctx, w.Shard, w.ID) // the reconciler promotes it nearer the time
				return err
			}
			return d.q.Add(ctx, w.Shard, w.ID, w.DueAt)
		})
		return w, nil
	case r.IfRevision != nil && w.Revision != *r.IfRevision:
		return rescheduled(4, w)
	}
	return rescheduled(3, w)
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

// revisionIs is the condition that the record is at revision rev (one
// written before revisions were kept is at 0).
func revisionIs(rev int64, vals item) string {
	vals[":rev"] = n(rev)
	if rev == 0 {
		return "(attribute_not_exists(rev) OR rev = :rev)"
	}
	return "rev = :rev"
}

// dueFor reports whether a record due at due may start under b (see
// withdrawal.Begin.Claimed); begin.lua decides the same.
func dueFor(b withdrawal.Begin, due time.Time) bool {
	if !b.Claimed.IsZero() && !b.Claimed.Equal(due) {
		return !due.After(b.Now)
	}
	return !due.After(b.Now.Add(ClockSkew))
}

// Find implements withdrawal.Ledger.
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

// Begin implements withdrawal.Ledger. The common case, a due record no
// call may have paid, is one conditional write; the others (the record may
// have been paid, a dead attempt to take over, our own write answered late)
// are told apart from the record the failed condition returns, and written
// as a compare-and-set on it.
func (d *Dynamo) Begin(ctx context.Context, ref withdrawal.Ref, b withdrawal.Begin) (withdrawal.Withdrawal, withdrawal.Start, error) {
	begun := func() item {
		return item{":processing": s(string(withdrawal.Processing)), ":until": ms(b.Until), ":now": ms(b.Now),
			":aid": s(b.Attempt)}
	}
	const start = "#status = :processing, #until = :until, updated_at = :now, state_key = :processing, aid = :aid"
	vals := begun()
	vals[":one"], vals[":scheduled"], vals[":retrying"] = n(1), s(string(withdrawal.Scheduled)), s(string(withdrawal.Retrying))
	vals[":latest"] = ms(b.Now.Add(ClockSkew))
	isDue := "due_at <= :latest"
	if !b.Claimed.IsZero() {
		// The job's own time within the skew, any other once it passed.
		isDue = "(due_at <= :now OR (due_at = :claimed AND due_at <= :latest))"
		vals[":claimed"] = ms(b.Claimed)
	}
	w, ok, err := d.update(ctx, ref.ID, change{
		set:   start + ", attempts = attempts + :one, first_sent = if_not_exists(first_sent, :now), sent_until = :until",
		cond:  "(#status = :scheduled OR #status = :retrying) AND " + isDue + " AND attribute_not_exists(maybe_paid)",
		names: statusUntil, vals: vals,
	})
	for range 4 {
		switch {
		case err != nil:
			return withdrawal.Withdrawal{}, 0, err
		case ok || (w.Status == withdrawal.Processing && w.Attempt == b.Attempt):
			return w, withdrawal.StartAttempt, nil
		case w.Status.Final():
			return w, withdrawal.StartFinal, nil
		case w.Status != withdrawal.Processing && !dueFor(b, w.DueAt):
			// A job that came early: put it back at the record's time.
			d.schedule(ctx, w, b.Now)
			return w, withdrawal.StartNotDue, nil
		case w.Status != withdrawal.Processing:
			// Due, but a call may have paid it: the attempt settles first
			// and counts a call only when it sends one.
			vals := begun()
			w, ok, err = d.update(ctx, ref.ID, change{set: start, cond: unchanged(w, vals), names: statusUntil, vals: vals})
		case w.ProcessingUntil.After(b.Now):
			// Follow the running attempt up at its deadline, so a consumer
			// that died mid-attempt is taken over; never earlier than the
			// job's schedule (a retry the attempt recorded meanwhile).
			if err := d.q.AddNoEarlier(ctx, w.Shard, w.ID, w.ProcessingUntil); err != nil {
				return w, 0, err
			}
			return w, withdrawal.StartBusy, nil
		default:
			// Take over an attempt past its deadline: its consumer died,
			// perhaps after its request left, so the payout may have been
			// made.
			vals := begun()
			vals[":t"] = &types.AttributeValueMemberBOOL{Value: true}
			w, ok, err = d.update(ctx, ref.ID, change{set: start + ", maybe_paid = :t", cond: unchanged(w, vals),
				names: statusUntil, vals: vals})
		}
	}
	return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: begin payout of %s: the record keeps changing", ref.ID)
}

// attemptOf is the condition that attempt still runs.
func attemptOf(attempt string, vals item) string {
	vals[":processing"], vals[":aid"] = s(string(withdrawal.Processing)), s(attempt)
	return "#status = :processing AND aid = :aid"
}

// Send implements withdrawal.Ledger.
func (d *Dynamo) Send(ctx context.Context, ref withdrawal.Ref, attempt string, now time.Time, neverReceived bool) (withdrawal.Withdrawal, error) {
	vals := item{":one": n(1), ":now": ms(now)}
	// The attempt's deadline is the last a request of ours may be signed
	// or running: attempts run one after another, so it only grows.
	c := change{set: "attempts = attempts + :one, first_sent = if_not_exists(first_sent, :now), sent_until = #until, updated_at = :now",
		cond: attemptOf(attempt, vals), names: statusUntil, vals: vals}
	if neverReceived {
		c.remove = "maybe_paid"
	}
	w, ok, err := d.update(ctx, ref.ID, c)
	if err == nil && !ok {
		err = fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrStale)
	}
	return w, err
}

// Finish implements withdrawal.Ledger.
func (d *Dynamo) Finish(ctx context.Context, ref withdrawal.Ref, attempt string, r withdrawal.Result) (withdrawal.Withdrawal, error) {
	if r.Status != withdrawal.Paid && r.Status != withdrawal.Failed {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: finish %s as %q: not a final payout status", ref.ID, r.Status)
	}
	vals := item{":st": s(string(r.Status)), ":at": ms(r.At), ":pid": s(r.PayoutID), ":err": s(r.LastError),
		":unnotified": s(unnotified)}
	w, ok, err := d.update(ctx, ref.ID, change{
		set:    "#status = :st, processed_at = :at, updated_at = :at, payout_id = :pid, last_error = :err, state_key = :unnotified",
		remove: "#until, maybe_paid",
		cond:   attemptOf(attempt, vals), names: statusUntil, vals: vals,
	})
	if err == nil && !ok {
		err = fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrStale)
	}
	return w, err
}

// Retry implements withdrawal.Ledger: the record, then the schedule.
func (d *Dynamo) Retry(ctx context.Context, ref withdrawal.Ref, attempt string, r withdrawal.RetryAt) (withdrawal.Withdrawal, error) {
	vals := item{":retrying": s(string(withdrawal.Retrying)), ":at": ms(r.At), ":now": ms(r.Now), ":err": s(r.LastError)}
	set := "#status = :retrying, due_at = :at, updated_at = :now, last_error = :err, state_key = :retrying"
	if r.MaybePaid {
		set += ", maybe_paid = :t"
		vals[":t"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	w, ok, err := d.update(ctx, ref.ID, change{set: set, remove: "#until", cond: attemptOf(attempt, vals),
		names: statusUntil, vals: vals})
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	if !ok {
		return w, fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrStale)
	}
	d.reschedule(ctx, w, r.Now, func() error { return d.q.RetryAt(ctx, w.Shard, w.ID, 0, r.At) })
	return w, nil
}

// Resolve implements withdrawal.Ledger.
func (d *Dynamo) Resolve(ctx context.Context, id string, r withdrawal.Resolution) (withdrawal.Withdrawal, error) {
	if r.Status != withdrawal.Paid && r.Status != withdrawal.Failed {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: resolve %s as %q: not a final payout status", id, r.Status)
	}
	w, err := d.Find(ctx, id)
	for range 4 {
		switch {
		case err != nil:
			return withdrawal.Withdrawal{}, err
		case w.Status == r.Status:
			return w, nil
		case withdrawal.Unresolvable(w, r) != "":
			return w, notResolvable(w, r)
		}
		vals := item{":st": s(string(r.Status)), ":at": ms(r.At), ":by": s(r.By), ":unnotified": s(unnotified)}
		set := "#status = :st, processed_at = :at, updated_at = :at, resolved_by = :by, resolved_at = :at, state_key = :unnotified"
		if r.Status == withdrawal.Paid {
			set, vals[":pid"] = set+", payout_id = :pid", s(r.PayoutID)
		} else {
			set, vals[":err"] = set+", last_error = :err", s(r.Reason)
		}
		// The compare-and-set pins the record Unresolvable judged; the
		// condition states the rule too (resolve.lua's), so that no write
		// settles a withdrawal that no call may have paid but as failed
		// past the attempts.
		cond := unchanged(w, vals) + " AND attribute_exists(maybe_paid)"
		if r.Status == withdrawal.Failed && r.MaxAttempts > 0 {
			vals[":retrying"], vals[":max"] = s(string(withdrawal.Retrying)), n(int64(r.MaxAttempts))
			cond = unchanged(w, vals) + " AND (attribute_exists(maybe_paid) OR (#status = :retrying AND attempts >= :max))"
		}
		var ok bool
		w, ok, err = d.update(ctx, id, change{set: set, remove: "#until, maybe_paid", cond: cond,
			names: statusUntil, vals: vals})
		if err == nil && ok {
			d.tell(ctx, w, r.At)
			return w, nil
		}
	}
	return withdrawal.Withdrawal{}, fmt.Errorf("ledger: resolve %s: the record keeps changing", id)
}

// Apply implements withdrawal.Ledger: read, decide the step, then write it
// with the event id as a compare-and-set on what was read. A withdrawal
// never sent is refused as read (a consistent read; nothing makes a sent
// withdrawal unsent) and the write's condition holds it too.
func (d *Dynamo) Apply(ctx context.Context, id string, c withdrawal.Callback) (withdrawal.Withdrawal, withdrawal.Applied, error) {
	for range 10 {
		out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &d.tables.Withdrawals, Key: item{"id": s(id)}, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: read %s: %w", id, err)
		}
		if len(out.Item) == 0 {
			return withdrawal.Withdrawal{}, 0, withdrawal.ErrNotFound
		}
		w, err := decodeWithdrawal(out.Item)
		if err != nil {
			return withdrawal.Withdrawal{}, 0, err
		}
		if slices.Contains(item(out.Item).strings("events"), c.EventID) {
			return w, withdrawal.Duplicate, nil
		}
		if w.NeverSent() {
			return w, 0, fmt.Errorf("ledger: callback %s: %s is %s with %d calls: %w", c.EventID, id, w.Status, w.Attempts,
				withdrawal.ErrNotSent)
		}
		to, applied := withdrawal.Step(w.Status, c.Status)
		vals := item{":ev": &types.AttributeValueMemberSS{Value: []string{c.EventID}}, ":e": s(c.EventID)}
		ch := change{add: "events :ev", names: statusName}
		// The compare-and-set pins the record read; the condition states
		// that it was sent too (apply.lua's rule), so no write lands on a
		// withdrawal never sent.
		vals[":scheduled"], vals[":retrying"], vals[":cancelled"] = s(string(withdrawal.Scheduled)),
			s(string(withdrawal.Retrying)), s(string(withdrawal.Cancelled))
		vals[":zero"] = n(0)
		ch.cond = unchanged(w, vals) + " AND NOT contains(events, :e) AND NOT (#status IN (:scheduled, :retrying, :cancelled) " +
			"AND (attribute_not_exists(attempts) OR attempts = :zero) AND attribute_not_exists(first_sent) " +
			"AND attribute_not_exists(maybe_paid))"
		if applied == withdrawal.Changed {
			ch.set = "#status = :st, processed_at = :at, updated_at = :at, state_key = :unnotified"
			ch.remove = "#until, maybe_paid"
			ch.names = statusUntil
			vals[":st"], vals[":at"], vals[":unnotified"] = s(string(to)), ms(c.At), s(unnotified)
			if c.PayoutID != "" {
				ch.set, vals[":pid"] = ch.set+", payout_id = :pid", s(c.PayoutID)
			}
			if to == withdrawal.Failed {
				ch.set, vals[":err"] = ch.set+", last_error = :err", s(c.Reason)
			}
		}
		ch.vals = vals
		got, ok, err := d.update(ctx, id, ch)
		if err != nil {
			return withdrawal.Withdrawal{}, 0, err
		}
		if ok {
			if applied == withdrawal.Changed {
				d.tell(ctx, got, c.At)
			}
			return got, applied, nil
		}
	}
	return withdrawal.Withdrawal{}, 0, fmt.Errorf("ledger: apply callback to %s: the record keeps changing", id)
}

// tell schedules the job of a withdrawal settled outside an attempt, so
// that the consumer tells finance (the reconciler does if this fails).
func (d *Dynamo) tell(ctx context.Context, w withdrawal.Withdrawal, now time.Time) {
	if err := d.q.Add(ctx, w.Shard, w.ID, now); err != nil {
		d.log.Warn("settled but not scheduled to tell finance; the reconciler will", "withdrawal_id", w.ID, "error", err.Error())
	}
}

// MarkNotified implements withdrawal.Ledger.
func (d *Dynamo) MarkNotified(ctx context.Context, ref withdrawal.Ref, status withdrawal.Status) error {
	_, _, err := d.update(ctx, ref.ID, change{set: "told = :st", remove: "state_key", cond: "#status = :st",
		names: statusName, vals: item{":st": s(string(status))}})
	if errors.Is(err, withdrawal.ErrNotFound) {
		return nil
	}
	return err
}
