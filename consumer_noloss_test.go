package shardlease_test

import (
	"context"
	"math/big"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// fakeKinesisWorlds runs fn with the in-process Kinesis fake, against
// MemoryStore under synctest ("fake") and against DynamoStore on dynalite in
// real time ("dynamo"). It serves the steps kinesalite cannot take the way
// Kinesis does: kinesalite keeps closed shards for at least 24 hours (no
// shard ever ages out in a test), and it stamps a stream's creation time in
// whole seconds, so a stream deleted and created again within a second is
// indistinguishable from the old one.
func fakeKinesisWorlds(t *testing.T, shards int32, opts func(world string) []shardleasetest.KinesisOption, fn func(t *testing.T, w *world)) {
	if opts == nil {
		opts = func(string) []shardleasetest.KinesisOption { return nil }
	}
	t.Run("fake", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := shardleasetest.NewKinesis(opts("fake")...)
			w := newFakeWorld(t, fake, shards)
			fn(t, w)
		})
	})
	t.Run("dynamo", func(t *testing.T) {
		w := newDynamoWorld(t, "dynamo", "orders")
		fake := shardleasetest.NewKinesis(opts("dynamo")...)
		w.kin = fake
		_, err := fake.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(shards)})
		require.NoError(t, err)
		fn(t, w)
	})
}

// deleteRow deletes a lease row without any condition, as an operator
// editing the table by hand does.
func (w *world) deleteRow(t *testing.T, key shardlease.LeaseKey) {
	t.Helper()
	switch s := w.store.(type) {
	case *shardlease.MemoryStore:
		s.Delete(key)
	case *shardlease.DynamoStore:
		_, err := w.dynamo.DynamoDBAPI.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: aws.String(s.Table()),
			Key:       map[string]dtypes.AttributeValue{"lease_key": &dtypes.AttributeValueMemberS{Value: key.String()}},
		})
		require.NoError(t, err)
	default:
		t.Fatalf("cannot delete rows of %T", s)
	}
}

// fullStore is what the built-in stores implement.
type fullStore interface {
	shardlease.LeaseStore
	shardlease.WorkerStore
	shardlease.LineageStore
	shardlease.IdentityStore
}

// onCreate calls after once a row was made by shard sync.
type onCreate struct {
	fullStore
	after func(key shardlease.LeaseKey, parents []string)
}

func (s *onCreate) Create(ctx context.Context, k shardlease.LeaseKey, parents []string) (bool, error) {
	created, err := s.fullStore.Create(ctx, k, parents)
	if created {
		s.after(k, parents)
	}
	return created, err
}

func (s *onCreate) CreateAt(ctx context.Context, k shardlease.LeaseKey, parents []string, start shardlease.Start) (bool, error) {
	created, err := s.fullStore.CreateAt(ctx, k, parents, start)
	if created {
		s.after(k, parents)
	}
	return created, err
}

// split splits shard in the middle of its hash key range and returns the
// ids of its two children.
func (w *world) split(t *testing.T, shard string) []string {
	t.Helper()
	s := w.shardsOf(t)[shard]
	lo, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	retryBusy(t, w, "split", func() error {
		_, err := w.kin.SplitShard(context.Background(), &kinesis.SplitShardInput{
			StreamName: aws.String(w.stream), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(mid.String()),
		})
		return err
	})
	var children []string
	waitFor(t, 10*time.Second, "the children listed", func() bool {
		children = children[:0]
		for id, c := range w.shardsOf(t) {
			if aws.ToString(c.ParentShardId) == shard {
				children = append(children, id)
			}
		}
		return len(children) == 2
	})
	slices.Sort(children)
	return children
}

// merge merges two adjacent open shards and returns the child's id.
func (w *world) merge(t *testing.T, a, b string) string {
	t.Helper()
	retryBusy(t, w, "merge", func() error {
		_, err := w.kin.MergeShards(context.Background(), &kinesis.MergeShardsInput{
			StreamName: aws.String(w.stream), ShardToMerge: aws.String(a), AdjacentShardToMerge: aws.String(b),
		})
		return err
	})
	var child string
	waitFor(t, 10*time.Second, "the merged child listed", func() bool {
		for id, c := range w.shardsOf(t) {
			if aws.ToString(c.ParentShardId) == a && aws.ToString(c.AdjacentParentShardId) == b {
				child = id
			}
		}
		return child != ""
	})
	return child
}

