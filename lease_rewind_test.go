package shardlease_test

import (
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

// pastTime returns a time after the arrival of every record written so far,
// once the clock has passed it, so that every record written afterwards
// arrives after it. Rewind keeps times to the millisecond: the time is on a
// millisecond.
func pastTime(t *testing.T) time.Time {
	t.Helper()
	at := time.UnixMilli(time.Now().UnixMilli() + 2)
	waitFor(t, time.Second, "the clock past the time", func() bool { return time.Now().After(at.Add(time.Millisecond)) })
	return at
}

// readAll runs one worker reading the stream from its start until every
// record produced was handled, and stops it, so that every shard has a
// checkpoint.
func readAll(t *testing.T, w *world, p *produced, owner string) *handled {
	t.Helper()
	h := newHandled()
	wk := startWorker(t, w, w.kin, w.store, h.handler(owner), w.opts(owner, shardlease.WithInitialPosition(shardlease.TrimHorizon))...)
	waitFor(t, time.Minute, "every record handled", func() bool { return h.distinct() == p.count() })
	require.NoError(t, wk.stop(t))
	return h
}

// readAgain runs one worker at the configured initial position (LATEST:
// only the rows' own progress brings it back) until want records were
// handled, and stops it.
func readAgain(t *testing.T, w *world, owner string, want int) *handled {
	t.Helper()
	h := newHandled()
	wk := startWorker(t, w, w.kin, w.store, h.handler(owner), w.opts(owner)...)
	waitFor(t, time.Minute, "the records after the time handled again", func() bool { return h.distinct() >= want })
	require.NoError(t, wk.stop(t))
	return h
}

// requireExactly checks that h handled exactly ids, each once, and, per
// partition key, in the order they were written. Records of a shard are
// read in order, so a record before the time read again would have come
// before the ones after it: none is.
func requireExactly(t *testing.T, p *produced, h *handled, ids []string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var got []string
	for id := range h.times {
		got = append(got, id)
	}
	require.ElementsMatch(t, ids, got, "handled after the rewind")
	for id, n := range h.times {
		require.Equal(t, 1, n, "record %s handled %d times after the rewind", id, n)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, all := range p.byKey {
		var order []string
		for _, id := range all {
			if want[id] {
				order = append(order, id)
			}
		}
		require.Equal(t, order, h.byKey[key], "partition key %s handled out of order", key)
	}
}

// rowsOf returns the stream's rows by shard id.
func rowsOf(t *testing.T, w *world) map[string]shardlease.Lease {
	t.Helper()
	out := map[string]shardlease.Lease{}
	for _, l := range w.leases(t) {
		out[l.Key.Shard] = l
	}
	return out
}

// TestRewindResumesAtTheTime: after a rewind to a time, a consumer reads
// every record that arrived at or after it, once each and in order, and
// none before it.
func TestRewindResumesAtTheTime(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 30, 8)
		at := pastTime(t)
		w.put(t, p, 30, 8)
		after := slices.Clone(p.ids[30:])
		readAll(t, w, p, "a")

		rep, err := shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at)
		require.NoError(t, err)
		assert.Equal(t, at, rep.To)
		require.Len(t, rep.Shards, 2)
		assert.Equal(t, 2, rep.Changed)
		for _, s := range rep.Shards {
			assert.Equal(t, shardlease.RewindAtTime, s.Action, s.Shard)
			assert.NotEmpty(t, s.Checkpoint, "the report names the checkpoint replaced")
			assert.Empty(t, s.TakenFrom)
		}
		for shard, l := range rowsOf(t, w) {
			assert.False(t, l.Held(), shard)
			assert.Empty(t, l.Checkpoint, shard)
			assert.Equal(t, shardlease.AtTimestamp, l.Start.Position, shard)
			assert.True(t, at.Equal(l.Start.Timestamp), shard)
		}

		again := readAgain(t, w, "b", len(after))
		requireExactly(t, p, again, after)
	})
}

