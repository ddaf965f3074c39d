package ledger

import (
	"context"
	"errors"
	"fmt"

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
	held, err := d.claimOrder(ctx, o.ID, item{"id": s(o.ID), "purchase_id": s(o.PurchaseID), "item_id": s(o.ItemID),
		"user_id": s(o.UserID), "quantity": n(int64(o.Quantity)), "shard": n(int64(o.Shard)), "created_at": ms(o.CreatedAt)})
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
// with a consistent read (items of the table are never changed or deleted,
// so the read sees what failed the condition).
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