// Defect 2: a child whose parent row is gone (an operator deleted it) while
// Kinesis still lists the parent. Before, the child counted the parent as
// finished and started at the initial position: with Latest every record
// written to the children after the split was lost; with TrimHorizon the
// parent row was made again and read after the child.
func TestNoLossParentRowDeletedBeforeChildStarts(t *testing.T) {
	t.Parallel()
	for _, pos := range []shardlease.InitialPosition{shardlease.Latest, shardlease.TrimHorizon} {
		t.Run(string(pos), func(t *testing.T) {
			worlds(t, 2, func(t *testing.T, w *world) {
				p, h := &produced{}, newHandled()
				const parent = "shardId-000000000000"
				var once sync.Once
				store := &onCreate{fullStore: w.store.(fullStore), after: func(k shardlease.LeaseKey, parents []string) {
					if slices.Contains(parents, parent) {
						once.Do(func() { w.deleteRow(t, shardlease.LeaseKey{Stream: w.stream, Shard: parent}) })
					}
				}}
				kin := &positioned{KinesisAPI: w.kin, shards: map[string]bool{}}
				a := startWorker(t, w, kin, store, h.handler("a"), w.opts("a", shardlease.WithInitialPosition(pos))...)
				waitFor(t, 10*w.lease, "both shards read", func() bool {
					return len(a.c.Held()) == 2 && kin.has(a.c.Held())
				})
				const keys = 16
				w.put(t, p, 40, keys)
				w.split(t, parent)
				w.put(t, p, 100, keys)
				waitFor(t, 60*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
				require.NoError(t, a.stop(t))
				assert.Empty(t, h.lost(p))
				requireKeyOrder(t, p, h)
			})
		})
	}
}

// Defect 2, the rows' side: where a child starts is decided when its row is
// made and kept on the row.
func TestNoLossChildStartIsKeptOnItsRow(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithInitialPosition(shardlease.Latest))...)
		waitFor(t, 10*w.lease, "the shard taken", func() bool { return len(a.c.Held()) == 1 })
		children := w.split(t, "shardId-000000000000")
		waitFor(t, 60*w.lease, "the children's rows", func() bool {
			n := 0
			for _, l := range w.leases(t) {
				if slices.Contains(children, l.Key.Shard) {
					n++
				}
			}
			return n == 2
		})
		require.NoError(t, a.stop(t))
		for _, l := range w.leases(t) {
			switch {
			case slices.Contains(children, l.Key.Shard):
				assert.Equal(t, shardlease.TrimHorizon, l.Start.Position, "a child born after the first sync starts at its beginning: %s", l.Key.Shard)
			default:
				assert.Equal(t, shardlease.Latest, l.Start.Position, "the first sync starts at the initial position")
			}
		}
	})
}

// Defect 3: a consumer switched to WithRawAggregates after a checkpoint
// inside a KPL aggregate skipped the rest of the aggregate. In raw mode the
// aggregate is handed over again whole.
func TestNoLossRawAggregatesAfterCheckpointInsideAggregate(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 2, 1)
		ids := aggIDs("agg", 5)
		aggSeq := w.putAggregate(t, p, ids, "k")
		w.put(t, p, 2, 1)

		// The first worker de-aggregates and checkpoints agg-001, then stops.
		marked := make(chan struct{})
		var once sync.Once
		first := func(ctx context.Context, b *shardlease.Batch) error {
			for _, r := range b.Records {
				if string(r.Data) == "agg-001" {
					if err := b.Checkpoint(r); err != nil {
						return err
					}
					once.Do(func() { close(marked) })
				}
			}
			return nil
		}
		a := startWorker(t, w, w.kin, w.store, first, w.opts("a", shardlease.WithManualCheckpoints())...)
		<-marked
		require.NoError(t, a.stop(t))
		row := w.leases(t)[0]
		require.Equal(t, aggSeq, row.Checkpoint)
		require.Equal(t, int64(1), row.SubSequence)

		// The second worker reads raw aggregates.
		var mu sync.Mutex
		var seqs []string
		second := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range b.Records {
				seqs = append(seqs, r.SequenceNumber)
				assert.Equal(t, int64(-1), r.SubSequenceNumber, "raw records are whole")
			}
			return nil
		}
		b := startWorker(t, w, w.kin, w.store, second, w.opts("b", shardlease.WithRawAggregates())...)
		waitFor(t, 30*w.lease, "the records after the aggregate", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seqs) >= 2
		})
		require.NoError(t, b.stop(t))
		mu.Lock()
		defer mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		assert.Equal(t, []string{aggSeq, p.seq[p.ids[7]], p.seq[p.ids[8]]}, seqs, "the aggregate is handed over again whole, then the rest")
	})
}

