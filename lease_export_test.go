package shardlease_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// freshStore returns an empty store of the world's kind: a MemoryStore, or
// a DynamoStore on a new table of the emulator.
func freshStore(t *testing.T, w *world) shardlease.LeaseStore {
	t.Helper()
	if w.dynamo == nil {
		return shardlease.NewMemoryStore()
	}
	client, table := dynamoTable(t)
	store, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	return store
}

// throughJSON writes cps as JSON and reads it back.
func throughJSON(t *testing.T, cps *shardlease.Checkpoints) *shardlease.Checkpoints {
	t.Helper()
	b, err := json.Marshal(cps)
	require.NoError(t, err)
	back, err := shardlease.ReadCheckpoints(bytes.NewReader(b))
	require.NoError(t, err)
	return back
}

// TestExportRoundTripResumesInAFreshTable: a stream's checkpoints exported,
// written as JSON and imported into a fresh table let a consumer on that
// table resume where the old one stopped: every later record handled once,
// none before it again.
func TestExportRoundTripResumesInAFreshTable(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 30, 8)
		readAll(t, w, p, "a")
		cps, err := shardlease.Export(t.Context(), w.store, w.stream)
		require.NoError(t, err)
		require.Len(t, cps.Shards, 2)

		fresh := freshStore(t, w)
		rep, err := shardlease.ImportCheckpoints(t.Context(), w.kin, throughJSON(t, cps), fresh)
		require.NoError(t, err)
		assert.Equal(t, 2, rep.Copied)
		assert.Equal(t, shardlease.ImportShardleaseJSON, rep.Format)
		for _, r := range rep.Results {
			assert.Contains(t, r.Reason, "created row", r.Shard)
		}
		again, err := shardlease.ImportCheckpoints(t.Context(), w.kin, cps, fresh)
		require.NoError(t, err)
		assert.Zero(t, again.Copied, "a second import changes nothing")

		w.put(t, p, 30, 8)
		later := slices.Clone(p.ids[30:])
		moved := *w
		moved.store = fresh
		h := readAgain(t, &moved, "b", len(later))
		requireExactly(t, p, h, later)
	})
}

// TestExportFormat: the document names its format, version, stream, table
// and identity, and per shard the checkpoint, sub-sequence, parents and
// start; ReadCheckpoints reads it back as it was and refuses documents it
// cannot trust.
func TestExportFormat(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := shardlease.NewMemoryStore()
		id := shardlease.StreamIdentity{Stream: "orders", ARN: "arn:aws:kinesis:us-east-1:123456789012:stream/orders", Created: time.UnixMilli(1_700_000_000_000)}
		_, _, err := store.RecordStreamIdentity(ctx, id)
		require.NoError(t, err)
		at := time.UnixMilli(1_700_000_100_000)
		k0 := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		k1 := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000001"}
		_, err = store.Create(ctx, k0, nil)
		require.NoError(t, err)
		_, err = store.CreateAt(ctx, k1, []string{k0.Shard}, shardlease.Start{Position: shardlease.AtTimestamp, Timestamp: at})
		require.NoError(t, err)
		held, err := store.Acquire(ctx, k0, "a", 0)
		require.NoError(t, err)
		held, err = store.Checkpoint(ctx, held, "49590338271490256608559692538361571095921575989136588898", 4, time.Now())
		require.NoError(t, err)

		cps, err := shardlease.Export(ctx, store, "orders")
		require.NoError(t, err)
		b, err := json.MarshalIndent(cps, "", "  ")
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		assert.Equal(t, "shardlease-checkpoints", doc["format"])
		assert.EqualValues(t, 1, doc["version"])
		assert.Equal(t, "orders", doc["stream"])
		assert.Equal(t, id.ARN, doc["stream_arn"])
		assert.NotContains(t, string(b), `"a"`, "owners are not exported")
		shards := doc["shards"].([]any)
		require.Len(t, shards, 2)
		assert.Equal(t, map[string]any{"shard": k0.Shard, "checkpoint": held.Checkpoint, "sub_sequence": 4.0}, shards[0])
		assert.Equal(t, map[string]any{"shard": k1.Shard, "sub_sequence": -1.0, "parents": []any{k0.Shard},
			"start": "AT_TIMESTAMP", "start_time": at.UTC().Format(time.RFC3339)}, shards[1])

		back, err := shardlease.ReadCheckpoints(bytes.NewReader(b))
		require.NoError(t, err)
		assert.True(t, id.Created.Equal(back.StreamCreated))
		assert.True(t, at.Equal(back.Shards[1].StartTime))
		assert.Equal(t, cps.Shards[0], back.Shards[0])

		noSub, err := shardlease.ReadCheckpoints(strings.NewReader(`{"format":"shardlease-checkpoints","version":1,"stream":"orders","shards":[{"shard":"shardId-000000000000","checkpoint":"12"}]}`))
		require.NoError(t, err)
		assert.Equal(t, int64(-1), noSub.Shards[0].SubSequence, "no sub-sequence is a whole record")

		for doc, want := range map[string]string{
			`[1, 2]`: "not a shardlease export",
			`{"format":"kcl","version":1,"stream":"orders"}`:                                                                                                 `format is "kcl"`,
			`{"format":"shardlease-checkpoints","version":2,"stream":"orders"}`:                                                                              "version 2",
			`{"format":"shardlease-checkpoints","version":1,"stream":"a b"}`:                                                                                 "stream",
			`{"format":"shardlease-checkpoints","version":1,"stream":"orders","shards":[{"shard":"shardId-000000000000","checkpoint":"x1"}]}`:                "shard \"shardId-000000000000\"",
			`{"format":"shardlease-checkpoints","version":1,"stream":"orders","shards":[{"shard":"shardId-000000000000","sub_sequence":3}]}`:                 "sub-sequence 3 without a checkpoint",
			`{"format":"shardlease-checkpoints","version":1,"stream":"orders","shards":[{"shard":"shardId-000000000000"},{"shard":"shardId-000000000000"}]}`: "listed twice",
			`{"format":"shardlease-checkpoints","version":1,"stream":"orders","shards":[{"shard":"shardId-000000000000","start":"AT_TIMESTAMP"}]}`:           "no timestamp",
		} {
			_, err := shardlease.ReadCheckpoints(strings.NewReader(doc))
			require.Error(t, err, doc)
			assert.Contains(t, err.Error(), want, doc)
		}
	})
}

