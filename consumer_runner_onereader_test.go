package shardlease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// overlaps watches handler calls from entry to exit, per shard, and counts
// the times a handler was entered while another one of the same shard was
// still running: two readers of one shard at once.
type overlaps struct {
	mu      sync.Mutex
	running map[string]int
	n       int
	entered int
}

func newOverlaps() *overlaps { return &overlaps{running: map[string]int{}} }

// wrap returns h with its calls watched.
func (o *overlaps) wrap(h shardlease.Handler) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		o.mu.Lock()
		o.running[b.ShardID]++
		o.entered++
		if o.running[b.ShardID] > 1 {
			o.n++
		}
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			o.running[b.ShardID]--
			o.mu.Unlock()
		}()
		return h(ctx, b)
	}
}

func (o *overlaps) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

func (o *overlaps) calls() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.entered
}

// slowHandler records the batch and then works for d, or until its context
// is cancelled.
func slowHandler(h *handled, worker string, d time.Duration) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		h.add(worker, b)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
}

// Defect: two processes started with one owner id (a reused pod name while
// the old pod still runs) both ran a shard: the second adopted the rows
// naming the id at once. Each run now writes an identity of its own.
func TestOneReaderSharedOwnerID(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		o := newOverlaps()
		a := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "a", w.renew)), w.opts("pod-0")...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		prod := w.produce(t, p, w.take/4, 1, 4)
		waitFor(t, 10*w.lease, "a handling", func() bool { return o.calls() > 2 })
		b := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "b", w.renew)), w.opts("pod-0")...)
		started := time.Now()
		waitFor(t, 10*w.lease, "three lease durations", func() bool { return time.Since(started) > 3*w.lease })
		prod.stop()

		assert.NotEqual(t, a.c.OwnerID(), b.c.OwnerID(), "two runs write two identities")
		assert.Equal(t, "pod-0", shardlease.OwnerName(a.c.OwnerID()))
		assert.Equal(t, "pod-0", shardlease.OwnerName(b.c.OwnerID()))
		for _, l := range w.leases(t) {
			assert.Contains(t, []string{a.c.OwnerID(), b.c.OwnerID()}, l.Owner)
		}
		assert.Zero(t, o.count(), "handlers of one shard ran at once")
		assert.Zero(t, a.c.Stats().LeasesLost+b.c.Stats().LeasesLost, "no lease was taken from a live holder")
		waitFor(t, 10*w.lease, "every record handled", func() bool { return len(h.lost(p)) == 0 })
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
	})
}

// Defect: a taker whose handoff request was not answered within a lease
// duration took the lease on the counter it had listed, from a holder that
// was still renewing and finishing a long batch. A live holder now keeps
// its lease until it answers.
func TestOneReaderUnansweredHandoff(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		o := newOverlaps()
		// Batches take two lease durations; the holder may finish them
		// before it hands over.
		batch := 2 * w.lease
		a := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "a", batch)), w.opts("a", shardlease.WithShutdownTimeout(3*batch))...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		w.put(t, p, 40, 8)
		waitFor(t, 10*w.lease, "a handling both shards", func() bool { return o.calls() >= 2 })
		b := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "b", w.take)), w.opts("b")...)
		waitFor(t, 10*w.lease, "b asks for a lease", func() bool { return b.c.Stats().HandoffsRequested > 0 })
		waitFor(t, 4*batch, "b holds one lease", func() bool { return len(b.c.Held()) == 1 })

		assert.Zero(t, o.count(), "handlers of one shard ran at once")
		assert.Zero(t, a.c.Stats().LeasesLost, "a lost a lease while it was renewing it")
		assert.Equal(t, int64(1), b.c.Stats().LeasesHandedIn, "b got the lease by handoff")
		assert.Zero(t, b.c.Stats().LeasesTaken, "b took nothing from a live holder")
		require.NoError(t, b.stop(t))
		require.NoError(t, a.stop(t))
	})
}