// Defect 4: Latest on a fresh table after a recent split read the children
// of the closed shard from TRIM_HORIZON, handing over records written before
// the consumer started.
func TestNoLossLatestOnFreshTableAfterSplit(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		old := &produced{}
		w.put(t, old, 20, 8)
		children := w.split(t, "shardId-000000000000")
		w.put(t, old, 200, 8)

		h := newHandled()
		kin := &positioned{KinesisAPI: w.kin, shards: map[string]bool{}}
		a := startWorker(t, w, kin, w.store, h.handler("a"), w.opts("a", shardlease.WithInitialPosition(shardlease.Latest))...)
		waitFor(t, 30*w.lease, "the children read", func() bool { return kin.has(children) })
		assertOnlyNewFromChildren(t, w, h, a, old, children)
	})
}

// Defect 5, shard sync's side: rows made without parents (imported from
// another library, or of an earlier release) get the parents Kinesis lists
// while nobody has read them, so a child still waits for its parent.
func TestNoLossMissingParentsFilledIn(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p, h := &produced{}, newHandled()
		const keys = 8
		w.put(t, p, 60, keys)
		children := w.split(t, "shardId-000000000000")
		w.put(t, p, 60, keys)
		for id := range w.shardsOf(t) {
			_, err := w.store.Create(context.Background(), shardlease.LeaseKey{Stream: w.stream, Shard: id}, nil)
			require.NoError(t, err)
		}
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		waitFor(t, 60*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		for _, l := range w.leases(t) {
			if slices.Contains(children, l.Key.Shard) {
				assert.Equal(t, []string{"shardId-000000000000"}, l.Parents, "parents filled in on %s", l.Key.Shard)
			}
		}
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
	})
}

// Defect 1: a stream deleted and created again under the same name. Kinesis
// reuses shard ids, so the new stream's shards inherited the old rows'
// checkpoints and records were skipped. The consumer now refuses to start
// with an error saying what happened and what to do; after the operator's
// reset (shardlease adopt-stream) the new stream is read whole.
func TestNoLossRecreatedStreamRefused(t *testing.T) {
	t.Parallel()
	fakeKinesisWorlds(t, 1, nil, func(t *testing.T, w *world) {
		fake := w.kin.(*shardleasetest.Kinesis)
		before, h := &produced{}, newHandled()
		w.put(t, before, 30, 4)
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		waitFor(t, 30*w.lease, "the old stream read", func() bool { return h.distinct() == before.count() })
		require.NoError(t, a.stop(t))

		_, err := fake.DeleteStream(t.Context(), &kinesis.DeleteStreamInput{StreamName: aws.String(w.stream)})
		require.NoError(t, err)
		time.Sleep(time.Second) // a real deletion takes seconds; creation times differ
		_, err = fake.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		after, h2 := &produced{n: 1000}, newHandled()
		w.put(t, after, 20, 4)

		b := startWorker(t, w, w.kin, w.store, h2.handler("b"), w.opts("b")...)
		var runErr error
		select {
		case runErr = <-b.done:
			close(b.done)
		case <-time.After(10 * w.take):
			t.Fatalf("the consumer started on the rows of the deleted stream; handled %d of the new stream's %d records", h2.distinct(), after.count())
		}
		require.ErrorIs(t, runErr, shardlease.ErrStreamRecreated)
		var re *shardlease.StreamRecreatedError
		require.ErrorAs(t, runErr, &re)
		assert.Contains(t, runErr.Error(), "shardlease adopt-stream")
		if ds, ok := w.store.(*shardlease.DynamoStore); ok {
			assert.Contains(t, runErr.Error(), ds.Table())
		}
		assert.Zero(t, h2.distinct(), "nothing handled from the old checkpoints")

		// The operator's reset: delete the old rows, record the new stream.
		now, err := shardlease.DescribeIdentity(t.Context(), fake, w.stream)
		require.NoError(t, err)
		n, err := w.store.(shardlease.IdentityStore).ResetStream(t.Context(), now)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		c := startWorker(t, w, w.kin, w.store, h2.handler("c"), w.opts("c")...)
		waitFor(t, 30*w.lease, "the new stream read whole", func() bool { return len(h2.lost(after)) == 0 })
		require.NoError(t, c.stop(t))
	})
}

