package shardlease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// Bad input: every error names what is wrong and says what to do. The
// message parts asserted here are the promise; the rest of the wording may
// change. Cases with a test elsewhere (missing table, wrong key schema,
// corrupt row, missing stream, nil DynamoDB client) are not repeated.

func nopHandler(context.Context, *shardlease.Batch) error { return nil }

// requireMessage checks that err matches target and its text holds every part.
func requireMessage(t *testing.T, err error, target error, parts ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, target)
	for _, p := range parts {
		assert.Contains(t, err.Error(), p, "error %q", err)
	}
}

func TestBadInputStreamNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", 129)
	for _, tc := range []struct {
		name, stream string
		parts        []string
	}{
		{"empty", "", []string{"stream is empty", "use 1 to 128 characters of a-z, A-Z, 0-9, '_', '.' and '-'"}},
		{"colon", "orders:v2", []string{`stream "orders:v2" has ':' at byte 6`, "use only a-z, A-Z, 0-9, '_', '.' and '-'"}},
		{"space", "my orders", []string{`stream "my orders" has ' ' at byte 2`, "use only"}},
		{"non-ascii", "bestellungen-ü", []string{`stream "bestellungen-ü"`, "at byte 13", "use only"}},
		{"too long", long, []string{"is 129 characters long", "use 1 to 128 characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), tc.stream, nopHandler)
			requireMessage(t, err, shardlease.ErrInvalidName, append([]string{"NewConsumer"}, tc.parts...)...)
			require.ErrorIs(t, shardlease.ValidateStreamName(tc.stream), shardlease.ErrInvalidName)
		})
	}
}

func TestBadInputTableNames(t *testing.T) {
	t.Parallel()
	client := &countingDynamo{} // never called: names are checked before any call
	for _, tc := range []struct {
		name, table string
		parts       []string
	}{
		{"empty", "", []string{"table name is empty", "use 1 to 255 characters"}},
		{"too short", "ab", []string{`table name "ab" is shorter than 3 characters`, "use 3 to 255 characters"}},
		{"too long", strings.Repeat("t", 256), []string{"is 256 characters long", "use 1 to 255 characters"}},
		{"slash", "prod/leases", []string{`table name "prod/leases" has '/' at byte 4`, "use only a-z, A-Z, 0-9, '_', '.' and '-'"}},
		{"colon", "leases:orders", []string{`has ':' at byte 6`, "use only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shardlease.NewDynamoStore(client, tc.table)
			requireMessage(t, err, shardlease.ErrInvalidName, tc.parts...)
			// A call through the nil interface would panic: names are checked first.
			err = shardlease.CreateTable(context.Background(), struct{ shardlease.CreateTableAPI }{}, tc.table)
			requireMessage(t, err, shardlease.ErrInvalidName, tc.parts...)
		})
	}
	assert.Zero(t, client.Calls(), "no DynamoDB call for an invalid table name")

	_, err := shardlease.NewDynamoStore(client, "leases", shardlease.WithLegacyStream("orders:old"))
	requireMessage(t, err, shardlease.ErrInvalidName, "WithLegacyStream", `stream "orders:old" has ':'`, "use only")
	err = shardlease.CreateTable(context.Background(), nil, "leases")
	requireMessage(t, err, shardlease.ErrInvalidConfig, "DynamoDB client is nil")
}

func TestBadInputNilArguments(t *testing.T) {
	t.Parallel()
	kin, store := shardleasetest.NewKinesis(), shardlease.NewMemoryStore()
	_, err := shardlease.NewConsumer(nil, store, "orders", nopHandler)
	requireMessage(t, err, shardlease.ErrInvalidConfig, "stream orders", "the Kinesis client is nil", "pass kinesis.NewFromConfig(cfg)")
	_, err = shardlease.NewConsumer(kin, nil, "orders", nopHandler)
	requireMessage(t, err, shardlease.ErrInvalidConfig, "stream orders", "the lease store is nil", "shardlease.NewDynamoStore(...) or shardlease.NewMemoryStore()")
	_, err = shardlease.NewConsumer(kin, store, "orders", nil)
	requireMessage(t, err, shardlease.ErrInvalidConfig, "stream orders", "the handler is nil", "pass a func(ctx, *shardlease.Batch) error")
}

