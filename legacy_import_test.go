package shardlease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

func results(rep *shardlease.ImportReport) map[string]shardlease.ImportResult {
	m := map[string]shardlease.ImportResult{}
	for _, r := range rep.Results {
		m[r.Shard] = r
	}
	return m
}

// requireIdempotent runs the import again and requires that it skips every
// row and writes nothing.
func requireIdempotent(t *testing.T, raw shardlease.DynamoDBAPI, kin shardlease.KinesisAPI, format shardlease.ImportFormat, from, table, stream string) {
	t.Helper()
	client := &countingDynamo{DynamoDBAPI: raw}
	s := newStore(t, client, table)
	before, err := s.List(t.Context(), stream)
	require.NoError(t, err)
	rep, err := shardlease.Import(t.Context(), raw, kin, format, from, s, stream)
	require.NoError(t, err)
	require.Zero(t, rep.Copied)
	require.Zero(t, client.Writes(), "a second run writes nothing")
	after, err := s.List(t.Context(), stream)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// TestImportFormats: the public formats are the ones the decoders read, in
// the order errors and the command line list them.
func TestImportFormats(t *testing.T) {
	t.Parallel()
	require.Equal(t, []shardlease.ImportFormat{shardlease.ImportKinsumer, shardlease.ImportVMwareKCL, shardlease.ImportKCL}, shardlease.ImportFormats())
}

func TestImportKinsumer(t *testing.T) {
	t.Parallel()
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

	rep, err := shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKinsumer, from, s, "orders")
	require.NoError(t, err)
	require.Equal(t, "orders", rep.Stream)
	require.Equal(t, from, rep.FromTable)
	require.Equal(t, table, rep.ToTable)
	require.Equal(t, 2, rep.Copied)
	require.Equal(t, 2, rep.Skipped)
	res := results(rep)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000000", Checkpoint: bareSeq0, Action: "copied",
		Reason: "created row orders:shardId-000000000000 with checkpoint " + bareSeq0 + " from table " + from}, res["shardId-000000000000"])
	require.Equal(t, shardlease.ImportCopied, res["shardId-000000000001"].Action)
	require.Equal(t, shardlease.ShardEnd, res["shardId-000000000001"].Checkpoint, "Finished means the shard was consumed to its end")
	require.Equal(t, shardlease.ImportSkipped, res["shardId-000000000002"].Action)
	require.Equal(t, "no SequenceNumber: kinsumer never checkpointed the shard; a consumer starts it at its configured initial position (WithInitialPosition)", res["shardId-000000000002"].Reason)
	require.Equal(t, 1, rep.NotInSource)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000004", Action: shardlease.ImportNotInSource,
		Reason: "the source table has no row for this shard; a consumer reads it from its first record once its parent shardId-000000000001 is finished"}, res["shardId-000000000004"])
	require.Equal(t, shardlease.ImportSkipped, res["shardId-000000000003"].Action)
	require.Equal(t, "already has progress: row orders:shardId-000000000003 has checkpoint "+newerSeq+
		", newer than the imported 49590338271534858098956753784644642512218454689500889138", res["shardId-000000000003"].Reason)

	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, rows, 3)
	byShard := map[string]shardlease.Lease{}
	for _, r := range rows {
		byShard[r.Key.Shard] = r
	}
	require.Equal(t, shardlease.Lease{Key: key("orders", 0), Checkpoint: bareSeq0, SubSequence: -1}, shardlease.Plain(byShard["shardId-000000000000"]))
	require.Equal(t, shardlease.ShardEnd, byShard["shardId-000000000001"].Checkpoint)
	require.Equal(t, newerSeq, byShard["shardId-000000000003"].Checkpoint)

	// The imported rows are ordinary leases.
	l, err = s.Acquire(ctx, key("orders", 0), "w", 0)
	require.NoError(t, err)
	require.Equal(t, bareSeq0, l.Checkpoint)
	_, err = s.Release(ctx, l)
	require.NoError(t, err)

	requireIdempotent(t, raw, handMadeStream(), shardlease.ImportKinsumer, from, table, "orders")
}