// countIterators counts GetShardIterator calls by shard.
type countIterators struct {
	shardlease.KinesisAPI
	mu    sync.Mutex
	calls map[string]int
}

func (k *countIterators) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	k.mu.Lock()
	k.calls[aws.ToString(in.ShardId)]++
	k.mu.Unlock()
	return k.KinesisAPI.GetShardIterator(ctx, in, o...)
}

func (k *countIterators) count(shard string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls[shard]
}

// Defect 1, the reader's side: a checkpoint Kinesis rejects (here a
// sequence number of another shard, as an edited row or a re-created stream
// leaves) was retried forever with a warning while the lease was renewed.
// It is now a counted error: the shard is released and not taken again
// until the next shard sync interval.
func TestNoLossRejectedCheckpointIsCounted(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		ctx := context.Background()
		key, other := checkpointOfAnotherShard(t, w)

		h := newHandled()
		kin := &countIterators{KinesisAPI: w.kin, calls: map[string]int{}}
		syncEvery := 20 * w.take
		rec := newRecorder()
		a := startWorker(t, w, kin, w.store, h.handler("a"), w.opts("a", shardlease.WithShardSyncInterval(syncEvery), shardlease.WithMeterProvider(rec))...)
		waitFor(t, 10*w.lease, "the checkpoint rejected", func() bool { return a.c.Stats().CheckpointsRejected >= 1 })
		waitFor(t, 10*w.lease, "the lease released", func() bool {
			row, err := w.store.Get(ctx, key)
			return err == nil && row.Owner == ""
		})
		calls := kin.count(key.Shard)
		// Several take rounds pass within half a shard sync interval; the
		// shard is not tried again during them.
		deadline := time.Now().Add(syncEvery / 2)
		for time.Now().Before(deadline) {
			time.Sleep(w.take)
		}
		assert.Equal(t, calls, kin.count(key.Shard), "no new attempt before the next shard sync interval")
		assert.LessOrEqual(t, a.c.Stats().CheckpointsRejected, int64(1))
		assert.Equal(t, a.c.Stats().CheckpointsRejected, rec.sum("shardlease.checkpoints.rejected", key.Shard), "the metric counts it too")
		row, err := w.store.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, other, row.Checkpoint, "the checkpoint is kept for the operator")
		require.NoError(t, a.stop(t))
	})
}

// checkpointOfAnotherShard writes records, then leaves shard 0's row free
// with a checkpoint that is a sequence number of shard 1 (as an edited row
// or a re-created stream leaves). It returns the row's key and that
// checkpoint.
func checkpointOfAnotherShard(t *testing.T, w *world) (shardlease.LeaseKey, string) {
	t.Helper()
	p := &produced{}
	w.put(t, p, 20, 8)
	var other string
	p.mu.Lock()
	for _, id := range p.byShard["shardId-000000000001"] {
		other = p.seq[id]
	}
	p.mu.Unlock()
	require.NotEmpty(t, other)
	ctx := context.Background()
	key := shardlease.LeaseKey{Stream: w.stream, Shard: "shardId-000000000000"}
	_, err := w.store.Create(ctx, key, nil)
	require.NoError(t, err)
	row, err := w.store.Get(ctx, key)
	require.NoError(t, err)
	l, err := w.store.Acquire(ctx, key, "operator", row.Counter)
	require.NoError(t, err)
	l, err = w.store.Checkpoint(ctx, l, other, -1, time.Now())
	require.NoError(t, err)
	_, err = w.store.Release(ctx, l)
	require.NoError(t, err)
	return key, other
}

