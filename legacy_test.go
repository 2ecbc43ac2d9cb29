package shardlease_test

import (
	"context"
	"encoding/json"
	"errors"
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
	_, err := client.CreateTable(t.Context(), &dynamodb.CreateTableInput{
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

	// A row without a checkpoint adopts the bare row's: the acquire write,
	// one read of the bare row and the conditional copy.
	before = client.Calls()
	l, err := s.Acquire(ctx, key("orders", 0), "new-1", 0)
	require.NoError(t, err)
	require.Equal(t, int64(3), client.Calls()-before)
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

	// Once adopted, a row with a checkpoint costs nothing extra.
	before = client.Calls()
	l, err = s.Acquire(ctx, key("orders", 0), "new-2", l.Counter)
	require.NoError(t, err)
	require.Equal(t, int64(1), client.Calls()-before)
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
	for n, calls := range map[int]int64{2: 2, 4: 1} {
		before = client.Calls()
		l, err := s.Acquire(ctx, key("orders", n), "new-1", 0)
		require.NoError(t, err)
		require.Equal(t, calls, client.Calls()-before, "shard %d", n)
		require.Empty(t, l.Checkpoint)
		require.Equal(t, int64(1), l.Counter)
	}

	// List stays a plain listing of "stream:shard" rows.
	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, rows, 5)
}

func TestLegacyAdoptOnGet(t *testing.T) {
	ctx := t.Context()
	raw, table := dynamoTable(t)
	loadRows(t, raw, table, "bare.json")
	s := newStore(t, raw, table, shardlease.WithLegacyStream("orders"))
	createRows(t, s, key("orders", 0))

	got, err := s.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, bareSeq0, got.Checkpoint)
	require.Equal(t, int64(0), got.Counter, "Get is not the holder: its copy does not bump the counter")
	require.False(t, got.Held())

	l, err := s.Acquire(ctx, key("orders", 0), "new-1", 0)
	require.NoError(t, err)
	require.Equal(t, bareSeq0, l.Checkpoint)
	require.Equal(t, int64(1), l.Counter)

	_, err = s.Get(ctx, key("orders", 9))
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func TestLegacyRaceOwnerCheckpointsBeforeGetCopies(t *testing.T) {
	ctx := t.Context()
	raw, table := dynamoTable(t)
	holder := newStore(t, raw, table, shardlease.WithLegacyStream("orders"))
	createRows(t, holder, key("orders", 0))
	// The holder took the shard before the bare rows were there, so it
	// holds it without a checkpoint.
	held, err := holder.Acquire(ctx, key("orders", 0), "holder", 0)
	require.NoError(t, err)
	require.Empty(t, held.Checkpoint)
	loadRows(t, raw, table, "bare.json")
	bare0 := rawItem(t, raw, table, "shardId-000000000000")

	hook := &hookDynamo{DynamoDBAPI: raw, bareKey: "shardId-000000000000"}
	hook.afterBareRead = func() {
		held, err = holder.Checkpoint(ctx, held, newerSeq, -1, time.Now().Add(time.Minute))
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
	require.Equal(t, int64(1), client.Calls()-before, "no read of the bare row for another stream")
	got, err := s.Get(ctx, key("payments", 0))
	require.NoError(t, err)
	require.Empty(t, got.Checkpoint)
	rows, err := s.List(ctx, "payments")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Empty(t, rows[0].Checkpoint)
}

func TestLegacyUnattributedRow(t *testing.T) {
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

func results(rep *shardlease.ImportReport) map[string]shardlease.ImportResult {
	m := map[string]shardlease.ImportResult{}
	for _, r := range rep.Results {
		m[r.Shard] = r
	}
	return m
}

// requireIdempotent runs the import again and requires that it skips every
// row and writes nothing.
func requireIdempotent(t *testing.T, raw shardlease.DynamoDBAPI, format shardlease.ImportFormat, from, table, stream string) {
	t.Helper()
	client := &countingDynamo{DynamoDBAPI: raw}
	s := newStore(t, client, table)
	before, err := s.List(t.Context(), stream)
	require.NoError(t, err)
	rep, err := shardlease.Import(t.Context(), raw, format, from, s, stream)
	require.NoError(t, err)
	require.Zero(t, rep.Copied)
	require.Zero(t, client.Writes(), "a second run writes nothing")
	after, err := s.List(t.Context(), stream)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

func TestImportKinsumer(t *testing.T) {
	ctx := t.Context()
	raw, table := dynamoTable(t)
	from := foreignTable(t, raw, "kinsumer-checkpoints", "Shard")
	loadRows(t, raw, from, "kinsumer.json")
	s := newStore(t, raw, table)
	// Shard 3 has progress in the lease table already: never overwritten.
	createRows(t, s, key("orders", 3))
	l, err := s.Acquire(ctx, key("orders", 3), "w", 0)
	require.NoError(t, err)
	l, err = s.Checkpoint(ctx, l, newerSeq, -1, time.Now())
	require.NoError(t, err)
	_, err = s.Release(ctx, l)
	require.NoError(t, err)

	rep, err := shardlease.Import(ctx, raw, shardlease.ImportKinsumer, from, s, "orders")
	require.NoError(t, err)
	require.Equal(t, "orders", rep.Stream)
	require.Equal(t, from, rep.FromTable)
	require.Equal(t, table, rep.ToTable)
	require.Equal(t, 2, rep.Copied)
	require.Equal(t, 2, rep.Skipped)
	res := results(rep)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000000", Checkpoint: bareSeq0, Action: "copied",
		Reason: "created row orders:shardId-000000000000 with checkpoint " + bareSeq0 + " from table " + from}, res["shardId-000000000000"])
	require.Equal(t, "copied", res["shardId-000000000001"].Action)
	require.Equal(t, shardlease.ShardEnd, res["shardId-000000000001"].Checkpoint, "Finished means the shard was consumed to its end")
	require.Equal(t, "skipped", res["shardId-000000000002"].Action)
	require.Contains(t, res["shardId-000000000002"].Reason, "never consumed")
	require.Equal(t, "skipped", res["shardId-000000000003"].Action)
	require.Equal(t, "already has progress: row orders:shardId-000000000003 has checkpoint "+newerSeq+
		", newer than the imported 49590338271534858098956753784644642512218454689500889138", res["shardId-000000000003"].Reason)

	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, rows, 3)
	byShard := map[string]shardlease.Lease{}
	for _, r := range rows {
		byShard[r.Key.Shard] = r
	}
	require.Equal(t, shardlease.Lease{Key: key("orders", 0), Checkpoint: bareSeq0, SubSequence: -1}, byShard["shardId-000000000000"])
	require.Equal(t, shardlease.ShardEnd, byShard["shardId-000000000001"].Checkpoint)
	require.Equal(t, newerSeq, byShard["shardId-000000000003"].Checkpoint)

	// The imported rows are ordinary leases.
	l, err = s.Acquire(ctx, key("orders", 0), "w", 0)
	require.NoError(t, err)
	require.Equal(t, bareSeq0, l.Checkpoint)
	_, err = s.Release(ctx, l)
	require.NoError(t, err)

	requireIdempotent(t, raw, shardlease.ImportKinsumer, from, table, "orders")
}

func TestImportKCL(t *testing.T) {
	ctx := t.Context()
	raw, table := dynamoTable(t)
	from := foreignTable(t, raw, "kcl-app", "leaseKey")
	loadRows(t, raw, from, "kcl.json")
	s := newStore(t, raw, table)
	// Shard 0's row exists without a checkpoint (shard sync created it).
	createRows(t, s, key("orders", 0))

	rep, err := shardlease.Import(ctx, raw, shardlease.ImportKCL, from, s, "orders")
	require.NoError(t, err)
	require.Equal(t, shardlease.ImportKCL, rep.Format)
	require.Equal(t, 3, rep.Copied)
	require.Equal(t, 2, rep.Skipped)
	res := results(rep)
	require.Equal(t, "copied", res["shardId-000000000000"].Action)
	require.Equal(t, "wrote checkpoint "+bareSeq0+" sub-sequence 0 from table "+from+" into row orders:shardId-000000000000, which had no checkpoint",
		res["shardId-000000000000"].Reason)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000001", Checkpoint: shardlease.ShardEnd, Action: "copied",
		Reason: "created row orders:shardId-000000000001 with checkpoint SHARD_END from table " + from}, res["shardId-000000000001"])
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000002", Checkpoint: "TRIM_HORIZON", Action: "skipped",
		Reason: "TRIM_HORIZON means no record was processed yet; the shard starts at the consumer's configured start position"}, res["shardId-000000000002"])
	require.Equal(t, "skipped", res["shardId-000000000003"].Action)
	require.Equal(t, "LATEST", res["shardId-000000000003"].Checkpoint)
	require.Equal(t, "copied", res["shardId-000000000004"].Action)

	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, rows, 3, "shards without progress get no row")
	require.Equal(t, shardlease.Lease{Key: key("orders", 0), Checkpoint: bareSeq0, SubSequence: 0}, rows[0])
	require.Equal(t, shardlease.Lease{Key: key("orders", 1), Checkpoint: shardlease.ShardEnd, SubSequence: -1}, rows[1])
	require.Equal(t, shardlease.Lease{Key: key("orders", 4), Checkpoint: "49590338271556158844155284407786178230366894039683039250",
		SubSequence: 3, Parents: []string{"shardId-000000000001"}}, rows[2])

	requireIdempotent(t, raw, shardlease.ImportKCL, from, table, "orders")
	rep, err = shardlease.Import(ctx, raw, shardlease.ImportKCL, from, s, "orders")
	require.NoError(t, err)
	require.Equal(t, "already has progress: row orders:shardId-000000000004 has checkpoint "+
		"49590338271556158844155284407786178230366894039683039250, the same as the imported one", results(rep)["shardId-000000000004"].Reason)
}

