package stall

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DynamoCore is what Dynamo wraps: the calls of ledger.DynamoAPI. A
// *dynamodb.Client has them, and so does a lostreply wrapper.
type DynamoCore interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// DynamoAPI is every DynamoDB call a ledger makes or may make: the core
// ones, transactions, batches and scans. Dynamo's wrapper has them all, so
// it serves a ledger whose interface grows into any of them.
type DynamoAPI interface {
	DynamoCore
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// Dynamo wraps db so that every call of an actor is a point labelled
// "dynamodb <Operation> <table>" ("<table>/<index>" for a query or scan of
// an index; the first item's table and "+<more>" for a transaction; the
// tables for a batch). The calls beyond DynamoCore reach db if it has them
// and fail at once otherwise. Calls without an actor pass straight through.
func Dynamo(db DynamoCore) DynamoAPI { return &dynamo{db: db} }

type dynamo struct{ db DynamoCore }

var _ DynamoAPI = (*dynamo)(nil)

// dynamoCall runs one call of the wrapper through its point.
func dynamoCall[In, Out any](ctx context.Context, label string, call func(context.Context, In, ...func(*dynamodb.Options)) (Out, error), in In, opts []func(*dynamodb.Options)) (Out, error) {
	return through(ctx, "dynamodb "+label, func(ctx context.Context, _ bool) (Out, error) {
		return call(ctx, in, opts...)
	}, nil)
}

func table(name *string, index *string) string {
	t := aws.ToString(name)
	if index != nil {
		t += "/" + *index
	}
	return t
}

func (d *dynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return dynamoCall(ctx, "GetItem "+table(in.TableName, nil), d.db.GetItem, in, opts)
}

func (d *dynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return dynamoCall(ctx, "PutItem "+table(in.TableName, nil), d.db.PutItem, in, opts)
}

func (d *dynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return dynamoCall(ctx, "UpdateItem "+table(in.TableName, nil), d.db.UpdateItem, in, opts)
}

func (d *dynamo) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return dynamoCall(ctx, "DeleteItem "+table(in.TableName, nil), d.db.DeleteItem, in, opts)
}

func (d *dynamo) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return dynamoCall(ctx, "Query "+table(in.TableName, in.IndexName), d.db.Query, in, opts)
}

// missing is the error of a call that db does not have.
func (d *dynamo) missing(op string) error {
	return fmt.Errorf("stall: %T has no %s", d.db, op)
}

func (d *dynamo) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	db, ok := d.db.(interface {
		Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	})
	if !ok {
		return nil, d.missing("Scan")
	}
	return dynamoCall(ctx, "Scan "+table(in.TableName, in.IndexName), db.Scan, in, opts)
}

func (d *dynamo) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	db, ok := d.db.(interface {
		TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	})
	if !ok {
		return nil, d.missing("TransactWriteItems")
	}
	var tables []*string
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			tables = append(tables, it.Put.TableName)
		case it.Update != nil:
			tables = append(tables, it.Update.TableName)
		case it.Delete != nil:
			tables = append(tables, it.Delete.TableName)
		case it.ConditionCheck != nil:
			tables = append(tables, it.ConditionCheck.TableName)
		}
	}
	return dynamoCall(ctx, "TransactWriteItems"+firstOf(tables), db.TransactWriteItems, in, opts)
}

func (d *dynamo) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	db, ok := d.db.(interface {
		TransactGetItems(context.Context, *dynamodb.TransactGetItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
	})
	if !ok {
		return nil, d.missing("TransactGetItems")
	}
	var tables []*string
	for _, it := range in.TransactItems {
		if it.Get != nil {
			tables = append(tables, it.Get.TableName)
		}
	}
	return dynamoCall(ctx, "TransactGetItems"+firstOf(tables), db.TransactGetItems, in, opts)
}

func (d *dynamo) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	db, ok := d.db.(interface {
		BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	})
	if !ok {
		return nil, d.missing("BatchGetItem")
	}
	return dynamoCall(ctx, "BatchGetItem"+tableSet(in.RequestItems), db.BatchGetItem, in, opts)
}

func (d *dynamo) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	db, ok := d.db.(interface {
		BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	})
	if !ok {
		return nil, d.missing("BatchWriteItem")
	}
	return dynamoCall(ctx, "BatchWriteItem"+tableSet(in.RequestItems), db.BatchWriteItem, in, opts)
}

// firstOf is " <first table> +<more>" for a transaction's items.
func firstOf(tables []*string) string {
	if len(tables) == 0 {
		return ""
	}
	s := " " + aws.ToString(tables[0])
	if len(tables) > 1 {
		s += fmt.Sprintf(" +%d", len(tables)-1)
	}
	return s
}

// tableSet is " <table>,<table>" for a batch, in a stable order.
func tableSet[V any](items map[string]V) string {
	if len(items) == 0 {
		return ""
	}
	names := make([]string, 0, len(items))
	for n := range items {
		names = append(names, n)
	}
	slices.Sort(names)
	return " " + strings.Join(names, ",")
}