// Cleanup: rows of finished shards are deleted once Kinesis no longer lists
// them and every child has a checkpoint of its own. After 100 split/merge
// cycles with shards aging out, the table holds only the open shards and the
// finished parents still needed, and nothing was lost.
func TestNoLossCleanupAfterSplitMergeCycles(t *testing.T) {
	t.Parallel()
	// A closed shard must still be listed when its readers get to it: a
	// child is read once its parents finished, after a shard sync (5T) and a
	// take round. With 5s in real time, that race was lost now and then
	// while the package's other tests ran beside this one (records of a
	// shard that aged out unread: "every record handled" timed out); 10s
	// leaves twice the room, and the cycles stay a third of it apart, so
	// the row bound below is the same.
	retention := map[string]time.Duration{"fake": time.Minute, "dynamo": 10 * time.Second}
	opts := func(world string) []shardleasetest.KinesisOption {
		return []shardleasetest.KinesisOption{shardleasetest.WithRetention(retention[world])}
	}
	fakeKinesisWorlds(t, 1, opts, func(t *testing.T, w *world) {
		cycles := 100
		if w.name != "fake" {
			cycles = 10 // real time: each cycle waits for the readers
		}
		retention := retention[w.name]
		p, h := &produced{}, newHandled()
		rec := newRecorder()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithMeterProvider(rec))...)
		const keys = 16
		open := "shardId-000000000000"
		maxRows := 0
		for range cycles {
			kids := w.split(t, open)
			w.put(t, p, 20, keys)
			open = w.merge(t, kids[0], kids[1])
			w.put(t, p, 20, keys)
			waitFor(t, 60*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
			// The next reshard comes a third of the retention later (a
			// stream resharded every 8 hours keeps closed shards 24 hours).
			time.Sleep(retention / 3)
			maxRows = max(maxRows, len(w.leases(t)))
		}
		// Wait for the last closed shards to age out and the next shard syncs.
		waitFor(t, retention+30*w.take, "only the open shard's row left", func() bool {
			ls := w.leases(t)
			return len(ls) == 1 && ls[0].Key.Shard == open
		})
		require.NoError(t, a.stop(t))
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
		deleted := a.c.Stats().FinishedRowsDeleted
		assert.Equal(t, deleted, rec.sum("shardlease.leases.cleaned", ""), "the metric counts every deletion")
		if w.name == "fake" {
			assert.Equal(t, int64(3*cycles), deleted, "every closed shard's row deleted once")
		} else {
			// A delete whose reply was lost, retried by the SDK, finds the
			// row gone and is not counted.
			assert.True(t, deleted > 0 && deleted <= int64(3*cycles), "%d deletions counted for %d closed shards", deleted, 3*cycles)
		}
		// Kinesis lists the shards closed within the retention (about three
		// cycles of three); rows of shards that aged out wait at most a shard
		// sync interval more.
		assert.LessOrEqual(t, maxRows, 3*5+1, "the table does not grow with the cycles")
		t.Logf("%d cycles, %d shards made; at most %d rows at the end of a cycle", cycles, 1+3*cycles, maxRows)
	})
}

// Cleanup by hand: an operator deletes the row of a finished shard that
// Kinesis still lists, after its children started. The row is not made
// again (its records are not read twice), and the children are still taken
// by the next worker.
func TestNoLossFinishedRowDeletedByHand(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p, h := &produced{}, newHandled()
		const parent = "shardId-000000000000"
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		w.put(t, p, 20, 8)
		children := w.split(t, parent)
		w.put(t, p, 40, 8)
		waitFor(t, 60*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		waitFor(t, 10*w.lease, "the children checkpointed", func() bool {
			n := 0
			for _, l := range w.leases(t) {
				if slices.Contains(children, l.Key.Shard) && l.Checkpoint != "" {
					n++
				}
			}
			return n == 2
		})
		require.NoError(t, a.stop(t))
		w.deleteRow(t, shardlease.LeaseKey{Stream: w.stream, Shard: parent})

		before := h.batches.Load()
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		w.put(t, p, 40, 8)
		waitFor(t, 60*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, b.stop(t))
		for _, l := range w.leases(t) {
			assert.NotEqual(t, parent, l.Key.Shard, "the finished row is not made again")
		}
		assert.Zero(t, h.duplicates(), "nothing read twice (%d batches after the restart)", h.batches.Load()-before)
		requireKeyOrder(t, p, h)
	})
}