func TestImportKCL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	from := foreignTable(t, raw, "kcl-app", "leaseKey")
	loadRows(t, raw, from, "kcl.json")
	s := newStore(t, raw, table)
	// Shard 0's row exists without a checkpoint (shard sync created it).
	createRows(t, s, key("orders", 0))

	rep, err := shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKCL, from, s, "orders")
	require.NoError(t, err)
	require.Equal(t, shardlease.ImportKCL, rep.Format)
	require.Equal(t, 3, rep.Copied)
	require.Equal(t, 2, rep.Skipped)
	res := results(rep)
	require.Equal(t, shardlease.ImportCopied, res["shardId-000000000000"].Action)
	require.Equal(t, "wrote checkpoint "+bareSeq0+" sub-sequence 0 from table "+from+" into row orders:shardId-000000000000, which had no checkpoint",
		res["shardId-000000000000"].Reason)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000001", Checkpoint: shardlease.ShardEnd, Action: "copied",
		Reason: "created row orders:shardId-000000000001 with checkpoint SHARD_END from table " + from}, res["shardId-000000000001"])
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000002", Checkpoint: "TRIM_HORIZON", Action: "skipped",
		Reason: "TRIM_HORIZON means no record was processed yet; a consumer starts it at its configured initial position (WithInitialPosition)"}, res["shardId-000000000002"])
	require.Equal(t, shardlease.ImportSkipped, res["shardId-000000000003"].Action)
	require.Equal(t, "LATEST", res["shardId-000000000003"].Checkpoint)
	require.Equal(t, shardlease.ImportCopied, res["shardId-000000000004"].Action)

	rows, err := s.List(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, rows, 3, "shards without progress get no row")
	require.Equal(t, shardlease.Lease{Key: key("orders", 0), Counter: 1, Checkpoint: bareSeq0, SubSequence: 0}, shardlease.Plain(rows[0]), "the write into an existing row bumps its counter")
	require.Equal(t, shardlease.Lease{Key: key("orders", 1), Checkpoint: shardlease.ShardEnd, SubSequence: -1}, shardlease.Plain(rows[1]))
	require.Equal(t, shardlease.Lease{Key: key("orders", 4), Checkpoint: "49590338271556158844155284407786178230366894039683039250",
		SubSequence: 3, Parents: []string{"shardId-000000000001"}}, shardlease.Plain(rows[2]))

	requireIdempotent(t, raw, handMadeStream(), shardlease.ImportKCL, from, table, "orders")
	rep, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKCL, from, s, "orders")
	require.NoError(t, err)
	require.Equal(t, "already has progress: row orders:shardId-000000000004 has checkpoint "+
		"49590338271556158844155284407786178230366894039683039250, the same as the imported one", results(rep)["shardId-000000000004"].Reason)
}

func TestImportKCLMultiStream(t *testing.T) {
	t.Parallel()
	raw, table := dynamoTable(t)
	from := foreignTable(t, raw, "kcl-multi", "leaseKey")
	loadRows(t, raw, from, "kcl-multistream.json")
	s := newStore(t, raw, table)

	rep, err := shardlease.Import(t.Context(), raw, handMadeStream(), shardlease.ImportKCL, from, s, "orders")
	require.NoError(t, err)
	require.Len(t, rep.Results, 6, "rows of other streams are not reported; the stream's other shards are, as not in the source")
	require.Equal(t, 1, rep.Copied)
	require.Equal(t, 4, rep.NotInSource)
	require.Equal(t, shardlease.ImportResult{Shard: "shardId-000000000000", Checkpoint: "49500000000000000000000000000000000000000000000000000002", Action: "skipped",
		Reason: "lease of an older incarnation of stream orders (creation epoch 1500000000; the newest is 1600000000)"}, rep.Results[1])
	got, err := s.Get(t.Context(), key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, bareSeq0, got.Checkpoint)
	_, err = s.Get(t.Context(), key("payments", 0))
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func TestImportTableErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	s := newStore(t, raw, table)

	missing := emulator.UniqueName("no-such-table")
	_, err := shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKinsumer, missing, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrTableNotFound)
	require.ErrorContains(t, err, "table "+missing+": ")
	require.ErrorContains(t, err, "shardlease: table "+missing+`: not found: import expected a kinsumer table with the string partition key "Shard" here; check the table name and region: `)
	require.NotContains(t, err.Error(), "lease table", "the other library's table is not a lease table")

	kcl := foreignTable(t, raw, "kcl-app", "leaseKey")
	_, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKinsumer, kcl, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrBadTableSchema)
	require.EqualError(t, err, "shardlease: import: table "+kcl+` is not a kinsumer table: its key is HASH leaseKey (S), where a kinsumer table has exactly one key, the string partition key "Shard"; `+
		`it looks like a kcl table: import it with format "kcl"; the formats are kinsumer (key Shard), vmware-go-kcl-v2 (key ShardID), kcl (key leaseKey)`)

	_, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKCL, table, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	_, err = shardlease.Import(ctx, raw, handMadeStream(), "flink", kcl, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	_, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKCL, kcl, s, "bad:stream")
	require.ErrorIs(t, err, shardlease.ErrInvalidName)

	// The destination table is checked too.
	gone := newStore(t, raw, emulator.UniqueName("no-lease-table"))
	_, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKCL, kcl, gone, "orders")
	require.ErrorIs(t, err, shardlease.ErrTableNotFound)
	require.True(t, errors.Is(err, shardlease.ErrTableNotFound))
}