// TestRewindStreamSplitAndMergedBeforeTheTime: shards closed before the
// time are marked finished, the ones open at it start at it, the ones opened
// after it start from their first record, and a consumer then reads exactly
// the records after the time, parents before children. Only the in-process
// world shows it: kinesalite ignores ListShards' ShardFilter (every shard
// then starts AT_TIMESTAMP, the safe fallback) and answers no AT_TIMESTAMP
// iterator of a shard without a record after the time.
func TestRewindStreamSplitAndMergedBeforeTheTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, shardleasetest.NewKinesis(), 2)
		p := &produced{}
		w.put(t, p, 20, 16)
		kids := w.split(t, "shardId-000000000000") // 2 and 3
		w.put(t, p, 20, 16)
		merged := w.merge(t, kids[1], "shardId-000000000001") // 4
		w.put(t, p, 20, 16)
		at := pastTime(t)
		w.put(t, p, 20, 16)
		late := w.split(t, merged) // 5 and 6
		w.put(t, p, 20, 16)
		after := slices.Clone(p.ids[60:])
		readAll(t, w, p, "a")

		rep, err := shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at)
		require.NoError(t, err)
		got := map[string]shardlease.RewindAction{}
		for _, s := range rep.Shards {
			got[s.Shard] = s.Action
		}
		assert.Equal(t, map[string]shardlease.RewindAction{
			"shardId-000000000000": shardlease.RewindFinished,
			"shardId-000000000001": shardlease.RewindFinished,
			kids[0]:                shardlease.RewindAtTime,
			kids[1]:                shardlease.RewindFinished,
			merged:                 shardlease.RewindAtTime,
			late[0]:                shardlease.RewindFromStart,
			late[1]:                shardlease.RewindFromStart,
		}, got)
		rows := rowsOf(t, w)
		for _, shard := range []string{"shardId-000000000000", "shardId-000000000001", kids[1]} {
			assert.True(t, rows[shard].Finished(), shard)
		}
		for _, shard := range late {
			assert.Empty(t, rows[shard].Checkpoint, shard)
			assert.Equal(t, shardlease.TrimHorizon, rows[shard].Start.Position, shard)
			assert.Equal(t, []string{merged}, rows[shard].Parents, shard)
		}

		again := readAgain(t, w, "b", len(after))
		requireExactly(t, p, again, after)
	})
}

// TestRewindDryRunWritesNothing: a dry run reports per shard what would
// change and writes nothing; a second real run finds every shard at the
// time and writes nothing either.
func TestRewindDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 4)
		at := pastTime(t)
		w.put(t, p, 10, 4)
		readAll(t, w, p, "a")
		before := rowsOf(t, w)

		rep, err := shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at, shardlease.WithRewindDryRun())
		require.NoError(t, err)
		assert.True(t, rep.DryRun)
		assert.Equal(t, 2, rep.Changed)
		for _, s := range rep.Shards {
			assert.True(t, s.Changed, s.Shard)
			assert.Equal(t, before[s.Shard].Checkpoint, s.Checkpoint, "the checkpoint that would be replaced")
			assert.Equal(t, shardlease.Start{Position: shardlease.AtTimestamp, Timestamp: at}, s.To)
		}
		assert.Equal(t, before, rowsOf(t, w), "a dry run writes nothing")

		_, err = shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at)
		require.NoError(t, err)
		rewound := rowsOf(t, w)
		rep, err = shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at)
		require.NoError(t, err)
		assert.Zero(t, rep.Changed, "every shard is at the time already")
		assert.Equal(t, rewound, rowsOf(t, w), "a second run writes nothing")
	})
}