func TestBadInputOptions(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		opts  []shardlease.Option
		parts []string
	}{
		{"zero lease duration", []shardlease.Option{shardlease.WithLeaseDuration(0)},
			[]string{"WithLeaseDuration(0s)", "the duration must be positive"}},
		{"negative lease duration", []shardlease.Option{shardlease.WithLeaseDuration(-time.Second)},
			[]string{"WithLeaseDuration(-1s)", "must be positive"}},
		{"zero renew interval", []shardlease.Option{shardlease.WithRenewInterval(0)},
			[]string{"WithRenewInterval(0s)", "must be positive"}},
		{"negative take interval", []shardlease.Option{shardlease.WithTakeInterval(-time.Millisecond)},
			[]string{"WithTakeInterval(-1ms)", "must be positive"}},
		{"zero shard sync", []shardlease.Option{shardlease.WithShardSyncInterval(0)},
			[]string{"WithShardSyncInterval(0s)", "must be positive"}},
		{"negative idle poll", []shardlease.Option{shardlease.WithIdlePollInterval(-time.Second)},
			[]string{"WithIdlePollInterval(-1s)", "must be positive"}},
		{"zero checkpoint interval", []shardlease.Option{shardlease.WithCheckpointInterval(0)},
			[]string{"WithCheckpointInterval(0s)", "must be positive"}},
		{"zero shutdown timeout", []shardlease.Option{shardlease.WithShutdownTimeout(0)},
			[]string{"WithShutdownTimeout(0s)", "must be positive"}},
		{"renew equals lease", []shardlease.Option{shardlease.WithLeaseDuration(5 * time.Second), shardlease.WithRenewInterval(5 * time.Second)},
			[]string{"WithRenewInterval(5s) must be shorter than the lease duration 5s", "a third of it is usual"}},
		{"renew longer than lease", []shardlease.Option{shardlease.WithLeaseDuration(5 * time.Second), shardlease.WithRenewInterval(time.Minute)},
			[]string{"WithRenewInterval(1m0s) must be shorter than the lease duration 5s"}},
		{"checkpoint interval above renew", []shardlease.Option{shardlease.WithRenewInterval(time.Second), shardlease.WithCheckpointInterval(2 * time.Second)},
			[]string{"WithCheckpointInterval(2s) must not exceed the renew interval 1s"}},
		{"AT_TIMESTAMP without timestamp", []shardlease.Option{shardlease.WithInitialPosition(shardlease.AtTimestamp)},
			[]string{"AT_TIMESTAMP needs a timestamp", "use WithStartTimestamp(t)"}},
		{"zero start timestamp", []shardlease.Option{shardlease.WithStartTimestamp(time.Time{})},
			[]string{"AT_TIMESTAMP needs a timestamp", "use WithStartTimestamp(t)"}},
		{"unknown initial position", []shardlease.Option{shardlease.WithInitialPosition("EARLIEST")},
			[]string{`initial position "EARLIEST"`, "TRIM_HORIZON, LATEST, AT_TIMESTAMP"}},
		{"batch size zero", []shardlease.Option{shardlease.WithBatchSize(0)},
			[]string{"WithBatchSize(0)", "1 to 10000"}},
		{"batch size too big", []shardlease.Option{shardlease.WithBatchSize(10001)},
			[]string{"WithBatchSize(10001)", "1 to 10000"}},
		{"negative max leases", []shardlease.Option{shardlease.WithMaxLeases(-1)},
			[]string{"WithMaxLeases(-1)", "or 0 for none"}},
		{"negative steals", []shardlease.Option{shardlease.WithMaxStealsPerTake(-2)},
			[]string{"WithMaxStealsPerTake(-2)", "use 0 (never steal) or more"}},
		{"backoff reversed", []shardlease.Option{shardlease.WithRetryBackoff(time.Second, time.Millisecond)},
			[]string{"WithRetryBackoff(1s, 1ms)", "the first not above the second"}},
		{"nil wall clock", []shardlease.Option{shardlease.WithWallClock(nil)},
			[]string{"WithWallClock(nil)", "time.Now"}},
		{"owner id too long", []shardlease.Option{shardlease.WithOwnerID(strings.Repeat("o", 257))},
			[]string{"owner id is 257 bytes long", "use at most 239"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", nopHandler, tc.opts...)
			requireMessage(t, err, shardlease.ErrInvalidConfig, append([]string{"stream orders"}, tc.parts...)...)
		})
	}
	// A good timestamp is accepted.
	_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", nopHandler, shardlease.WithStartTimestamp(ts))
	require.NoError(t, err)
}

func TestBadInputLeaseKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		target error
		parts  []string
	}{
		{"orders", shardlease.ErrInvalidName, []string{`lease key "orders" has no ':'`, `a lease key is "stream:shard"`}},
		{"", shardlease.ErrInvalidName, []string{`lease key "" has no ':'`}},
		{":shardId-000000000000", shardlease.ErrInvalidName, []string{`lease key ":shardId-000000000000"`, "stream is empty"}},
		{"orders:", shardlease.ErrInvalidName, []string{`lease key "orders:"`, "shard id is empty"}},
		{"orders:shard:1", shardlease.ErrInvalidName, []string{`shard id "shard:1" has ':'`, "use only"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := shardlease.ParseLeaseKey(tc.in)
			requireMessage(t, err, tc.target, tc.parts...)
		})
	}
}

// A consumer whose store's table is missing stops at once with an error
// naming the stream and the table and saying how to create it.
func TestBadInputRunWithMissingTable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator")
	}
	client, _ := dynamoTable(t)
	store, err := shardlease.NewDynamoStore(client, "no-such-leases")
	require.NoError(t, err)
	c, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), store, "orders", nopHandler)
	require.NoError(t, err)
	err = c.Run(t.Context())
	requireMessage(t, err, shardlease.ErrTableNotFound, "stream orders", "table no-such-leases",
		`shardlease.CreateTable(ctx, client, "no-such-leases")`, "shardlease create-table -table no-such-leases")
}

// A worker row whose counter is not a number makes listing the stream fail
// with an error that names the table and the row and says to delete it;
// other streams' listings are not affected.
func TestBadInputCorruptWorkerRow(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator")
	}
	client, table := dynamoTable(t)
	ctx := t.Context()
	store, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	_, err = store.Create(ctx, shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}, nil)
	require.NoError(t, err)
	_, err = store.Heartbeat(ctx, "orders", "w2")
	require.NoError(t, err)
	_, err = store.Heartbeat(ctx, "orders2", "w1")
	require.NoError(t, err)
	_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"lease_key":     &types.AttributeValueMemberS{Value: "orders:@w1"},
		"lease_owner":   &types.AttributeValueMemberS{Value: "w1"},
		"lease_counter": &types.AttributeValueMemberS{Value: "seven"},
	}})
	require.NoError(t, err)

	parts := []string{"table " + table, `worker row "orders:@w1"`, "attribute lease_counter is a string, want a number", "delete the row"}
	_, _, err = store.ListWithWorkers(ctx, "orders")
	requireMessage(t, err, shardlease.ErrCorruptLease, parts...)
	_, err = store.List(ctx, "orders")
	requireMessage(t, err, shardlease.ErrCorruptLease, parts...)
	// The worker itself, heartbeating, is told the same.
	_, err = store.Heartbeat(ctx, "orders", "w1")
	requireMessage(t, err, shardlease.ErrCorruptLease, "table "+table, `worker row "orders:@w1"`, "delete the row")

	leases, workers, err := store.ListWithWorkers(ctx, "orders2")
	require.NoError(t, err, "another stream's listing does not read the row")
	assert.Empty(t, leases)
	assert.Equal(t, []shardlease.Worker{{Stream: "orders2", Owner: "w1", Counter: 1}}, workers)

	// A worker row with no owner after the '@' is corrupt too.
	_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"lease_key":     &types.AttributeValueMemberS{Value: "orders2:@"},
		"lease_counter": &types.AttributeValueMemberN{Value: "3"},
	}})
	require.NoError(t, err)
	_, _, err = store.ListWithWorkers(ctx, "orders2")
	requireMessage(t, err, shardlease.ErrCorruptLease, "table "+table, `worker row "orders2:@"`, "delete the row")

	// Deleting the row, as the message says, mends the listing.
	_, err = client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"lease_key": &types.AttributeValueMemberS{Value: "orders:@w1"},
	}})
	require.NoError(t, err)
	leases, workers, err = store.ListWithWorkers(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, leases, 1)
	assert.Equal(t, []shardlease.Worker{{Stream: "orders", Owner: "w2", Counter: 1}}, workers)
}