// TestNoLossImportFenced: Import and the legacy adoption in Get are fenced
// like every other write. Neither writes into a row a worker holds (the
// worker reads the shard from its own start position, and a checkpoint
// slipped in behind it would be overwritten or mixed with its own), and a
// write into a free row bumps the counter.
func TestNoLossImportFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw, table := dynamoTable(t)
	from := foreignTable(t, raw, "kinsumer-checkpoints", "Shard")
	loadRows(t, raw, from, "kinsumer.json")
	s := newStore(t, raw, table)
	createRows(t, s, key("orders", 0), key("orders", 1))
	held, err := s.Acquire(ctx, key("orders", 0), "live", 0)
	require.NoError(t, err)
	require.Empty(t, held.Checkpoint)
	before := rawItem(t, raw, table, "orders:shardId-000000000000")

	_, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKinsumer, from, s, "orders")
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld)
	require.ErrorContains(t, err, `held by "live"`)
	require.Equal(t, before, rawItem(t, raw, table, "orders:shardId-000000000000"), "a held row is not written")
	held, err = s.Renew(ctx, held, time.Now().Add(time.Minute))
	require.NoError(t, err, "the holder keeps its lease")

	// Released, the row is imported with a write that bumps the counter.
	held, err = s.Release(ctx, held)
	require.NoError(t, err)
	_, err = shardlease.Import(ctx, raw, handMadeStream(), shardlease.ImportKinsumer, from, s, "orders")
	require.NoError(t, err)
	got, err := s.Get(ctx, key("orders", 0))
	require.NoError(t, err)
	require.Equal(t, bareSeq0, got.Checkpoint)
	require.Equal(t, held.Counter+1, got.Counter, "the import's write bumps the counter")
	got, err = s.Get(ctx, key("orders", 1))
	require.NoError(t, err)
	require.Equal(t, shardlease.ShardEnd, got.Checkpoint)
	require.Equal(t, int64(1), got.Counter, "the import's write bumps the counter")

	// Get's adoption of a bare row: never into a held row, and bumping the
	// counter of a free one.
	createRows(t, s, key("payments", 3))
	held3, err := s.Acquire(ctx, key("payments", 3), "live", 0)
	require.NoError(t, err)
	loadRows(t, raw, table, "bare.json")
	before3 := rawItem(t, raw, table, "payments:shardId-000000000003")
	legacy := newStore(t, raw, table, shardlease.WithLegacyStream("payments"))
	got, err = legacy.Get(ctx, key("payments", 3))
	require.NoError(t, err)
	require.Empty(t, got.Checkpoint, "Get does not adopt into a held row")
	require.Equal(t, before3, rawItem(t, raw, table, "payments:shardId-000000000003"))
	held3, err = s.Renew(ctx, held3, time.Now().Add(time.Minute))
	require.NoError(t, err, "the holder keeps its lease")
	held3, err = s.Release(ctx, held3)
	require.NoError(t, err)
	got, err = legacy.Get(ctx, key("payments", 3))
	require.NoError(t, err)
	require.Equal(t, bareSeq3, got.Checkpoint)
	require.Equal(t, held3.Counter+1, got.Counter, "Get's copy into a free row bumps the counter")
	require.False(t, got.Held())
}