func TestImportKCLMultiStream(t *testing.T) {
	raw, table := dynamoTable(t)
	from := foreignTable(t, raw, "kcl-multi", "leaseKey")
	loadRows(t, raw, from, "kcl-multistream.json")
	s := newStore(t, raw, table)

	rep, err := shardlease.Import(t.Context(), raw, shardlease.ImportKCL, from, s, "orders")
	require.NoError(t, err)
	require.Len(t, rep.Results, 2, "rows of other streams are not reported")
	require.Equal(t, 1, rep.Copied)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000000", Checkpoint: "49500000000000000000000000000000000000000000000000000002", Action: "skipped",
		Reason: "lease of an older incarnation of stream orders (creation epoch 1500000000; the newest is 1600000000)"}, rep.Results[1])
	got, err := s.Get(t.Context(), key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, bareSeq0, got.Checkpoint)
	_, err = s.Get(t.Context(), key("payments", 0))
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func TestImportTableErrors(t *testing.T) {
	ctx := t.Context()
	raw, table := dynamoTable(t)
	s := newStore(t, raw, table)

	missing := emulator.UniqueName("no-such-table")
	_, err := shardlease.Import(ctx, raw, shardlease.ImportKinsumer, missing, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrTableNotFound)
	require.ErrorContains(t, err, "table "+missing+": ")
	require.ErrorContains(t, err, `import expected a kinsumer table with the string partition key "Shard" here`)

	kcl := foreignTable(t, raw, "kcl-app", "leaseKey")
	_, err = shardlease.Import(ctx, raw, shardlease.ImportKinsumer, kcl, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrBadTableSchema)
	require.EqualError(t, err, "table "+kcl+`: shardlease: lease table has the wrong key schema: it has key HASH leaseKey (S), but a kinsumer table has exactly one key, the string partition key "Shard"; check the table name and the format`)

	_, err = shardlease.Import(ctx, raw, shardlease.ImportKCL, table, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	_, err = shardlease.Import(ctx, raw, "flink", kcl, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	_, err = shardlease.Import(ctx, raw, shardlease.ImportKCL, kcl, s, "bad:stream")
	require.ErrorIs(t, err, shardlease.ErrInvalidName)

	// The destination table is checked too.
	gone := newStore(t, raw, emulator.UniqueName("no-lease-table"))
	_, err = shardlease.Import(ctx, raw, shardlease.ImportKCL, kcl, gone, "orders")
	require.ErrorIs(t, err, shardlease.ErrTableNotFound)
	require.True(t, errors.Is(err, shardlease.ErrTableNotFound))
}
