package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TTLAttribute is the idempotency table's time-to-live attribute (unix
// seconds), which the CDK stack declares to DynamoDB.
const TTLAttribute = "expires_at"

// TableAPI is what CreateTables needs of the DynamoDB client.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// TableSchemas are the ledger's tables as the CDK stack defines them; the
// local stack creates them from these (HOURGLASS_CREATE_TABLES=true).
func TableSchemas(t Tables) []*dynamodb.CreateTableInput {
	str := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
	}
	num := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeN}
	}
	key := func(name string, kt types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(name), KeyType: kt}
	}
	index := func(name, pk, sk string) types.GlobalSecondaryIndex {
		return types.GlobalSecondaryIndex{
			IndexName:  aws.String(name),
			KeySchema:  []types.KeySchemaElement{key(pk, types.KeyTypeHash), key(sk, types.KeyTypeRange)},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}
	}
	simple := func(name, pk string) *dynamodb.CreateTableInput {
		return &dynamodb.CreateTableInput{
			TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{str(pk)},
			KeySchema:            []types.KeySchemaElement{key(pk, types.KeyTypeHash)},
		}
	}
	w := simple(t.Withdrawals, "id")
	w.AttributeDefinitions = append(w.AttributeDefinitions, str("user_id"), str("state_key"), num("due_at"))
	w.GlobalSecondaryIndexes = []types.GlobalSecondaryIndex{
		index(IndexByUser, "user_id", "id"), index(IndexByState, "state_key", "due_at"),
	}
	return []*dynamodb.CreateTableInput{w, simple(t.Orders, "id"), simple(t.Idempotency, "pk")}
}

// CreateTables creates the ledger's tables that do not exist yet and waits
// until they are active; the idempotency table gets its TTL attribute where
// the server supports it.
func CreateTables(ctx context.Context, api TableAPI, t Tables) error {
	for _, in := range TableSchemas(t) {
		_, err := api.CreateTable(ctx, in)
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("ledger: create table %s: %w", *in.TableName, err)
		}
		w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
			o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
		})
		if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, time.Minute); err != nil {
			return fmt.Errorf("ledger: table %s: %w", *in.TableName, err)
		}
	}
	// DynamoDB deletes expired keys lazily; the ledger checks expiry itself,
	// so a server without TTL (dynalite) works the same.
	_, _ = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(t.Idempotency),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true),
		},
	})
	return nil
}
