package shardlease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// Sequence numbers used by the rows in testdata/legacy.
const (
	bareSeq0 = "49590338271490256608559692538361571095921575989136588802"
	bareSeq3 = "49590338271512557353758223161503106794070015339318738994"
	newerSeq = "49590338271600000000000000000000000000000000000000000000"
)

// attributeValue decodes one value in DynamoDB's JSON attribute-value form,
// e.g. {"S": "x"}.
func attributeValue(raw json.RawMessage) (types.AttributeValue, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("attribute value %s has %d type keys, want 1", raw, len(m))
	}
	for typ, v := range m {
		switch typ {
		case "S":
			var s string
			err := json.Unmarshal(v, &s)
			return &types.AttributeValueMemberS{Value: s}, err
		case "N":
			var s string
			err := json.Unmarshal(v, &s)
			return &types.AttributeValueMemberN{Value: s}, err
		case "SS":
			var ss []string
			err := json.Unmarshal(v, &ss)
			return &types.AttributeValueMemberSS{Value: ss}, err
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "BOOL":
			var b bool
			err := json.Unmarshal(v, &b)
			return &types.AttributeValueMemberBOOL{Value: b}, err
		case "M":
			item, err := decodeItem(v)
			return &types.AttributeValueMemberM{Value: item}, err
		}
		return nil, fmt.Errorf("attribute type %q is not supported by the test loader", typ)
	}
	panic("unreachable")
}

func decodeItem(raw json.RawMessage) (map[string]types.AttributeValue, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	item := make(map[string]types.AttributeValue, len(m))
	for name, v := range m {
		av, err := attributeValue(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		item[name] = av
	}
	return item, nil
}

// loadRows puts every row of testdata/legacy/<file> into table.
func loadRows(t *testing.T, client shardlease.DynamoDBAPI, table, file string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "legacy", file))
	require.NoError(t, err)
	var rows []json.RawMessage
	require.NoError(t, json.Unmarshal(b, &rows))
	for i, raw := range rows {
		item, err := decodeItem(raw)
		require.NoError(t, err, "%s row %d", file, i)
		_, err = client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err, "%s row %d", file, i)
	}
}

// foreignTable creates a table with a single string partition key, as the
// kinsumer and KCL tables have, and waits until it is active.
func foreignTable(t *testing.T, client shardlease.DynamoDBAPI, prefix, key string) string {
	t.Helper()
	name := emulator.UniqueName(prefix)
	_, err := client.(*dynamodb.Client).CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
	require.NoError(t, waiter.Wait(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute))
	return name
}

// rawItem reads a row as stored.
func rawItem(t *testing.T, client shardlease.DynamoDBAPI, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	require.NoError(t, err)
	return out.Item
}

// hookDynamo runs afterBareRead once, right after the store's GetItem of
// the bare row bareKey returns: between the read and the copy.
type hookDynamo struct {
	shardlease.DynamoDBAPI
	bareKey       string
	afterBareRead func()
	once          sync.Once
}

func (h *hookDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := h.DynamoDBAPI.GetItem(ctx, in, o...)
	if k, ok := in.Key["lease_key"].(*types.AttributeValueMemberS); ok && k.Value == h.bareKey {
		h.once.Do(h.afterBareRead)
	}
	return out, err
}

func newStore(t *testing.T, client shardlease.DynamoDBAPI, table string, opts ...shardlease.StoreOption) *shardlease.DynamoStore {
	t.Helper()
	s, err := shardlease.NewDynamoStore(client, table, opts...)
	require.NoError(t, err)
	return s
}

func key(stream string, n int) shardlease.LeaseKey {
	return shardlease.LeaseKey{Stream: stream, Shard: fmt.Sprintf("shardId-%012d", n)}
}

func createRows(t *testing.T, s shardlease.LeaseStore, keys ...shardlease.LeaseKey) {
	t.Helper()
	for _, k := range keys {
		_, err := s.Create(t.Context(), k, nil)
		require.NoError(t, err)
	}
}