// Defect: a worker configured with a shorter lease duration judged the
// leases of a live holder with a longer one expired and took them. The
// holder's duration is on the row now, and takers wait the longer one.
func TestOneReaderMixedLeaseDurations(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		o := newOverlaps()
		long := 3 * w.lease
		// a renews every 1.5 lease durations of b's: within its own lease,
		// but slower than b's lease duration.
		a := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "a", w.take)),
			w.opts("a", shardlease.WithLeaseDuration(long), shardlease.WithRenewInterval(long/2), shardlease.WithShutdownTimeout(long))...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		require.Equal(t, long, w.leases(t)[0].Duration, "the holder's lease duration is on the row")
		prod := w.produce(t, p, w.take/2, 1, 4)
		b := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "b", w.take)), w.opts("b")...)
		started := time.Now()
		waitFor(t, 10*w.lease, "four of b's lease durations", func() bool { return time.Since(started) > 4*w.lease })
		prod.stop()

		assert.Equal(t, []string{"shardId-000000000000"}, a.c.Held(), "a keeps its lease")
		assert.Zero(t, a.c.Stats().LeasesLost, "a lost its lease while renewing it")
		assert.Zero(t, b.c.Stats().LeasesTaken, "b took a live holder's lease")
		assert.Zero(t, o.count(), "handlers of one shard ran at once")
		require.NoError(t, b.stop(t))
		require.NoError(t, a.stop(t))
	})
}

// Defect: a handler that ignores its context kept its lease forever (the
// keeper went on renewing) and Run never returned. Now Run returns within
// the shutdown timeout (with ErrHandlerAbandoned), the lease is no longer renewed, and another worker
// takes it once it has expired.
func TestOneReaderStuckHandler(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) { stuckHandlerTakenOver(t, w) })
}

// stuckHandlerTakenOver is TestOneReaderStuckHandler's course, its workers
// configured with extra too.
func stuckHandlerTakenOver(t *testing.T, w *world, extra ...shardlease.Option) {
	p := &produced{}
	w.put(t, p, 5, 2)
	block := make(chan struct{})
	defer close(block) // lets the abandoned handler return before the test ends
	entered := make(chan struct{}, 1)
	stuck := func(ctx context.Context, b *shardlease.Batch) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-block // ignores ctx
		return nil
	}
	timeout := w.lease / 2
	a := startWorker(t, w, w.kin, w.store, stuck, w.opts("a", append([]shardlease.Option{shardlease.WithShutdownTimeout(timeout)}, extra...)...)...)
	<-entered

	stopping := time.Now()
	require.ErrorIs(t, a.stop(t), shardlease.ErrHandlerAbandoned, "Run says it abandoned the handler")
	took := time.Since(stopping)
	t.Logf("%s: Run returned %v after cancel (shutdown timeout %v)", w.name, took, timeout)
	assert.LessOrEqual(t, took, timeout+w.renew/2, "Run returned within the shutdown timeout")

	// Nothing renews the lease any more.
	after := w.leases(t)[0]
	assert.Equal(t, a.c.OwnerID(), after.Owner, "not released while the handler may still run")
	h := newHandled()
	b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b", extra...)...)
	waitFor(t, w.lease+4*w.take, "b takes the expired lease", func() bool { return len(b.c.Held()) == 1 })
	waitFor(t, 10*w.lease, "b handles the records", func() bool { return h.distinct() == 5 })
	require.NoError(t, b.stop(t))
}

// asyncWork checkpoints each batch after a fixed amount of work, off the
// handler's goroutine, as a handler that hands records to a pipeline does.
type asyncWork struct {
	mu      sync.Mutex
	last    *shardlease.Batch
	errs    chan error
	work    time.Duration
	pending sync.WaitGroup
}

func (a *asyncWork) handler(h *handled) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		h.add("a", b)
		a.mu.Lock()
		a.last = b
		a.mu.Unlock()
		a.pending.Go(func() {
			time.Sleep(a.work) // the pipeline's work
			a.errs <- b.Checkpoint(b.Records[len(b.Records)-1])
		})
		return nil
	}
}

