package emulator_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/emulator"
)

func TestMain(m *testing.M) { emulator.Main(m) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDynaliteTableAndItem(t *testing.T) {
	ctx := testContext(t)
	db := emulator.Dynamo(t)
	table := emulator.UniqueName("emulator-table")

	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []dtypes.AttributeDefinition{{AttributeName: aws.String("lease_key"), AttributeType: dtypes.ScalarAttributeTypeS}},
		KeySchema:            []dtypes.KeySchemaElement{{AttributeName: aws.String("lease_key"), KeyType: dtypes.KeyTypeHash}},
		BillingMode:          dtypes.BillingModePayPerRequest,
	}); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("DescribeTable: %v", err)
	}
	if got := desc.Table.TableStatus; got != dtypes.TableStatusActive {
		t.Fatalf("table status right after CreateTable = %s, want ACTIVE (createTableMs: 0)", got)
	}

	key := map[string]dtypes.AttributeValue{"lease_key": &dtypes.AttributeValueMemberS{Value: "orders:shardId-000000000000"}}
	item := map[string]dtypes.AttributeValue{
		"lease_key":     key["lease_key"],
		"lease_owner":   &dtypes.AttributeValueMemberS{Value: "worker-1"},
		"lease_counter": &dtypes.AttributeValueMemberN{Value: "1"},
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(lease_owner)"),
	}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	// The same conditional put again must fail the condition.
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(lease_owner)"),
	})
	var failed *dtypes.ConditionalCheckFailedException
	if !errors.As(err, &failed) {
		t.Fatalf("second conditional PutItem: err = %v, want ConditionalCheckFailedException", err)
	}

	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	owner, ok := got.Item["lease_owner"].(*dtypes.AttributeValueMemberS)
	if !ok || owner.Value != "worker-1" {
		t.Fatalf("GetItem lease_owner = %#v, want S worker-1", got.Item["lease_owner"])
	}
}

func TestKinesaliteStreamRecords(t *testing.T) {
	ctx := testContext(t)
	ks := emulator.Kinesis(t)
	stream := emulator.UniqueName("emulator-stream")

	if err := emulator.CreateStream(ctx, ks, stream, 2); err != nil {
		t.Fatal(err)
	}
	shards, err := ks.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("ListShards: %v", err)
	}
	if len(shards.Shards) != 2 {
		t.Fatalf("ListShards returned %d shards, want 2", len(shards.Shards))
	}

	put, err := ks.PutRecord(ctx, &kinesis.PutRecordInput{
		StreamName:   aws.String(stream),
		PartitionKey: aws.String("pk"),
		Data:         []byte("hello"),
	})
	if err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	it, err := ks.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName:        aws.String(stream),
		ShardId:           put.ShardId,
		ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		t.Fatalf("GetShardIterator: %v", err)
	}
	recs, err := ks.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if len(recs.Records) != 1 {
		t.Fatalf("GetRecords returned %d records, want 1", len(recs.Records))
	}
	r := recs.Records[0]
	if string(r.Data) != "hello" || aws.ToString(r.SequenceNumber) != aws.ToString(put.SequenceNumber) {
		t.Fatalf("record = %q seq %s, want %q seq %s", r.Data, aws.ToString(r.SequenceNumber), "hello", aws.ToString(put.SequenceNumber))
	}
	if r.ApproximateArrivalTimestamp == nil {
		t.Errorf("record has no ApproximateArrivalTimestamp")
	}
	if recs.NextShardIterator == nil {
		t.Errorf("GetRecords on an open shard returned no NextShardIterator")
	}
}

// TestStartAndClose starts private servers (not the shared ones) and checks
// that Close stops them.
func TestStartAndClose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts emulators (Node.js); not run under -short")
	}
	ctx := testContext(t)
	for name, start := range map[string]func(context.Context) (*emulator.Server, error){
		"dynalite":   emulator.StartDynalite,
		"kinesalite": emulator.StartKinesalite,
	} {
		t.Run(name, func(t *testing.T) {
			srv, err := start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+$`).MatchString(srv.Endpoint) {
				t.Errorf("Endpoint = %q, want http://127.0.0.1:PORT", srv.Endpoint)
			}
			var callErr error
			if name == "dynalite" {
				_, callErr = emulator.NewDynamoClient(srv.Endpoint).ListTables(ctx, &dynamodb.ListTablesInput{})
			} else {
				_, callErr = emulator.NewKinesisClient(srv.Endpoint).ListStreams(ctx, &kinesis.ListStreamsInput{})
			}
			if callErr != nil {
				t.Fatalf("call to the running server: %v", callErr)
			}
			if err := srv.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := srv.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			// The server is gone: a call now fails (after the SDK's retries).
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if name == "dynalite" {
				_, callErr = emulator.NewDynamoClient(srv.Endpoint).ListTables(callCtx, &dynamodb.ListTablesInput{})
			} else {
				_, callErr = emulator.NewKinesisClient(srv.Endpoint).ListStreams(callCtx, &kinesis.ListStreamsInput{})
			}
			if callErr == nil {
				t.Fatalf("call after Close succeeded; the server is still running")
			}
		})
	}
}

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,128}$`)
	seen := map[string]bool{}
	for _, prefix := range []string{"orders", "", "with space/and:colon", string(make([]byte, 300))} {
		for range 3 {
			n := emulator.UniqueName(prefix)
			if !valid.MatchString(n) {
				t.Errorf("UniqueName(%q) = %q, not a valid table or stream name", prefix, n)
			}
			if seen[n] {
				t.Errorf("UniqueName(%q) = %q twice", prefix, n)
			}
			seen[n] = true
		}
	}
}
