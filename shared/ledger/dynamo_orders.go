package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/hourglass/hourglass/shared/seckill"
)

// An order id given up on holds a tombstone in the orders table: an item
// with the id, the purchase and "voided_at" (unix ms), which an order never
// has. The first conditional put of an order or a tombstone wins for good.
const voidedAt = "voided_at"

// CreateOrder implements seckill.OrderLedger: a conditional put of the order.
// If the id is taken, the item there decides: an order (this one, put by an
// earlier attempt whose answer was lost and that the SDK resent, or a
// duplicate delivery's) is success, a tombstone is seckill.ErrOrderVoided. A
// request DynamoDB refuses as invalid can never succeed and is permanent.
func (d *Dynamo) CreateOrder(ctx context.Context, o seckill.Order) error {
	it := item{"id": s(o.ID), "purchase_id": s(o.PurchaseID), "item_id": s(o.ItemID),
		"user_id": s(o.UserID), "quantity": n(int64(o.Quantity)), "shard": n(int64(o.Shard)), "created_at": ms(o.CreatedAt)}
	if o.Amount != "" {
		it["amount"], it["currency"] = s(o.Amount), s(o.Currency)
	}
	if !o.PayBy.IsZero() {
		it["pay_by"] = ms(o.PayBy)
	}
	held, err := d.claimOrder(ctx, o.ID, it)
	var apiErr smithy.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException":
		return fmt.Errorf("%w: %s", seckill.ErrPermanent, apiErr.ErrorMessage())
	case err != nil:
		return fmt.Errorf("ledger: create order %s: %w", o.ID, err)
	case held[voidedAt] != nil:
		return fmt.Errorf("ledger: create order %s: %w", o.ID, seckill.ErrOrderVoided)
	}
	return nil
}

// VoidOrder implements seckill.OrderLedger: a conditional put of a
// tombstone. If the id is taken, a tombstone there (ours, resent, or another
// pass's) is success, an order means ordered.
func (d *Dynamo) VoidOrder(ctx context.Context, o seckill.Order) (bool, error) {
	held, err := d.claimOrder(ctx, o.ID, item{"id": s(o.ID), "purchase_id": s(o.PurchaseID), "item_id": s(o.ItemID),
		"user_id": s(o.UserID), "quantity": n(int64(o.Quantity)), "shard": n(int64(o.Shard)), voidedAt: ms(o.CreatedAt)})
	if err != nil {
		return false, fmt.Errorf("ledger: void order %s: %w", o.ID, err)
	}
	return held[voidedAt] == nil, nil
}

