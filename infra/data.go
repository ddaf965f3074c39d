package main

import (
	"fmt"
	"reflect"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
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

// tableActions are the DynamoDB actions of the ledger's client interface,
// ledger.DynamoAPI, one per method: the functions may call exactly what the
// code can.
var tableActions = func() []string {
	api := reflect.TypeOf((*ledger.DynamoAPI)(nil)).Elem()
	actions := make([]string, api.NumMethod())
	for i := range actions {
		actions[i] = fmt.Sprintf("dynamodb:%s", api.Method(i).Name)
	}
	return actions
}()
