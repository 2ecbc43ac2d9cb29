package shardlease_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/internal/kpl"
)

// putAggregate writes one KPL aggregate of the given user records, with the
// first record's partition key as the Kinesis partition key (as the KPL
// does), and records the ids in p as one write each.
func (w *world) putAggregate(t *testing.T, p *produced, ids []string, key string) string {
	t.Helper()
	users := make([]kpl.UserRecord, len(ids))
	for i, id := range ids {
		users[i] = kpl.UserRecord{PartitionKey: key, Data: []byte(id)}
	}
	return w.putRaw(t, p, kpl.Aggregate(users), key, ids)
}

func (w *world) putRaw(t *testing.T, p *produced, data []byte, key string, ids []string) string {
	t.Helper()
	out, err := w.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName: aws.String(w.stream), PartitionKey: aws.String(key), Data: data,
	})
	require.NoError(t, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byShard == nil {
		p.byShard, p.byKey, p.seq = map[string][]string{}, map[string][]string{}, map[string]string{}
	}
	for _, id := range ids {
		p.ids = append(p.ids, id)
		p.byKey[key] = append(p.byKey[key], id)
		p.byShard[aws.ToString(out.ShardId)] = append(p.byShard[aws.ToString(out.ShardId)], id)
		p.seq[id] = aws.ToString(out.SequenceNumber)
	}
	return aws.ToString(out.SequenceNumber)
}

func aggIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return ids
}

func TestAggregatedRecordsAreDeaggregated(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 3, 1)                             // plain
		w.putAggregate(t, p, aggIDs("agg1", 10), "k") // aggregated
		w.put(t, p, 2, 1)
		w.putAggregate(t, p, aggIDs("agg2", 1), "k")
		w.putAggregate(t, p, aggIDs("agg3", 25), "k")

		var mu sync.Mutex
		var subs []int64
		h := newHandled()
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			for _, r := range b.Records {
				subs = append(subs, r.SubSequenceNumber)
			}
			mu.Unlock()
			h.add("a", b)
			return nil
		}
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		waitFor(t, 30*w.lease, "every user record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		assert.Zero(t, h.duplicates())
		h.mu.Lock()
		assert.Equal(t, p.ids, h.byShard["shardId-000000000000"], "user records in order")
		h.mu.Unlock()
		mu.Lock()
		assert.Equal(t, []int64{-1, -1, -1}, subs[:3], "plain records have no sub-sequence")
		assert.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, subs[3:13])
		mu.Unlock()
		assert.Equal(t, int64(0), a.c.Stats().CorruptAggregates)
	})
}

func TestAggregatedCheckpointMidAggregateResumesAfterIt(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 2, 1)
		ids := aggIDs("agg", 10)
		w.putAggregate(t, p, ids, "k")
		w.put(t, p, 2, 1)

		// The first worker processes user records one by one, checkpoints at
		// agg-004 explicitly, flushes, and then crashes.
		sw := &crash.Switch{}
		crashed := make(chan struct{})
		var once sync.Once
		first := newHandled()
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			for _, r := range b.Records {
				first.add("a", &shardlease.Batch{ShardID: b.ShardID, Records: []shardlease.Record{r}})
				if string(r.Data) == "agg-004" {
					if err := b.Checkpoint(r); err != nil {
						return err
					}
					if err := b.Flush(ctx); err != nil {
						return err
					}
					once.Do(func() { sw.Crash(); close(crashed) })
					return fmt.Errorf("crashed")
				}
			}
			return nil
		}
		a := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), handler, w.opts("a", shardlease.WithManualCheckpoints())...)
		<-crashed
		require.NoError(t, a.stop(t))
		row := w.leases(t)[0]
		assert.Equal(t, p.seq["agg-004"], row.Checkpoint)
		assert.Equal(t, int64(4), row.SubSequence, "the checkpoint keeps the sub-sequence")

		// The next worker waits out the dead lease and resumes after agg-004.
		second := newHandled()
		b := startWorker(t, w, w.kin, w.store, second.handler("b"), w.opts("b")...)
		waitFor(t, 30*w.lease, "the rest handled", func() bool { return second.distinct() == 7 })
		require.NoError(t, b.stop(t))
		second.mu.Lock()
		defer second.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		want := append(append([]string{}, ids[5:]...), p.ids[12:]...)
		assert.Equal(t, want, second.byShard["shardId-000000000000"], "resumed after the last processed user record")
	})
}

func TestAggregatedCorruptAreHandedOverRaw(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		good := kpl.Aggregate([]kpl.UserRecord{{PartitionKey: "k", Data: []byte("x")}, {PartitionKey: "k", Data: []byte("y")}})
		badMD5 := append([]byte(nil), good...)
		badMD5[len(badMD5)-1] ^= 0xff
		truncated := append([]byte(nil), good[:len(good)-20]...)
		truncated = fixMD5(truncated)
		badIndex := corruptIndex(t)

		w.putRaw(t, p, badMD5, "k", []string{string(badMD5)})
		w.putRaw(t, p, truncated, "k", []string{string(truncated)})
		w.putRaw(t, p, badIndex, "k", []string{string(badIndex)})
		w.putAggregate(t, p, []string{"ok-0", "ok-1"}, "k")

		h := newHandled()
		var raw atomic.Int64
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			for _, r := range b.Records {
				if kpl.IsAggregated(r.Data) {
					raw.Add(1)
					assert.Equal(t, int64(-1), r.SubSequenceNumber)
				}
			}
			h.add("a", b)
			return nil
		}
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		assert.Equal(t, int64(3), raw.Load(), "three corrupt aggregates handed over as they are")
		assert.Equal(t, int64(3), a.c.Stats().CorruptAggregates)
		assert.Empty(t, h.lost(p))
	})
}

func TestAggregatedRawOption(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		data := kpl.Aggregate([]kpl.UserRecord{{PartitionKey: "k", Data: []byte("x")}, {PartitionKey: "k", Data: []byte("y")}})
		w.putRaw(t, p, data, "k", []string{string(data)})
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithRawAggregates())...)
		waitFor(t, 30*w.lease, "the aggregate handed over whole", func() bool { return h.distinct() == 1 })
		require.NoError(t, a.stop(t))
		assert.Empty(t, h.lost(p))
	})
}

// fixMD5 treats data as magic prefix plus message and appends the message's
// MD5, so that only the message itself is wrong.
func fixMD5(data []byte) []byte {
	sum := md5.Sum(data[len(kpl.MagicPrefix):])
	return append(data, sum[:]...)
}

// corruptIndex returns an aggregate whose record points at partition key 5
// of a one-entry table, with a valid checksum.
func corruptIndex(t *testing.T) []byte {
	t.Helper()
	var rec []byte
	rec = protowire.AppendTag(rec, 1, protowire.VarintType)
	rec = protowire.AppendVarint(rec, 5)
	rec = protowire.AppendTag(rec, 3, protowire.BytesType)
	rec = protowire.AppendBytes(rec, []byte("z"))
	msg := []byte(kpl.MagicPrefix)
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, "k")
	msg = protowire.AppendTag(msg, 3, protowire.BytesType)
	msg = protowire.AppendBytes(msg, rec)
	return fixMD5(msg)
}
