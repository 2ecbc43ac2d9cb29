package shardlease_test

import (
	"context"
	"errors"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// shardStatus returns the status of shard in c's Status, and whether c
// holds it.
func shardStatus(c *shardlease.Consumer, shard string) (shardlease.ShardStatus, bool) {
	for _, s := range c.Status().Shards {
		if s.Shard == shard {
			return s, true
		}
	}
	return shardlease.ShardStatus{}, false
}

const shard0 = "shardId-000000000000"

// While a handler keeps failing, the shard's checkpoint age grows (in
// Status, in shardlease.checkpoint.age and on the row its renewals write);
// once the handler succeeds and the shard is caught up and idle, it is 0.
func TestLagCheckpointAgeGrowsWhileStuckAndResets(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		var failing atomic.Bool
		failing.Store(true)
		h := func(ctx context.Context, b *shardlease.Batch) error {
			if failing.Load() {
				return errors.New("downstream is down")
			}
			return nil
		}
		g := newRecorder()
		wk := startWorker(t, w, w.kin, w.store, h, w.opts("lagging", shardlease.WithMeterProvider(g))...)
		waitFor(t, 30*w.lease, "the lease", func() bool { return len(wk.c.Held()) == 1 })
		w.put(t, &produced{}, 5, 1)

		waitFor(t, 30*w.lease, "a stuck shard", func() bool {
			s, ok := shardStatus(wk.c, shard0)
			return ok && s.Stuck != nil && s.CheckpointAge > w.renew
		})
		first, _ := shardStatus(wk.c, shard0)
		waitFor(t, 30*w.lease, "the age to grow", func() bool {
			s, _ := shardStatus(wk.c, shard0)
			return s.CheckpointAge >= first.CheckpointAge+w.renew
		})
		assert.Greater(t, g.collect(t)["shardlease.checkpoint.age"][shard0], first.CheckpointAge.Seconds())
		// The renewals carry it to the row, where list and the coordinator read it.
		waitFor(t, 30*w.lease, "the row's checkpoint age", func() bool {
			ls := w.leases(t)
			return len(ls) == 1 && ls[0].Lag != nil && ls[0].Lag.CheckpointAge >= first.CheckpointAge
		})

		failing.Store(false)
		waitFor(t, 30*w.lease, "the shard to move and be caught up", func() bool {
			s, ok := shardStatus(wk.c, shard0)
			return ok && s.Stuck == nil && s.CheckpointAge == 0 && s.BehindLatest == 0 && s.Read
		})
		assert.Zero(t, g.collect(t)["shardlease.checkpoint.age"][shard0])
		waitFor(t, 30*w.lease, "the row's checkpoint age back to 0", func() bool {
			ls := w.leases(t)
			return len(ls) == 1 && ls[0].Lag != nil && ls[0].Lag.CheckpointAge == 0
		})
	})
}

// With sessions and packed checkpoints, a shard stuck after a checkpoint
// carries its checkpoint age to listings in its holder's keeps: the age
// listed grows while the lease row itself is not written (its counter and
// checkpoint stand still), and falls to 0 once the handler succeeds.
func TestLagCheckpointAgeOfAStuckPackedLeaseRidesTheKeeps(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		var failing atomic.Bool
		h := func(ctx context.Context, b *shardlease.Batch) error {
			if failing.Load() {
				return errors.New("downstream is down")
			}
			return nil
		}
		wk := startWorker(t, w, w.kin, w.store, h, w.opts("lagging", shardlease.WithSessions(true))...)
		waitFor(t, 30*w.lease, "the lease", func() bool { return len(wk.c.Held()) == 1 })
		w.put(t, &produced{}, 3, 1)
		waitFor(t, 30*w.lease, "a checkpoint on the row", func() bool {
			l, err := w.store.Get(t.Context(), shardlease.LeaseKey{Stream: w.stream, Shard: shard0})
			return err == nil && l.Checkpoint != ""
		})
		failing.Store(true)
		w.put(t, &produced{}, 2, 1)
		waitFor(t, 30*w.lease, "a stuck shard", func() bool {
			s, ok := shardStatus(wk.c, shard0)
			return ok && s.Stuck != nil && s.CheckpointAge > w.renew
		})
		row, err := w.store.Get(t.Context(), shardlease.LeaseKey{Stream: w.stream, Shard: shard0})
		require.NoError(t, err)
		first, _ := shardStatus(wk.c, shard0)
		waitFor(t, 30*w.lease, "the listed checkpoint age to grow", func() bool {
			ls := w.leases(t)
			return len(ls) == 1 && ls[0].Lag != nil && ls[0].Lag.CheckpointAge >= first.CheckpointAge+w.renew
		})
		now, err := w.store.Get(t.Context(), shardlease.LeaseKey{Stream: w.stream, Shard: shard0})
		require.NoError(t, err)
		assert.Equal(t, row.Counter, now.Counter, "the lease row was not written for the lag")
		assert.Equal(t, row.Checkpoint, now.Checkpoint)
		assert.Equal(t, row.Lag, now.Lag, "the lease row's own lag stands still: the keeps carry it")

		failing.Store(false)
		waitFor(t, 30*w.lease, "the listed checkpoint age back to 0", func() bool {
			ls := w.leases(t)
			return len(ls) == 1 && ls[0].Lag != nil && ls[0].Lag.CheckpointAge == 0
		})
	})
}