// Defect 4 in the fan-out reading mode: subscriptions start where the rows
// say, so a consumer asking for the tip on a fresh table after a split gets
// no record written before it started.
func TestNoLossLatestOnFreshTableAfterSplitFanOut(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		old := &produced{}
		w.put(t, old, 20, 8)
		children := w.split(t, "shardId-000000000000")
		w.put(t, old, 200, 8)

		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a", shardlease.WithInitialPosition(shardlease.Latest))...)
		waitFor(t, 30*w.lease, "the children subscribed", func() bool {
			return w.subscriptions(children[0]) > 0 && w.subscriptions(children[1]) > 0
		})
		assertOnlyNewFromChildren(t, w.world, h, a, old, children)
	})
}

// assertOnlyNewFromChildren checks a consumer a that asked for the tip (Latest)
// on a fresh table after a split: it writes new records until both children
// hand some over, stops a, and asserts that none of old, the records
// written before a started, was handed over.
func assertOnlyNewFromChildren(t *testing.T, w *world, h *handled, a *worker, old *produced, children []string) {
	t.Helper()
	// A subscription at LATEST takes its position a moment after it is
	// asked for: write new records until both children hand some over.
	fresh := &produced{n: 1000}
	waitFor(t, 30*w.lease, "new records handled from both children", func() bool {
		w.put(t, fresh, 8, 8)
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.byShard[children[0]]) > 0 && len(h.byShard[children[1]]) > 0
	})
	require.NoError(t, a.stop(t))
	old.mu.Lock()
	defer old.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	reread := 0
	for _, id := range old.ids {
		if h.times[id] > 0 {
			reread++
		}
	}
	assert.Zero(t, reread, "records written before a consumer that asked for the tip started are not handed over")
}

// With manual checkpoints a shard's end waits for the records the handler
// accepted to be checkpointed, even when the closed shard's last batch is
// empty (the read after its last record): SHARD_END, which nothing reads
// past, is not written while an earlier batch's work is unfinished.
func TestNoLossManualCheckpointsBeforeShardEnd(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		var mu sync.Mutex
		var accepted []*shardlease.Batch
		h := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			accepted = append(accepted, b) // finished later, asynchronously
			return nil
		}
		ended := make(chan struct{})
		hooks := shardlease.ShardHooks{OnStop: func(ctx context.Context, s *shardlease.ShardStop) {
			if s.ShardID == shard0 && s.Reason == shardlease.StopShardEnded {
				close(ended)
			}
		}}
		wk := startWorker(t, w, w.kin, w.store, h, w.opts("a", shardlease.WithManualCheckpoints(), shardlease.WithShardHooks(hooks))...)
		p := &produced{}
		w.put(t, p, 3, 1)
		records := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, b := range accepted {
				n += len(b.Records)
			}
			return n
		}
		waitFor(t, 10*w.lease, "the records accepted", func() bool { return records() == 3 })
		w.split(t, shard0)
		<-ended
		checkpoint := func() string {
			for _, l := range w.leases(t) {
				if l.Key.Shard == shard0 {
					return l.Checkpoint
				}
			}
			return ""
		}
		// Two renewals, in which a recorded SHARD_END would be written.
		for deadline := time.Now().Add(2 * w.renew); time.Now().Before(deadline); time.Sleep(w.renew / 4) {
			require.NotEqual(t, shardlease.ShardEnd, checkpoint(), "SHARD_END written before the accepted records were checkpointed")
		}
		mu.Lock()
		last := accepted[len(accepted)-1]
		mu.Unlock()
		require.NotEmpty(t, last.Records)
		require.NoError(t, last.Checkpoint(last.Records[len(last.Records)-1]))
		waitFor(t, 10*w.lease, "SHARD_END once the work is checkpointed", func() bool { return checkpoint() == shardlease.ShardEnd })
		require.NoError(t, wk.stop(t))
	})
}