func TestLegacyAdoptOnAcquire(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	bare0 := rawItem(t, raw, table, "shardId-000000000000")
	client := &countingDynamo{DynamoDBAPI: raw}
	s := newStore(t, client, table, shardlease.WithLegacyStream("orders"))
	createRows(t, s, key("orders", 0), key("orders", 1), key("orders", 2), key("orders", 3), key("orders", 4))

	// Which shards have bare rows is read once, by CheckTable (Run calls it):
	// one keys-only Scan page here.
	before := client.Calls()
	require.NoError(t, s.CheckTable(ctx))
	require.Equal(t, int64(1), client.Calls()-before)

	// A row without a checkpoint adopts the bare row's: the fence floor
	// reservation, a read of the identity row (the floor has no epoch yet:
	// no worker recorded the stream's identity), the acquire write, one read
	// of the bare row and the conditional copy.
	before = client.Calls()
	l, err := s.Acquire(ctx, key("orders", 0), "new-1", 0)
	require.NoError(t, err)
	require.Equal(t, int64(5), client.Calls()-before)
	require.Equal(t, bareSeq0, l.Checkpoint)
	require.Equal(t, int64(-1), l.SubSequence)
	require.Equal(t, "new-1", l.Owner)
	require.Equal(t, int64(2), l.Counter, "the copy is a write and bumps the counter")
	got, err := s.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, l, got)
	require.Equal(t, bare0, rawItem(t, raw, table, "shardId-000000000000"), "the bare row is never modified")

	// The returned lease is the handle: fencing holds.
	l, err = s.Renew(ctx, l, time.Now().Add(time.Minute))
	require.NoError(t, err)
	l, err = s.Release(ctx, l)
	require.NoError(t, err)

	// Once adopted, a row with a checkpoint costs nothing extra: the
	// reservation, the identity read and the acquire write.
	before = client.Calls()
	l, err = s.Acquire(ctx, key("orders", 0), "new-2", l.Counter)
	require.NoError(t, err)
	require.Equal(t, int64(3), client.Calls()-before)
	require.Equal(t, bareSeq0, l.Checkpoint)

	// ShardEnd is adopted as is; a sub-sequence is carried.
	l1, err := s.Acquire(ctx, key("orders", 1), "new-1", 0)
	require.NoError(t, err)
	require.Equal(t, shardlease.ShardEnd, l1.Checkpoint)
	l3, err := s.Acquire(ctx, key("orders", 3), "new-1", 0)
	require.NoError(t, err)
	require.Equal(t, bareSeq3, l3.Checkpoint)
	require.Equal(t, int64(4), l3.SubSequence)

	// A bare row without a checkpoint: the read finds nothing. No bare row:
	// no read at all. Either way the lease is handed out as acquired.
	for n, calls := range map[int]int64{2: 4, 4: 3} {
		before = client.Calls()
		l, err := s.Acquire(ctx, key("orders", n), "new-1", 0)
		require.NoError(t, err)
		require.Equal(t, calls, client.Calls()-before, "shard %d", n)
		require.Empty(t, l.Checkpoint)
		require.Positive(t, l.Counter)
	}

	// List stays a plain listing of "stream:shard" rows.
	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, rows, 5)
}

func TestLegacyAdoptOnGet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	s := newStore(t, raw, table, shardlease.WithLegacyStream("orders"))
	createRows(t, s, key("orders", 0))

	got, err := s.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, bareSeq0, got.Checkpoint)
	require.Equal(t, int64(1), got.Counter, "Get's copy into a free row is fenced and bumps the counter")
	require.False(t, got.Held())

	l, err := s.Acquire(ctx, key("orders", 0), "new-1", 1)
	require.NoError(t, err)
	require.Equal(t, bareSeq0, l.Checkpoint)
	require.Equal(t, int64(2), l.Counter)

	_, err = s.Get(ctx, key("orders", 9))
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func TestLegacyRaceOwnerCheckpointsBeforeGetCopies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	bare0 := rawItem(t, raw, table, "shardId-000000000000")
	holder := newStore(t, raw, table, shardlease.WithLegacyStream("orders"))
	createRows(t, holder, key("orders", 0))

	// Between Get's read of the bare row and its copy, a worker takes the
	// free row and saves progress.
	var held shardlease.Lease
	hook := &hookDynamo{DynamoDBAPI: raw, bareKey: "shardId-000000000000"}
	hook.afterBareRead = func() {
		l, err := holder.Acquire(ctx, key("orders", 0), "holder", 0)
		require.NoError(t, err)
		held, err = holder.Checkpoint(ctx, l, newerSeq, -1, time.Now().Add(time.Minute))
		require.NoError(t, err)
	}
	reader := newStore(t, hook, table, shardlease.WithLegacyStream("orders"))
	got, err := reader.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, newerSeq, got.Checkpoint, "the owner's newer checkpoint wins")
	require.Equal(t, "holder", got.Owner)

	again, err := holder.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, newerSeq, again.Checkpoint)
	require.Equal(t, bare0, rawItem(t, raw, table, "shardId-000000000000"), "the bare row is never modified")
	_, err = holder.Renew(ctx, held, time.Now().Add(time.Minute))
	require.NoError(t, err, "the holder keeps its lease")
}