// Defect: with manual checkpoints, a checkpoint of work finished during a
// shutdown was dropped (the final write did not wait for it), and
// Batch.Checkpoint after the release returned nil and wrote nothing.
func TestOneReaderCheckpointAfterRelease(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		work := &asyncWork{errs: make(chan error, 100), work: w.renew}
		a := startWorker(t, w, w.kin, w.store, work.handler(h), w.opts("a", shardlease.WithManualCheckpoints())...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		w.put(t, p, 10, 2)
		waitFor(t, 10*w.lease, "a accepted every record", func() bool { return h.distinct() == 10 })

		// Shut down while the work of the last batch is still running.
		require.NoError(t, a.stop(t))
		work.pending.Wait()
		close(work.errs)
		for err := range work.errs {
			require.NoError(t, err, "a checkpoint made during the shutdown is taken")
		}
		work.mu.Lock()
		last := work.last
		work.mu.Unlock()
		row := w.leases(t)[0]
		assert.Equal(t, last.Records[len(last.Records)-1].SequenceNumber, row.Checkpoint, "the final write carries the checkpoint made during the shutdown")
		assert.Empty(t, row.Owner, "released")

		err := last.Checkpoint(last.Records[0])
		require.Error(t, err, "a checkpoint after the release is refused")
		assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	})
}

// cutoffWrites fails every renewal and checkpoint once armed, as an
// unreachable table would, and records when the last successful one was
// sent.
type cutoffWrites struct {
	shardlease.LeaseStore
	shardlease.WorkerStore
	armed  atomic.Bool
	mu     sync.Mutex
	lastOK time.Time
}

func (s *cutoffWrites) write(fn func() (shardlease.Lease, error)) (shardlease.Lease, error) {
	if s.armed.Load() {
		return shardlease.Lease{}, errUnavailable
	}
	sent := time.Now()
	l, err := fn()
	if err == nil {
		s.mu.Lock()
		s.lastOK = sent
		s.mu.Unlock()
	}
	return l, err
}

func (s *cutoffWrites) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	return s.write(func() (shardlease.Lease, error) { return s.LeaseStore.Acquire(ctx, k, owner, observed) })
}

func (s *cutoffWrites) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	return s.write(func() (shardlease.Lease, error) { return s.LeaseStore.Renew(ctx, l, e) })
}

func (s *cutoffWrites) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	return s.write(func() (shardlease.Lease, error) { return s.LeaseStore.Checkpoint(ctx, l, cp, sub, e) })
}

// Defect: the holder stopped handing batches exactly a lease duration after
// its last successful write was sent, and cancelled the handler's context
// up to a renew interval later still, when a taker may already run the
// shard. It now cuts off a margin before, and cancels the handler's
// context at the cut-off.
func TestOneReaderCutoffMargin(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		if w.name != "fake" {
			t.Skip("the cut-off's timing is asserted under fake time; the emulators add nothing to it")
		}
		p := &produced{}
		w.put(t, p, 5, 2)
		store := &cutoffWrites{LeaseStore: w.store, WorkerStore: w.store.(shardlease.WorkerStore)}
		cancelled := make(chan time.Time, 1)
		entered := make(chan struct{}, 1)
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			select {
			case cancelled <- time.Now():
			default:
			}
			return ctx.Err()
		}
		a := startWorker(t, w, w.kin, store, handler, w.opts("a")...)
		<-entered
		store.armed.Store(true)
		at := <-cancelled
		store.mu.Lock()
		lastOK := store.lastOK
		store.mu.Unlock()
		took := at.Sub(lastOK)
		t.Logf("handler cancelled %v after the last successful write was sent (lease %v)", took, w.lease)
		assert.Less(t, took, w.lease, "the handler's context is cancelled before the lease can expire for a taker")
		assert.GreaterOrEqual(t, took, w.lease-w.lease/5, "not cancelled while the lease was surely held")
		_ = a.stop(t)
	})
}

