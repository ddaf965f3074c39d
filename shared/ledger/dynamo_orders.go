package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"

	"github.com/hourglass/hourglass/shared/seckill"
)

// CreateOrder implements seckill.OrderLedger: a conditional put, so the first
// write of an order id wins. A request DynamoDB refuses as invalid can never
// succeed and is permanent.
func (d *Dynamo) CreateOrder(ctx context.Context, o seckill.Order) error {
	_, err := d.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &d.tables.Orders,
		Item: item{"id": s(o.ID), "purchase_id": s(o.PurchaseID), "item_id": s(o.ItemID), "user_id": s(o.UserID),
			"quantity": n(int64(o.Quantity)), "shard": n(int64(o.Shard)), "created_at": ms(o.CreatedAt)},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	if err == nil || conditionFailed(err) {
		return nil
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" {
		return fmt.Errorf("%w: %s", seckill.ErrPermanent, apiErr.ErrorMessage())
	}
	return fmt.Errorf("ledger: create order %s: %w", o.ID, err)
}