// A caught-up shard with nothing to read has checkpoint age 0, however long
// it stays idle.
func TestLagIdleCaughtUpIsZero(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		g := newRecorder()
		wk := startWorker(t, w, w.kin, w.store, newHandled().handler("idle"), w.opts("idle", shardlease.WithMeterProvider(g))...)
		waitFor(t, 30*w.lease, "both leases read", func() bool {
			s := wk.c.Status()
			return len(s.Shards) == 2 && s.Shards[0].Read && s.Shards[1].Read
		})
		time.Sleep(3 * w.lease) // idle time passing is the point of the test
		for _, s := range wk.c.Status().Shards {
			assert.Zero(t, s.CheckpointAge, s.Shard)
			assert.Zero(t, s.BehindLatest, s.Shard)
		}
		got := g.collect(t)
		assert.Len(t, got["shardlease.checkpoint.age"], 2)
		for shard, v := range got["shardlease.checkpoint.age"] {
			assert.Zero(t, v, shard)
		}
		assert.Contains(t, got["shardlease.behind_latest.max"], "")
	})
}

// A paced producer writes rate records a second to every shard of a fake
// stream until stopped.
type pacedProducer struct {
	stop chan struct{}
	done chan struct{}
}

func startProducer(t *testing.T, w *world, shards, rate int) *pacedProducer {
	p := &pacedProducer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			for i := range shards {
				_, err := w.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(w.stream),
					PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(hashKeyOf(i, shards)), Data: []byte("x")})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *pacedProducer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// hashKeyOf is a hash key inside shard i of n evenly split shards:
// 2^128 / n × i + 1.
func hashKeyOf(i, n int) string {
	k := new(big.Int).Lsh(big.NewInt(1), 128)
	k.Div(k, big.NewInt(int64(n)))
	k.Mul(k, big.NewInt(int64(i)))
	return k.Add(k, big.NewInt(1)).String()
}

// Handlers slower than the stream make the shards fall behind: Status and
// shardlease.behind_latest.max give the largest behind-latest, and the
// coordinator's shardlease.workers.wanted asks for more workers than the one
// there is. With fast handlers it asks for the workers there are. Only the
// in-process stream reports behind-latest (kinesalite reports 0).
func TestLagBehindMaxAndWorkersWanted(t *testing.T) {
	t.Parallel()
	fakeKinesisWorlds(t, 4, nil, func(t *testing.T, w *world) {
		var slow atomic.Bool
		slow.Store(true)
		h := func(ctx context.Context, b *shardlease.Batch) error {
			if slow.Load() {
				// 10 records take a second: half the stream's 20 a second.
				time.Sleep(time.Duration(len(b.Records)) * 100 * time.Millisecond)
			}
			return nil
		}
		g := newRecorder()
		wk := startWorker(t, w, w.kin, w.store, h, w.opts("alone", shardlease.WithMeterProvider(g), shardlease.WithBatchSize(10))...)
		waitFor(t, 30*w.lease, "the four leases", func() bool { return len(wk.c.Held()) == 4 })
		p := startProducer(t, w, 4, 20)

		waitFor(t, 60*w.lease, "workers wanted above 1", func() bool { return wk.c.Status().WorkersWanted >= 2 })
		s := wk.c.Status()
		assert.True(t, s.Coordinating)
		assert.Equal(t, "coordinator", s.Role)
		var largest time.Duration
		for _, sh := range s.Shards {
			largest = max(largest, sh.BehindLatest)
		}
		assert.Equal(t, largest, s.MaxBehindLatest)
		assert.Greater(t, s.MaxBehindLatest, w.lease)
		got := g.collect(t)
		assert.GreaterOrEqual(t, got["shardlease.workers.wanted"][""], 2.0)
		assert.Greater(t, got["shardlease.behind_latest.max"][""], float64(w.lease.Milliseconds()))

		// Fast handlers catch up: the fleet keeps up, and one worker is
		// what it wants.
		slow.Store(false)
		waitFor(t, 60*w.lease, "caught up", func() bool { return wk.c.Status().MaxBehindLatest == 0 })
		waitFor(t, 60*w.lease, "one worker wanted", func() bool { return wk.c.Status().WorkersWanted == 1 })
		p.halt()
	})
}