// Defect: a worker that shut down left its handoff requests on the rows,
// so the holders handed the leases to a worker that was gone, and they sat
// unread for a lease duration. It now withdraws them, and releases rows
// handed to it after its loop ended.
func TestOneReaderShutdownWithdrawsRequests(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		release := make(chan struct{})
		var once sync.Once
		// a's first batches wait for the test; it honours its context.
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			h.add("a", b)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		seen := &seesHandoff{LeaseStore: w.store, WorkerStore: w.store.(shardlease.WorkerStore)}
		a := startWorker(t, w, w.kin, seen, handler, w.opts("a", shardlease.WithShutdownTimeout(10*w.lease))...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		w.put(t, p, 20, 8)
		waitFor(t, 10*w.lease, "a in both handlers", func() bool { return h.batches.Load() >= 2 })

		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		var asked shardlease.Lease
		waitFor(t, 10*w.lease, "b's handoff request on a row", func() bool {
			for _, l := range w.leases(t) {
				if l.HandoffTo == b.c.OwnerID() {
					asked = l
					return true
				}
			}
			return false
		})
		waitFor(t, 10*w.lease, "a sees the request", func() bool { return seen.saw.Load() })
		require.NoError(t, b.stop(t))
		for _, l := range w.leases(t) {
			assert.NotEqual(t, b.c.OwnerID(), l.HandoffTo, "%s: b's request withdrawn", l.Key.Shard)
		}

		// a finishes its batch: the lease is not handed to b, which is gone.
		once.Do(func() { close(release) })
		stopped := time.Now()
		waitFor(t, 10*w.lease, "a runs both shards again", func() bool {
			for _, l := range w.leases(t) {
				require.NotEqual(t, b.c.OwnerID(), l.Owner, "%s handed to a stopped worker", l.Key.Shard)
			}
			return a.c.Stats().LeasesReleased >= 1 && len(a.c.Held()) == 2
		})
		t.Logf("%s: %s read again %v after a's batch ended (lease %v)", w.name, asked.Key.Shard, time.Since(stopped), w.lease)
		waitFor(t, 10*w.lease, "every record handled", func() bool { return len(h.lost(p)) == 0 })
		require.NoError(t, a.stop(t))
	})
}

// seesHandoff tells when its user was shown a handoff request on a lease it
// holds: in a renewal's reply or in a take round's listing.
type seesHandoff struct {
	shardlease.LeaseStore
	shardlease.WorkerStore
	saw atomic.Bool
}

func (s *seesHandoff) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Renew(ctx, l, e)
	if err == nil && got.HandoffTo != "" {
		s.saw.Store(true)
	}
	return got, err
}

func (s *seesHandoff) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
	if err == nil && got.HandoffTo != "" {
		s.saw.Store(true)
	}
	return got, err
}

func (s *seesHandoff) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	ls, ws, err := s.WorkerStore.ListWithWorkers(ctx, stream)
	for _, l := range ls {
		if l.HandoffTo != "" && l.Owner != "" && l.Owner != l.HandoffTo {
			s.saw.Store(true)
		}
	}
	return ls, ws, err
}

// hangingCalls makes the first take round's listing and the first
// GetRecords call hang until their context ends, as calls to an endpoint
// that accepted the connection and never answered do.
type hangingCalls struct {
	shardlease.LeaseStore
	shardlease.WorkerStore
	lists atomic.Int64
}

func (s *hangingCalls) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	if s.lists.Add(1) == 1 {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	return s.WorkerStore.ListWithWorkers(ctx, stream)
}

type hangingReads struct {
	shardlease.KinesisAPI
	reads atomic.Int64
}

func (k *hangingReads) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if k.reads.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return k.KinesisAPI.GetRecords(ctx, in, o...)
}

// Defect: calls without a deadline: a hung Scan stalled every take round, a
// hung GetRecords kept a lease renewed while its shard read nothing.
func TestOneReaderHungCalls(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 2)
		h := newHandled()
		store := &hangingCalls{LeaseStore: w.store, WorkerStore: w.store.(shardlease.WorkerStore)}
		kin := &hangingReads{KinesisAPI: w.kin}
		a := startWorker(t, w, kin, store, h.handler("a"), w.opts("a")...)
		waitFor(t, 5*w.lease, "every record handled", func() bool { return h.distinct() == 10 })
		assert.GreaterOrEqual(t, store.lists.Load(), int64(2), "the take round after the hung one ran")
		assert.GreaterOrEqual(t, kin.reads.Load(), int64(2), "the read after the hung one ran")
		require.NoError(t, a.stop(t))
	})
}
