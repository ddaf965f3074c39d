package stall_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/stall"
	"github.com/hourglass/hourglass/shared/ledger"
)

// The wrapper serves the ledger's DynamoDB interface, and a wrapper of it.
var _ ledger.DynamoAPI = stall.DynamoAPI(nil)

var _ stall.DynamoCore = ledger.DynamoAPI(nil)

func TestDynamoCallsArePoints(t *testing.T) {
	srv := dynalitetest.Start(t)
	raw := srv.Client()
	ctx := context.Background()
	if _, err := raw.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("withdrawals"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
	db := stall.Dynamo(raw)
	item := func(id, state string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}, "state": &types.AttributeValueMemberS{Value: state}}
	}
	s := stall.New(t)

	// A lost answer: the put is applied, the caller times out.
	put := s.Go(ctx, "put", func(ctx context.Context) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("withdrawals"), Item: item("w1", "processing")})
		return err
	})
	if put.At() != "dynamodb PutItem withdrawals" {
		t.Fatalf("put at %q", put.At())
	}
	late := s.LoseReply(put)
	if !errors.Is(put.Err(), context.DeadlineExceeded) || late.Err != nil {
		t.Fatalf("put: %v, late %+v", put.Err(), late)
	}
	if _, ok := late.Reply.(*dynamodb.PutItemOutput); !ok {
		t.Fatalf("the lost answer is a %T", late.Reply)
	}
	if got := get(t, db, "w1"); got != "processing" {
		t.Fatalf("w1 %q after a lost answer, want applied", got)
	}

	// A request given up on lands after a newer write: the conditional
	// write that guards against it is what a ledger must have.
	stale := s.Go(ctx, "stale", func(ctx context.Context) error {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String("withdrawals"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "w1"}},
			UpdateExpression:          aws.String("SET #s = :s"),
			ExpressionAttributeNames:  map[string]string{"#s": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "retrying"}},
		})
		return err
	})
	held := s.GiveUp(stale)
	if !errors.Is(stale.Err(), context.DeadlineExceeded) || get(t, db, "w1") != "processing" {
		t.Fatalf("given up: %v, w1 %q", stale.Err(), get(t, db, "w1"))
	}
	// (dynalite has no TransactWriteItems: a batch stands for the newer
	// write.)
	newer := s.Go(ctx, "newer", func(ctx context.Context) error {
		_, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
			"withdrawals": {
				{PutRequest: &types.PutRequest{Item: item("w1", "paid")}},
				{PutRequest: &types.PutRequest{Item: item("w2", "scheduled")}},
			},
		}})
		return err
	})
	if newer.At() != "dynamodb BatchWriteItem withdrawals" {
		t.Fatalf("newer at %q", newer.At())
	}
	if err := s.Finish(newer); err != nil || get(t, db, "w1") != "paid" {
		t.Fatalf("newer: %v, w1 %q", err, get(t, db, "w1"))
	}
	s.DeliverLate(held.ID)
	if held.Err != nil || get(t, db, "w1") != "retrying" {
		t.Fatalf("late: %v, w1 %q: an unconditional late write goes backwards", held.Err, get(t, db, "w1"))
	}
}

func get(t *testing.T, db stall.DynamoAPI, id string) string {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String("withdrawals"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return ""
	}
	return out.Item["state"].(*types.AttributeValueMemberS).Value
}

// coreOnly has the ledger's five calls and nothing more.
type coreOnly struct{ ledger.DynamoAPI }

func (coreOnly) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return &dynamodb.QueryOutput{Count: 3}, nil
}

func TestDynamoWrapsANarrowClient(t *testing.T) {
	db := stall.Dynamo(coreOnly{})
	ctx := context.Background()
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{}); err == nil || !strings.Contains(err.Error(), "has no TransactWriteItems") {
		t.Fatalf("a call the client lacks: %v", err)
	}
	s := stall.New(t)
	tx := s.Go(ctx, "tx", func(ctx context.Context) error {
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{TableName: aws.String("withdrawals")}},
			{Put: &types.Put{TableName: aws.String("outbox")}},
		}})
		return err
	})
	if !tx.Done() || tx.At() != "" || !strings.Contains(tx.Err().Error(), "has no TransactWriteItems") {
		t.Fatalf("a call the client lacks is no point: %v", tx)
	}
	q := s.Go(ctx, "query", func(ctx context.Context) error {
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("withdrawals"), IndexName: aws.String("by_state")})
		if err == nil && out.Count != 3 {
			return errors.New("wrong answer")
		}
		return err
	})
	if q.At() != "dynamodb Query withdrawals/by_state" {
		t.Fatalf("query at %q", q.At())
	}
	if err := s.Finish(q); err != nil {
		t.Fatal(err)
	}
}

// withTx is a narrow client that has transactions too.
type withTx struct{ coreOnly }

func (withTx) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func TestDynamoTransactionLabel(t *testing.T) {
	db := stall.Dynamo(withTx{})
	s := stall.New(t)
	tx := s.Go(context.Background(), "tx", func(ctx context.Context) error {
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{TableName: aws.String("withdrawals")}},
			{Put: &types.Put{TableName: aws.String("outbox")}},
		}})
		return err
	})
	if tx.At() != "dynamodb TransactWriteItems withdrawals +1" {
		t.Fatalf("tx at %q", tx.At())
	}
	if late := s.LoseReply(tx); !errors.Is(tx.Err(), context.DeadlineExceeded) || late.Reply == nil {
		t.Fatalf("tx: %v, late %+v", tx.Err(), late)
	}
}
