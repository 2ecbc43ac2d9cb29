package shardlease

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// leaseRunner holds one lease: a keeper goroutine does every write to the
// row, a reader (see shardReader) reads the shard one batch ahead, and a
// processor hands batches to the handler.
type leaseRunner struct {
	c         *Consumer
	shard     string
	key       LeaseKey
	fromStart bool
	// taken is the lease as this worker took it: where its reader starts.
	// Set before the runner starts; never written after.
	taken Lease
	log   *slog.Logger

	leaseCtx    context.Context // cancelled when the lease is lost or aborted
	leaseCancel context.CancelFunc
	quit        chan struct{} // closed to stop after the batch in hand
	quitOnce    sync.Once
	procDone    chan struct{}
	readDone    chan struct{} // closed when the reader has returned
	keeperDone  chan struct{}
	flushReq    chan chan error
	cpMoved     chan struct{} // poked when the pending checkpoint moves

	mu         sync.Mutex
	lease      Lease     // the handle, kept by the keeper
	validUntil time.Time // monotonic: the lease is ours until then
	pendSeq    string    // pending checkpoint; written when it differs
	pendSub    int64
	wroteSeq   string
	wroteSub   int64
	lastWrite  time.Time // when the last successful write was sent (keeper only)

	behind atomic.Int64 // MillisBehindLatest of the last read; -1 before the first
	// panicSeen is the panic site and batch of the last handler panic
	// logged at Error (see logPanic); handler goroutine only.
	panicSeen string
	// unsure is the keeper's last write, which failed without a refusal:
	// it may have landed with only its reply lost. It is sent again as it
	// was, so that the store can recognise it as this worker's own write.
	// Only the keeper goroutine uses it.
	unsure *attempt

	lost       atomic.Bool
	handedOff  atomic.Bool
	endedShard atomic.Bool

	// abandoned is closed when the handler is given up on (bounds.go).
	abandoned chan struct{}
	handlerMu sync.Mutex
	inHandler bool // a handler call is running (under handlerMu)

	// stopAt is when the runner was told to stop (under mu); sealed is set
	// (under mu) once no checkpoint can be written any more; handed is the
	// last record the handler returned nil for (manual checkpoints).
	stopAt    time.Time
	sealed    bool
	handedSeq string
	handedSub int64
	hasHanded bool

	stuckMu     sync.Mutex
	stuckAt     *stuckState // while the handler keeps failing on a batch (retry.go)
	stopHookRan atomic.Bool // hooks.go
	rejected    atomic.Bool // Kinesis refused the checkpoint (see ErrCheckpointRejected)
}

// newLeaseRunner returns a runner for l, which this worker's write sent at
// written made its own: the lease is ours for a lease duration from then.
func newLeaseRunner(c *Consumer, l Lease, fromStart bool, written time.Time) *leaseRunner {
	validUntil := c.cfg.cutoff(written)
	ctx, cancel := context.WithCancel(context.Background())
	r := &leaseRunner{
		c: c, shard: l.Key.Shard, key: l.Key, fromStart: fromStart, taken: l,
		log:      c.log.With("shard", l.Key.Shard),
		leaseCtx: ctx, leaseCancel: cancel,
		quit:       make(chan struct{}),
		procDone:   make(chan struct{}),
		readDone:   make(chan struct{}),
		keeperDone: make(chan struct{}),
		flushReq:   make(chan chan error),
		cpMoved:    make(chan struct{}, 1),
		abandoned:  make(chan struct{}),
		lease:      l,
		validUntil: validUntil,
		lastWrite:  written,
		pendSeq:    l.Checkpoint, pendSub: l.SubSequence,
		wroteSeq: l.Checkpoint, wroteSub: l.SubSequence,
	}
	r.behind.Store(-1)
	return r
}

// stop asks the runner to finish the batch in hand, write its checkpoint
// and release the lease.
func (r *leaseRunner) stop() {
	r.quitOnce.Do(func() {
		r.mu.Lock()
		r.stopAt = time.Now()
		r.mu.Unlock()
		close(r.quit)
	})
}

// handOff stops the runner after the batch in hand and makes its release
// go to taker. The request stays on the row until the release, so the
// handle may carry it before a renewal has returned it.
func (r *leaseRunner) handOff(taker string) {
	r.mu.Lock()
	if r.lease.HandoffTo == "" {
		r.lease.HandoffTo = taker
	}
	r.mu.Unlock()
	if r.handedOff.CompareAndSwap(false, true) {
		r.log.Info("handoff requested by " + taker + "; finishing the batch in hand")
		r.stop()
	}
}

func (r *leaseRunner) markLost(reason string, err error) {
	if r.lost.CompareAndSwap(false, true) {
		r.c.count(evLost, 1)
		r.mu.Lock()
		counter := r.lease.Counter
		r.mu.Unlock()
		r.log.Warn("lease lost: "+reason, "counter", counter, "err", err)
	}
	// The handler's context first: the stop hook must find it cancelled.
	r.leaseCancel()
	r.stop()
}

// valid reports whether the lease is still surely ours: not lost, and the
// cut-off (a margin before a lease duration after the last successful write
// was sent) has not passed.
func (r *leaseRunner) valid() bool {
	if r.lost.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Now().Before(r.validUntil)
}

func (r *leaseRunner) run(parent context.Context) {
	batches := make(chan *Batch)
	fetchCtx, fetchCancel := context.WithCancel(r.leaseCtx)
	var wg sync.WaitGroup
	rd := r.c.newReader(r)
	wg.Go(func() {
		defer close(r.readDone)
		rd.read(fetchCtx, batches)
	})
	wg.Go(func() {
		defer close(r.procDone)
		defer fetchCancel()
		r.runStartHook()
		r.process(batches)
		r.runStopHook("")
	})
	wg.Go(r.watchdog)
	r.keep(parent)
	r.mu.Lock()
	r.sealed = true
	r.mu.Unlock()
	close(r.keeperDone)
	fetchCancel()
	wg.Wait()
	r.leaseCancel()
}

// endShard records SHARD_END once the last batch is processed (in manual
// mode: once the handler checkpointed its last record).
func (r *leaseRunner) endShard(b *Batch) {
	if r.c.cfg.manualCheckpoint && len(b.Records) > 0 {
		last := b.Records[len(b.Records)-1]
		for {
			r.mu.Lock()
			done := comparePosition(r.pendSeq, r.pendSub, last.SequenceNumber, last.SubSequenceNumber) >= 0
			r.mu.Unlock()
			if done {
				break
			}
			select {
			case <-r.cpMoved:
			case <-r.quit:
				return
			case <-r.leaseCtx.Done():
				return
			}
		}
	}
	r.mu.Lock()
	r.pendSeq, r.pendSub = ShardEnd, -1
	r.mu.Unlock()
	r.endedShard.Store(true)
	r.log.Info("shard read to its end")
}

// errReleased is the cause of a manual checkpoint made after the lease was
// released (handed over, shut down, or its shard finished).
func (r *leaseRunner) errReleased() error {
	return &LeaseError{Op: "checkpoint", Key: r.key, Err: errorf("%w: the lease was released (handed over, shut down or read to its end) or given up; the checkpoint was not written", ErrLeaseLost)}
}

// startsFrom returns where the runner's reader starts: the checkpoint and
// sub-sequence of the lease as taken, and where its row says a reader
// starts while it holds no checkpoint.
func (r *leaseRunner) startsFrom() (seq string, sub int64, start Start) {
	return r.taken.Checkpoint, r.taken.SubSequence, r.taken.Start
}
