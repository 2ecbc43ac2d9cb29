package shardlease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// readLog records every GetRecords call a worker makes: when, how many
// records came back, and how many calls were refused for the shard's read
// limit.
type readLog struct {
	shardlease.KinesisAPI
	mu        sync.Mutex
	at        []time.Time
	full      []bool // the call returned a whole batch
	throttled int
	limit     int
}

func (l *readLog) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	now := time.Now()
	out, err := l.KinesisAPI.GetRecords(ctx, in, optFns...)
	l.mu.Lock()
	defer l.mu.Unlock()
	var pte *types.ProvisionedThroughputExceededException
	switch {
	case errors.As(err, &pte):
		l.throttled++
	case err == nil:
		l.at = append(l.at, now)
		l.full = append(l.full, len(out.Records) >= l.limit)
	}
	return out, err
}

// medianGapAfter returns the median pause between a call of the given
// kind (a full batch or not) and the next call: the reader's cadence, which
// the kind of the call before decides. The median, not the shortest: the
// times are taken in this wrapper, after the reader's own clock read, so a
// goroutine descheduled between the two on a loaded machine shortens one
// gap and lengthens its neighbour.
func (l *readLog) medianGapAfter(full bool) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var gaps []time.Duration
	for i := 0; i+1 < len(l.at); i++ {
		if l.full[i] == full {
			gaps = append(gaps, l.at[i+1].Sub(l.at[i]))
		}
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

func (l *readLog) calls(full bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range l.full {
		if f == full {
			n++
		}
	}
	return n
}

// A reader that is behind uses the shard's five reads a second; once caught
// up it uses four, so the worker a shard is handed to on a graceful shutdown
// is not refused its first read.
func TestCaughtUpReaderLeavesAReadForTheNextHolder(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		w.timed(t)
		const batch = 50
		p := &produced{}
		h := newHandled()
		w.put(t, p, 20*batch, 4) // a backlog of 20 whole batches
		logA := &readLog{KinesisAPI: w.kin, limit: batch}
		a := startWorker(t, w, logA, w.store, h.handler("a"), w.opts("a", shardlease.WithBatchSize(batch))...)
		waitFor(t, 30*w.lease, "the backlog read", func() bool { return h.distinct() == p.count() })
		// Records keep arriving, a few per read: the reader is caught up but
		// never idle.
		prod := w.produce(t, p, 40*time.Millisecond, 1, 4)
		waitFor(t, 30*w.lease, "12 caught-up reads", func() bool { return logA.calls(false) >= 12 })

		behind, caughtUp := logA.medianGapAfter(true), logA.medianGapAfter(false)
		t.Logf("%s: median gap after a full batch %v, after a short one %v", w.name, behind, caughtUp)
		// The reader paces its calls 200 ms apart by its own clock; this
		// wrapper's clock reads come a scheduling delay after it, so a gap
		// seen here may be a few milliseconds short of one the reader kept.
		assert.GreaterOrEqual(t, behind, 195*time.Millisecond, "%s: behind, the reader keeps within the shard's five reads a second", w.name)
		assert.Less(t, behind, 250*time.Millisecond, "%s: behind, the reader uses the shard's whole read allowance (a read every 200 ms)", w.name)
		assert.GreaterOrEqual(t, caughtUp, 250*time.Millisecond, "%s: caught up, the reader leaves one read a second unused", w.name)

		logB := &readLog{KinesisAPI: w.kin, limit: batch}
		b := startWorker(t, w, logB, w.store, h.handler("b"), w.opts("b", shardlease.WithBatchSize(batch))...)
		require.NoError(t, a.stop(t))
		waitFor(t, 30*w.lease, "b reads the shard", func() bool { return logB.calls(false) > 0 })
		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, b.stop(t))

		logB.mu.Lock()
		assert.Zero(t, logB.throttled, "the new holder's reads are not refused")
		logB.mu.Unlock()
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates(), "a graceful handover hands no record twice")
		requireKeyOrder(t, p, h)
	})
}