// TestExportImportBackToAnEarlierState: an import never overwrites
// progress unless told to; with WithImportOverwrite it puts the stream
// back to the exported state, and a consumer reads again exactly the
// records after it.
func TestExportImportBackToAnEarlierState(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 20, 8)
		readAll(t, w, p, "a")
		saved, err := shardlease.Export(t.Context(), w.store, w.stream)
		require.NoError(t, err)
		w.put(t, p, 20, 8)
		later := slices.Clone(p.ids[20:])
		readAgain(t, w, "b", len(later))
		moved := rowsOf(t, w)

		rep, err := shardlease.ImportCheckpoints(t.Context(), w.kin, saved, w.store)
		require.NoError(t, err)
		assert.Zero(t, rep.Copied)
		for _, r := range rep.Results {
			assert.Contains(t, r.Reason, "already has progress", r.Shard)
			assert.Contains(t, r.Reason, "import with overwrite", r.Shard)
		}
		assert.Equal(t, moved, rowsOf(t, w), "progress is kept")

		rep, err = shardlease.ImportCheckpoints(t.Context(), w.kin, saved, w.store, shardlease.WithImportOverwrite())
		require.NoError(t, err)
		assert.Equal(t, 2, rep.Copied)
		for _, s := range saved.Shards {
			assert.Equal(t, s.Checkpoint, rowsOf(t, w)[s.Shard].Checkpoint, "back to the exported checkpoint of %s", s.Shard)
		}
		h := readAgain(t, w, "c", len(later))
		requireExactly(t, p, h, later)
	})
}

// TestExportImportChecksTheStream: shards the stream does not list, an
// export of another incarnation of the stream, and an overwrite of leases
// workers hold are refused before anything is written.
func TestExportImportChecksTheStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, shardleasetest.NewKinesis(), 1)
		ctx := t.Context()
		p := &produced{}
		w.put(t, p, 5, 2)
		readAll(t, w, p, "a")
		saved, err := shardlease.Export(ctx, w.store, w.stream)
		require.NoError(t, err)
		require.NotEmpty(t, saved.StreamARN, "the consumer recorded the stream's identity")
		before := rowsOf(t, w)

		unknown := *saved
		unknown.Shards = append(slices.Clone(saved.Shards), shardlease.ShardCheckpoint{Shard: "shardId-000000000009", Checkpoint: "12", SubSequence: -1})
		_, err = shardlease.ImportCheckpoints(ctx, w.kin, &unknown, shardlease.NewMemoryStore())
		require.ErrorIs(t, err, shardlease.ErrImportWrongStream)
		assert.Contains(t, err.Error(), "shardId-000000000009")

		other := *saved
		other.StreamCreated = saved.StreamCreated.Add(-time.Hour)
		_, err = shardlease.ImportCheckpoints(ctx, w.kin, &other, w.store, shardlease.WithImportOverwrite())
		require.ErrorIs(t, err, shardlease.ErrStreamRecreated)
		assert.Contains(t, err.Error(), "nothing was written")

		h := newHandled()
		startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitFor(t, time.Minute, "the lease held", func() bool { return len(heldBy(w.leases(t))["b"]) == 1 })
		stale := *saved
		stale.Shards = []shardlease.ShardCheckpoint{{Shard: saved.Shards[0].Shard, SubSequence: -1}}
		_, err = shardlease.ImportCheckpoints(ctx, w.kin, &stale, w.store, shardlease.WithImportOverwrite())
		require.ErrorIs(t, err, shardlease.ErrLeaseHeld)
		assert.Contains(t, err.Error(), "stop every consumer of stream "+w.stream)
		assert.NotRegexp(t, `table [,:]`, err.Error(), "a store without a table name is not named as an empty one")
		assert.Equal(t, before[saved.Shards[0].Shard].Checkpoint, rowsOf(t, w)[saved.Shards[0].Shard].Checkpoint, "nothing was written")
	})
}

// startlessStore is a LeaseStore with no optional capability: it keeps no
// shard starts.
type startlessStore struct{ shardlease.LeaseStore }

// An exported start imported into a store that keeps none is not reported
// as kept.
func TestExportImportIntoAStoreWithoutStarts(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 3, 1)
		readAll(t, w, p, "a")
		cps, err := shardlease.Export(t.Context(), w.store, w.stream)
		require.NoError(t, err)
		require.Len(t, cps.Shards, 1)
		cps.Shards[0].Checkpoint, cps.Shards[0].Start = "", shardlease.Latest
		rep, err := shardlease.ImportCheckpoints(t.Context(), w.kin, cps, startlessStore{shardlease.NewMemoryStore()})
		require.NoError(t, err)
		require.Len(t, rep.Results, 1)
		assert.Equal(t, shardlease.ImportCopied, rep.Results[0].Action)
		assert.Contains(t, rep.Results[0].Reason, "keeps no start")
		assert.NotContains(t, rep.Results[0].Reason, "with start LATEST")
	})
}