// TestRewindRefusedWhileHeld: while a worker holds leases, Rewind (and its
// dry run) names the held shards and what to do, and writes nothing.
func TestRewindRefusedWhileHeld(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 4)
		at := pastTime(t)
		w.put(t, p, 10, 4)
		h := newHandled()
		startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithInitialPosition(shardlease.TrimHorizon))...)
		waitFor(t, time.Minute, "every record handled and both leases held", func() bool {
			return h.distinct() == p.count() && len(heldBy(w.leases(t))["a"]) == 2
		})
		before := rowsOf(t, w)

		for _, opts := range [][]shardlease.RewindOption{nil, {shardlease.WithRewindDryRun()}} {
			rep, err := shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at, opts...)
			require.ErrorIs(t, err, shardlease.ErrLeaseHeld)
			require.NotNil(t, rep, "the report says what would change")
			for _, want := range []string{"nothing was changed", "stream " + w.stream, "shardId-000000000000 by a", "shardId-000000000001 by a",
				"stop the consumers of stream " + w.stream, "WithRewindHandover"} {
				assert.Contains(t, err.Error(), want)
			}
		}
		after := rowsOf(t, w)
		for shard, l := range before {
			assert.Equal(t, l.Checkpoint, after[shard].Checkpoint, "nothing was written to %s", shard)
			assert.Equal(t, l.Owner, after[shard].Owner)
		}
	})
}

// TestRewindHandoverTakesLeasesFromLiveHolders: with WithRewindHandover the
// leases are taken from the running worker, which takes them back and
// reads the records after the time again, and none before it.
func TestRewindHandoverTakesLeasesFromLiveHolders(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 20, 8)
		at := pastTime(t)
		w.put(t, p, 20, 8)
		after := slices.Clone(p.ids[20:])
		h := newHandled()
		startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithInitialPosition(shardlease.TrimHorizon))...)
		waitFor(t, time.Minute, "every record handled and both leases held", func() bool {
			return h.distinct() == p.count() && len(heldBy(w.leases(t))["a"]) == 2
		})
		h.mu.Lock()
		h.times, h.byKey = map[string]int{}, map[string][]string{} // count from here
		h.mu.Unlock()

		rep, err := shardlease.Rewind(t.Context(), w.store, w.kin, w.stream, at, shardlease.WithRewindHandover(), shardlease.WithRewindOwner("ops#rewind"))
		require.NoError(t, err)
		for _, s := range rep.Shards {
			assert.Equal(t, "a", shardlease.OwnerName(s.TakenFrom), "the lease of %s was taken from the worker", s.Shard)
		}
		waitFor(t, time.Minute, "the worker reads the records after the time again", func() bool { return h.distinct() >= len(after) })
		waitFor(t, time.Minute, "the worker holds both leases again", func() bool { return len(heldBy(w.leases(t))["a"]) == 2 })
		requireExactly(t, p, h, after)
	})
}

// noRewinder hides every capability of a store but LeaseStore.
type noRewinder struct{ shardlease.LeaseStore }

// TestRewindRefusesBadInput: a store that cannot clear a checkpoint, a time
// in the future, and a bad stream name are refused before anything is read
// or written.
func TestRewindRefusesBadInput(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t, shardleasetest.NewKinesis(), 1)
		ctx := t.Context()
		_, err := shardlease.Rewind(ctx, noRewinder{w.store}, w.kin, w.stream, time.Now().Add(-time.Minute))
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "cannot clear a checkpoint")
		_, err = shardlease.Rewind(ctx, w.store, w.kin, w.stream, time.Now().Add(time.Hour))
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "in the future")
		_, err = shardlease.Rewind(ctx, w.store, w.kin, "no spaces", time.Now().Add(-time.Minute))
		require.ErrorIs(t, err, shardlease.ErrInvalidName)
		_, err = shardlease.Rewind(ctx, w.store, w.kin, "missing", time.Now().Add(-time.Minute))
		var nf *shardlease.StreamNotFoundError
		require.ErrorAs(t, err, &nf)
		assert.True(t, strings.Contains(err.Error(), "missing"))
		assert.Empty(t, w.leases(t), "nothing was written")
	})
}