func TestLegacyRaceOwnerCheckpointsBeforeAcquireCopies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	bare0 := rawItem(t, raw, table, "shardId-000000000000")
	other := newStore(t, raw, table, shardlease.WithLegacyStream("orders"))
	createRows(t, other, key("orders", 0))

	// Between the new holder's read of the bare row and its copy, another
	// owner takes the lease over (at the counter the first one left) and
	// saves progress.
	hook := &hookDynamo{DynamoDBAPI: raw, bareKey: "shardId-000000000000"}
	hook.afterBareRead = func() {
		l, err := other.Acquire(ctx, key("orders", 0), "other", 1)
		require.NoError(t, err)
		require.Equal(t, bareSeq0, l.Checkpoint)
		_, err = other.Checkpoint(ctx, l, newerSeq, -1, time.Now().Add(time.Minute))
		require.NoError(t, err)
	}
	s := newStore(t, hook, table, shardlease.WithLegacyStream("orders"))
	_, err := s.Acquire(ctx, key("orders", 0), "first", 0)
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld)

	got, err := other.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, newerSeq, got.Checkpoint, "the newer own-row checkpoint wins")
	require.Equal(t, "other", got.Owner)
	require.Equal(t, bare0, rawItem(t, raw, table, "shardId-000000000000"), "the bare row is never modified")
}

func TestLegacyOtherStreamIgnoresBareRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	client := &countingDynamo{DynamoDBAPI: raw}
	s := newStore(t, client, table, shardlease.WithLegacyStream("orders"))
	createRows(t, s, key("payments", 0))

	before := client.Calls()
	l, err := s.Acquire(ctx, key("payments", 0), "new-1", 0)
	require.NoError(t, err)
	require.Empty(t, l.Checkpoint)
	require.Equal(t, int64(3), client.Calls()-before, "no read of the bare row for another stream: the reservation, the identity read, the acquire")
	got, err := s.Get(ctx, key("payments", 0))
	require.NoError(t, err)
	require.Empty(t, got.Checkpoint)
	rows, err := s.List(ctx, "payments")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Empty(t, rows[0].Checkpoint)
}

func TestLegacyUnattributedRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	s := newStore(t, raw, table)
	createRows(t, s, key("orders", 0), key("orders", 2))

	_, err := s.Acquire(ctx, key("orders", 0), "new-1", 0)
	require.ErrorIs(t, err, shardlease.ErrLegacyRow)
	var lerr *shardlease.UnattributedLegacyRowError
	require.ErrorAs(t, err, &lerr)
	require.Equal(t, shardlease.UnattributedLegacyRowError{Table: table, Shard: "shardId-000000000000", Stream: "orders"}, *lerr)
	require.Equal(t, "shardlease: table "+table+": shard shardId-000000000000 of stream orders is not read: "+
		`the table holds a checkpoint row keyed by the bare shard id "shardId-000000000000", written by an earlier release, `+
		`and no stream was named for such rows; if the checkpoint belongs to stream orders, create the store with shardlease.WithLegacyStream("orders"), `+
		`otherwise delete the row with lease_key "shardId-000000000000" from table `+table, err.Error())

	// The lease was released again, the own row was not given a checkpoint
	// and Get refuses the same way.
	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.False(t, rows[0].Held(), "the refused lease is not left held")
	require.Empty(t, rows[0].Checkpoint)
	_, err = s.Get(ctx, key("orders", 0))
	require.ErrorIs(t, err, shardlease.ErrLegacyRow)
	require.ErrorAs(t, err, &lerr)

	// A bare row without a checkpoint is no reason to refuse.
	l, err := s.Acquire(ctx, key("orders", 2), "new-1", 0)
	require.NoError(t, err)
	require.Empty(t, l.Checkpoint)

	// Deleting the bare row (one of the two ways out) lets the shard be read.
	_, err = raw.(*dynamodb.Client).DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(table),
		Key:       map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: "shardId-000000000000"}},
	})
	require.NoError(t, err)
	l, err = s.Acquire(ctx, key("orders", 0), "new-1", rows[0].Counter)
	require.NoError(t, err)
	require.Empty(t, l.Checkpoint)
}

func TestLegacyCorruptBareRow(t *testing.T) {
	t.Parallel()
	raw, table := dynamoTable(t)
	_, err := raw.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"lease_key": &types.AttributeValueMemberS{Value: "shardId-000000000000"}, "checkpoint": &types.AttributeValueMemberS{Value: "TRIM_HORIZON"},
	}})
	require.NoError(t, err)
	s := newStore(t, raw, table, shardlease.WithLegacyStream("orders"))
	createRows(t, s, key("orders", 0))
	_, err = s.Acquire(t.Context(), key("orders", 0), "new-1", 0)
	require.ErrorIs(t, err, shardlease.ErrCorruptLease)
	require.ErrorContains(t, err, `legacy row "shardId-000000000000"`)
	got, err := newStore(t, raw, table, shardlease.WithLegacyStream("payments")).Get(t.Context(), key("orders", 0))
	require.NoError(t, err)
	require.False(t, got.Held(), "the lease is released when the store cannot tell where to start")
}
