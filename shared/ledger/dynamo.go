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
	// reconciler promotes them (default DefaultHorizon).
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

// stateKey is the by_state index key of a withdrawal, "" for none.
func stateKey(w withdrawal.Withdrawal) string {
	switch {
	case !w.Status.Final():
		return string(w.Status)
	case w.Status != withdrawal.Cancelled && !w.Notified:
		return unnotified
	}
	return ""
}

func encodeWithdrawal(w withdrawal.Withdrawal) item {
	it := item{
		"id": s(w.ID), "user_id": s(w.UserID), "shard": n(int64(w.Shard)), "status": s(string(w.Status)),
		"amount": s(w.Amount.String()), "currency": s(w.Currency), "dest": s(w.Destination),
		"due_at": ms(w.DueAt), "created_at": ms(w.CreatedAt), "updated_at": ms(w.UpdatedAt),
		"attempts": n(int64(w.Attempts)), "notified": &types.AttributeValueMemberBOOL{Value: w.Notified},
	}
	if k := stateKey(w); k != "" {
		it["state_key"] = s(k)
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
		ProcessedAt: it.time("processed_at"), ProcessingUntil: it.time("until"), Notified: it.boolean("notified"),
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

// Release implements withdrawal.Ledger. A reservation whose withdrawal was
// written (its create failed after the record, or its answer was lost) is
// kept: the retry takes it over and completes it with that same record,
// where releasing it would let the retry make a second withdrawal.
func (d *Dynamo) Release(ctx context.Context, key withdrawal.IdemKey, id string) error {
	if _, written, err := d.load(ctx, id); err != nil || written {
		return err
	}
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

// schedule puts w in the Redis queue if it falls due within the horizon.
func (d *Dynamo) schedule(ctx context.Context, w withdrawal.Withdrawal, now time.Time) {
	if w.DueAt.After(now.Add(d.opts.Horizon)) {
		return // the reconciler promotes it nearer the time
	}
	if err := d.q.Add(ctx, w.Shard, w.ID, w.DueAt); err != nil {
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

// update applies a conditional update and returns the record after it, or
// (with ok false) the record as it stands when the condition failed.
func (d *Dynamo) update(ctx context.Context, id, expr, cond string, names map[string]string, vals item) (withdrawal.Withdrawal, bool, error) {
	in := &dynamodb.UpdateItemInput{
		TableName: &d.tables.Withdrawals, Key: item{"id": s(id)},
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueAllNew,
	}
	if len(names) > 0 {
		in.ExpressionAttributeNames = names
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
	return cur, false, nil
}

var statusName = map[string]string{"#status": "status"}

// Cancel implements withdrawal.Ledger.
func (d *Dynamo) Cancel(ctx context.Context, userID, id string, now time.Time) (withdrawal.Withdrawal, error) {
	w, ok, err := d.update(ctx, id,
		"SET #status = :cancelled, updated_at = :now REMOVE state_key",
		"user_id = :u AND (#status = :scheduled OR #status = :retrying)", statusName,
		item{":cancelled": s(string(withdrawal.Cancelled)), ":now": ms(now), ":u": s(userID),
			":scheduled": s(string(withdrawal.Scheduled)), ":retrying": s(string(withdrawal.Retrying))})
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

// Begin implements withdrawal.Ledger.
func (d *Dynamo) Begin(ctx context.Context, ref withdrawal.Ref, now, until time.Time) (withdrawal.Withdrawal, withdrawal.Start, error) {
	w, ok, err := d.update(ctx, ref.ID,
		"SET #status = :processing, attempts = attempts + :one, #until = :until, updated_at = :now, state_key = :processing",
		"((#status = :scheduled OR #status = :retrying) AND due_at <= :latest) OR (#status = :processing AND #until <= :now)",
		map[string]string{"#status": "status", "#until": "until"},
		item{":processing": s(string(withdrawal.Processing)), ":one": n(1), ":until": ms(until), ":now": ms(now),
			":scheduled": s(string(withdrawal.Scheduled)), ":retrying": s(string(withdrawal.Retrying)),
			":latest": ms(now.Add(ClockSkew))})
	if err != nil {
		return withdrawal.Withdrawal{}, 0, err
	}
	switch {
	case ok:
		return w, withdrawal.StartAttempt, nil
	case w.Status == withdrawal.Processing:
		// Follow the running attempt up at its deadline, as the Redis
		// ledger does, so a consumer that died mid-attempt is taken over.
		if err := d.q.Add(ctx, w.Shard, w.ID, w.ProcessingUntil); err != nil {
			return w, 0, err
		}
		return w, withdrawal.StartBusy, nil
	case w.Status.Final():
		return w, withdrawal.StartFinal, nil
	}
	return w, withdrawal.StartNotDue, nil
}

// Finish implements withdrawal.Ledger.
func (d *Dynamo) Finish(ctx context.Context, ref withdrawal.Ref, attempt int, r withdrawal.Result) (withdrawal.Withdrawal, error) {
	if r.Status != withdrawal.Paid && r.Status != withdrawal.Failed {
		return withdrawal.Withdrawal{}, fmt.Errorf("ledger: finish %s as %q: not a final payout status", ref.ID, r.Status)
	}
	w, ok, err := d.update(ctx, ref.ID,
		"SET #status = :st, processed_at = :at, updated_at = :at, payout_id = :pid, last_error = :err, state_key = :unnotified REMOVE #until",
		"#status = :processing AND attempts = :attempt",
		map[string]string{"#status": "status", "#until": "until"},
		item{":st": s(string(r.Status)), ":at": ms(r.At), ":pid": s(r.PayoutID), ":err": s(r.LastError),
			":unnotified": s(unnotified), ":processing": s(string(withdrawal.Processing)), ":attempt": n(int64(attempt))})
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	if !ok {
		return w, fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrStale)
	}
	return w, nil
}

// Retry implements withdrawal.Ledger: the record, then the schedule.
func (d *Dynamo) Retry(ctx context.Context, ref withdrawal.Ref, attempt int, at, now time.Time, lastError string) (withdrawal.Withdrawal, error) {
	w, ok, err := d.update(ctx, ref.ID,
		"SET #status = :retrying, due_at = :at, updated_at = :now, last_error = :err, state_key = :retrying REMOVE #until",
		"#status = :processing AND attempts = :attempt",
		map[string]string{"#status": "status", "#until": "until"},
		item{":retrying": s(string(withdrawal.Retrying)), ":at": ms(at), ":now": ms(now), ":err": s(lastError),
			":processing": s(string(withdrawal.Processing)), ":attempt": n(int64(attempt))})
	if err != nil {
		return withdrawal.Withdrawal{}, err
	}
	if !ok {
		return w, fmt.Errorf("ledger: %s: %w", ref.ID, withdrawal.ErrStale)
	}
	if err := d.q.RetryAt(ctx, w.Shard, w.ID, 0, at); err != nil {
		d.log.Warn("retry recorded but not scheduled; the reconciler will", "withdrawal_id", w.ID, "error", err.Error())
	}
	return w, nil
}

// MarkNotified implements withdrawal.Ledger.
func (d *Dynamo) MarkNotified(ctx context.Context, ref withdrawal.Ref) error {
	_, _, err := d.update(ctx, ref.ID, "SET notified = :t REMOVE state_key", "attribute_exists(id)", nil,
		item{":t": &types.AttributeValueMemberBOOL{Value: true}})
	return err
}