// claimOrder puts it unless its id is taken and returns the item the id
// holds after: it, or the one that was there. DynamoDB returns that item
// with the failed condition; a server that does not (dynalite) is asked
// with a consistent read (items of the table are never deleted, and what
// tells an order from a tombstone never changes, so the read sees what
// failed the condition).
func (d *Dynamo) claimOrder(ctx context.Context, id string, it item) (item, error) {
	_, err := d.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &d.tables.Orders, Item: it,
		ConditionExpression:                 aws.String("attribute_not_exists(id)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return it, nil
	}
	if !conditionFailed(err) {
		return nil, err
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && len(ccf.Item) > 0 {
		return ccf.Item, nil
	}
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &d.tables.Orders, Key: item{"id": s(id)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("order id %s is taken, yet holds nothing", id)
	}
	return out.Item, nil
}

// An order with a payment window has "amount", "currency" and "pay_by"
// (unix ms) from its creation; its end, "ended" ("paid" or "expired") with
// "ended_at", is set once by a conditional update (attribute_not_exists);
// each payment event applied is an attribute "pe:<event id>" holding
// "<outcome>|<end>|<at ms>", set in the same conditional update.
const eventAttr = "pe:"

// FindOrder implements seckill.OrderLedger with a consistent read.
func (d *Dynamo) FindOrder(ctx context.Context, o seckill.Order) (seckill.Order, error) {
	got, _, err := d.readOrder(ctx, o.ID)
	return got, err
}

func (d *Dynamo) readOrder(ctx context.Context, id string) (seckill.Order, item, error) {
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &d.tables.Orders, Key: item{"id": s(id)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return seckill.Order{}, nil, fmt.Errorf("ledger: read order %s: %w", id, err)
	}
	it := item(out.Item)
	if len(it) == 0 || it[voidedAt] != nil {
		return seckill.Order{}, nil, seckill.ErrNoOrder
	}
	o := seckill.Order{ID: id, PurchaseID: it.str("purchase_id"), ItemID: it.str("item_id"), UserID: it.str("user_id"),
		Quantity: int(it.num("quantity")), Shard: int(it.num("shard")), CreatedAt: it.time("created_at"),
		Amount: it.str("amount"), Currency: it.str("currency"), End: seckill.OrderEnd(it.str("ended"))}
	if it["pay_by"] != nil {
		o.PayBy = it.time("pay_by")
	}
	if it["ended_at"] != nil {
		o.EndedAt = it.time("ended_at")
	}
	return o, it, nil
}

// SettlePayment implements seckill.OrderLedger: read, decide, then write the
// event's result (and the end) with a condition on the end read and on the
// event not being there.
func (d *Dynamo) SettlePayment(ctx context.Context, p seckill.Payment) (seckill.Order, seckill.PaymentResult, error) {
	ev := eventAttr + p.EventID
	for range 10 {
		o, it, err := d.readOrder(ctx, p.OrderID)
		if err != nil {
			return seckill.Order{}, seckill.PaymentResult{}, err
		}
		dec := seckill.DecideOrder(o, p)
		if dec.Err != nil {
			return seckill.Order{}, seckill.PaymentResult{}, dec.Err // no window: nothing to pay
		}
		if rec := it.str(ev); rec != "" {
			r := decodePaymentResult(rec)
			r.Replayed = true
			return o, r, nil
		}
		outcome, end := dec.Outcome, dec.End
		at := strconv.FormatInt(p.At.UnixMilli(), 10)
		names := map[string]string{"#ev": ev}
		vals := item{":rec": s(string(outcome) + "|" + string(end) + "|" + at)}
		set := "#ev = :rec"
		cond := "attribute_not_exists(#ev) AND attribute_not_exists(" + voidedAt + ")"
		if o.End == seckill.EndNone {
			cond += " AND attribute_not_exists(ended)"
		} else {
			cond += " AND ended = :seen"
			vals[":seen"] = s(string(o.End))
		}
		if dec.SetEnd {
			set += ", ended = :end, ended_at = :at"
			vals[":end"], vals[":at"] = s(string(end)), ms(p.At)
		}
		_, err = d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &d.tables.Orders, Key: item{"id": s(o.ID)}, UpdateExpression: aws.String("SET " + set),
			ConditionExpression: aws.String(cond), ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		})
		if conditionFailed(err) {
			continue // the order or the event changed: read again
		}
		if err != nil {
			return seckill.Order{}, seckill.PaymentResult{}, fmt.Errorf("ledger: apply payment %s: %w", p.EventID, err)
		}
		if end != o.End {
			o.End, o.EndedAt = end, p.At.UTC().Truncate(time.Millisecond)
		}
		return o, seckill.PaymentResult{Outcome: outcome, End: end, At: p.At.UTC().Truncate(time.Millisecond)}, nil
	}
	return seckill.Order{}, seckill.PaymentResult{}, fmt.Errorf("ledger: apply payment %s: the order keeps changing", p.EventID)
}

// ExpireOrder implements seckill.OrderLedger: a conditional update sets the
// end unless one is there, and only from the pay-by time on.
func (d *Dynamo) ExpireOrder(ctx context.Context, o seckill.Order, now time.Time) (seckill.OrderEnd, error) {
	// The decision is seckill.DecideOrder's (end there: as it is; before
	// pay-by: not due; else expired), written as one condition that holds
	// it on the item as it stands.
	_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.tables.Orders, Key: item{"id": s(o.ID)},
		UpdateExpression: aws.String("SET ended = :end, ended_at = :now"),
		ConditionExpression: aws.String("attribute_exists(id) AND attribute_not_exists(" + voidedAt +
			") AND attribute_not_exists(ended) AND pay_by <= :now"),
		ExpressionAttributeValues: item{":end": s(string(seckill.EndExpired)), ":now": ms(now)},
	})
	if err == nil {
		return seckill.EndExpired, nil
	}
	if !conditionFailed(err) {
		return "", fmt.Errorf("ledger: expire order %s: %w", o.ID, err)
	}
	held, _, err := d.readOrder(ctx, o.ID)
	if err != nil {
		return "", err
	}
	dec := seckill.DecideOrder(held, seckill.Expire{Now: now})
	switch {
	case dec.Err != nil || dec.SetEnd:
		return "", seckill.ErrNotDue // no window, not due, or (a condition that failed) not yet
	}
	return dec.End, nil
}
