package main

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/ledger"
)

// The ledger's tables come from ledger.TableSchemas, the one description
// the code and `hourglass serve` use too, so keys and indexes cannot drift.
// These names only pick each schema out.
var schemaNames = ledger.Tables{Withdrawals: "withdrawals", Orders: "orders", Idempotency: "idempotency"}

func (s *HourglassStack) createTables() {
	schemas := map[string]*dynamodb.CreateTableInput{}
	for _, in := range ledger.TableSchemas(schemaNames) {
		schemas[*in.TableName] = in
	}
	s.Withdrawals = s.newTable("WithdrawalsTable", schemas[schemaNames.Withdrawals], "")
	s.Orders = s.newTable("OrdersTable", schemas[schemaNames.Orders], "")
	s.Idempotency = s.newTable("IdempotencyTable", schemas[schemaNames.Idempotency], ledger.TTLAttribute)
}

func (s *HourglassStack) newTable(id string, schema *dynamodb.CreateTableInput, ttl string) awsdynamodb.Table {
	attrType := map[string]awsdynamodb.AttributeType{}
	for _, a := range schema.AttributeDefinitions {
		attrType[*a.AttributeName] = map[types.ScalarAttributeType]awsdynamodb.AttributeType{
			types.ScalarAttributeTypeS: awsdynamodb.AttributeType_STRING,
			types.ScalarAttributeTypeN: awsdynamodb.AttributeType_NUMBER,
			types.ScalarAttributeTypeB: awsdynamodb.AttributeType_BINARY,
		}[a.AttributeType]
	}
	keys := func(ks []types.KeySchemaElement) (pk, sk *awsdynamodb.Attribute) {
		for _, k := range ks {
			a := &awsdynamodb.Attribute{Name: k.AttributeName, Type: attrType[*k.AttributeName]}
			if k.KeyType == types.KeyTypeHash {
				pk = a
			} else {
				sk = a
			}
		}
		return pk, sk
	}
	pk, sk := keys(schema.KeySchema)
	props := &awsdynamodb.TableProps{
		PartitionKey: pk,
		SortKey:      sk,
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		// The system of record: neither a stack deletion nor a stray
		// console click deletes it.
		DeletionProtection: jsii.Bool(true),
		RemovalPolicy:      awscdk.RemovalPolicy_RETAIN,
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
	}
	if ttl != "" {
		props.TimeToLiveAttribute = jsii.String(ttl)
	}
	t := awsdynamodb.NewTable(s.Stack, jsii.String(id), props)
	for _, gsi := range schema.GlobalSecondaryIndexes {
		pk, sk := keys(gsi.KeySchema)
		t.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      gsi.IndexName,
			PartitionKey:   pk,
			SortKey:        sk,
			ProjectionType: awsdynamodb.ProjectionType(gsi.Projection.ProjectionType),
		})
		s.indexes[t] = append(s.indexes[t], *gsi.IndexName)
	}
	return t
}

// ledgerIndex names an index of a ledger table as a grant does.
func ledgerIndex(table, index string) string { return table + "/index/" + index }

// ledgerUse is what each function does on the ledger's tables: the
// DynamoDB actions it calls, by table (its schema name, schemaNames) or by
// index (ledgerIndex), and nothing more. TestLedgerCallsAreGranted drives
// each function's operations against dynalite and checks both ways: every
// call made is granted here, and every grant here is used.
//
//   - enqueue: the withdrawal API reserves, completes and releases
//     idempotency keys (a key no create was sent for is deleted: the only
//     DeleteItem), creates, reads, lists (by_user) and moves withdrawals;
//     the payout callbacks move them; a payment confirmation settles an
//     order.
//   - poller: the reconciler walks by_state and marks the withdrawals it
//     promotes into Redis (it reads them from the index, never by key); the flash-sale compensation voids the order id of a
//     purchase it releases (a conditional put; an id an order took is read
//     back when the failed put does not return it, ledger claimOrder).
//   - consumer: moves withdrawals through a payout; makes, reads and
//     expires orders.
//   - operator: payouts unresolved walks by_state; payouts resolve reads
//     and settles a withdrawal; reconcile does what the poller's passes do.
//   - seckill: the flash-sale API works on Redis alone.
var ledgerUse = map[string]map[string][]string{
	fnEnqueue: {
		schemaNames.Withdrawals:                                  {"GetItem", "PutItem", "UpdateItem"},
		ledgerIndex(schemaNames.Withdrawals, ledger.IndexByUser): {"Query"},
		schemaNames.Idempotency:                                  {"GetItem", "PutItem", "UpdateItem", "DeleteItem"},
		schemaNames.Orders:                                       {"GetItem", "UpdateItem"},
	},
	fnPoller: {
		schemaNames.Withdrawals:                                   {"UpdateItem"},
		ledgerIndex(schemaNames.Withdrawals, ledger.IndexByState): {"Query"},
		schemaNames.Orders:                                        {"GetItem", "PutItem"},
	},
	fnConsumer: {
		schemaNames.Withdrawals: {"GetItem", "UpdateItem"},
		schemaNames.Orders:      {"GetItem", "PutItem", "UpdateItem"},
	},
	fnOperator: {
		schemaNames.Withdrawals:                                   {"GetItem", "UpdateItem"},
		ledgerIndex(schemaNames.Withdrawals, ledger.IndexByState): {"Query"},
		schemaNames.Orders:                                        {"GetItem", "PutItem"},
	},
}

// ledgerActions are the DynamoDB actions of the ledger's client interface,
// ledger.DynamoAPI, one per method: no function may be granted another.
var ledgerActions = func() []string {
	api := reflect.TypeOf((*ledger.DynamoAPI)(nil)).Elem()
	actions := make([]string, api.NumMethod())
	for i := range actions {
		actions[i] = fmt.Sprintf("dynamodb:%s", api.Method(i).Name)
	}
	return actions
}()

// ledgerTable is the table of a ledgerUse resource, by schema name.
func (s *HourglassStack) ledgerTable(name string) awsdynamodb.Table {
	return map[string]awsdynamodb.Table{
		schemaNames.Withdrawals: s.Withdrawals, schemaNames.Orders: s.Orders, schemaNames.Idempotency: s.Idempotency,
	}[name]
}

// allowLedger grants fn what ledgerUse lists for it, one statement per
// table or index, each resource named (no index/* wildcard).
func (s *HourglassStack) allowLedger(fn awslambda.Function, name string) {
	use := ledgerUse[name]
	for _, res := range slices.Sorted(maps.Keys(use)) {
		table, index, _ := strings.Cut(res, "/index/")
		arn := s.ledgerTable(table).TableArn()
		if index != "" {
			arn = jsii.String(*arn + "/index/" + index)
		}
		actions := make([]string, len(use[res]))
		for i, a := range use[res] {
			actions[i] = "dynamodb:" + a
		}
		allow(fn, actions, arn)
	}
}
