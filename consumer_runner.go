package shardlease

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// A lease runner holds one lease, from the write that made it this worker's
// until the release that gives it up, or until it is lost:
//
//	launch ─► reading ─┬─ stop (Run ends) ──┐
//	          keeper   ├─ handOff (taker) ──┼─► stopping ─► final write ─► released
//	          reader   └─ shard read to its ┘   handler      checkpoint,   (to the taker,
//	          handler     end                   finishes     then release  or free)
//	                                            its batch
//	reading, stopping ─► lost: a write refused, or no write for the cut-off.
//	                     The handler's context is cancelled at once, the stop
//	                     hook runs, nothing more is written.
//	stopping, lost ───► abandoned: the handler is deaf past the grace period.
//	                     No write at all: the lease expires for the others.
//
// Goroutines: the keeper (run's own, consumer_keeper.go) makes every write
// to the row; the reader reads the shard one batch ahead, a polling one
// holding no goroutine while it waits out an idle poll (kinesisread.Starter);
// the processor, which runs only while there is work (consumer_processor.go),
// hands batches to the handler, which runs on a goroutine of its own so that
// it can be abandoned (consumer_handler.go). The watchdog's two timers
// enforce the grace period. An idle held shard read by polling costs one
// goroutine, the keeper's. Why the runner stops is one cause (ending), set
// by the first request and raised only by a graver one.

// leaseRunner holds one lease (see the top of this file).
type leaseRunner struct {
	// Set by newLeaseRunner; never written after.
	c         *Consumer
	m         *member // the stream it reads
	id        string  // the shard's id in the consumer: held's and the scheduler's key
	shard     string  // the shard's id in its stream
	key       LeaseKey
	fromStart bool  // a parent was read by this application: read from the start
	taken     taken // the lease as this worker took it: where its reader starts
	log       *slog.Logger

	// leaseCtx is the handler's context: cancelled when the lease is lost,
	// at the cut-off, and when the grace period runs out.
	leaseCtx    context.Context
	leaseCancel context.CancelFunc

	k   keeper   // the one write path (consumer_keeper.go)
	end ending   // why the runner stops
	h   handling // the handler's goroutine and its watchdog (consumer_handler.go)
	// proc says whether a processor runs (consumer_processor.go).
	proc processorState

	quit     chan struct{} // closed by stop: finish the batch in hand
	quitOnce sync.Once
	procDone chan struct{} // closed by the processor once the stop hook ran
	readDone chan struct{} // closed by the reader once it holds nothing open

	lag      lagClock    // the checkpoint age (consumer_lag.go)
	rejected atomic.Bool // reader: Kinesis refused the checkpoint (see ErrCheckpointRejected)
}

// stopCause is why a runner stops. Causes are ordered by gravity: a graver
// one replaces a lighter one, never the reverse.
type stopCause uint32

const (
	// stillRunning: no stop was asked for.
	stillRunning stopCause = iota
	// stopAsked: Run is shutting down.
	stopAsked
	// stopRemoved: the runner's stream left its Group's set.
	stopRemoved
	// stopHandoff: another worker asked for the lease; the release goes to it.
	stopHandoff
	// stopShardEnd: the shard was read to its end; SHARD_END is written and
	// the lease freed (a finished shard is nobody's work).
	stopShardEnd
	// stopLost: the lease is no longer ours; nothing more may be written.
	stopLost
)

// ending is a runner's stop cause, and whether its stop hook ran.
type ending struct {
	cause  atomic.Uint32
	hooked atomic.Bool
}

// raise sets the cause to c unless it is as grave already; it reports
// whether it did.
func (e *ending) raise(c stopCause) bool {
	for {
		old := e.cause.Load()
		if stopCause(old) >= c {
			return false
		}
		if e.cause.CompareAndSwap(old, uint32(c)) {
			return true
		}
	}
}

// get returns the cause.
func (e *ending) get() stopCause { return stopCause(e.cause.Load()) }

// newLeaseRunner returns a runner for l, which this worker's write sent at
// written made its own: the lease is ours for a lease duration from then.
func newLeaseRunner(c *Consumer, l Lease, fromStart bool, written time.Time) *leaseRunner {
	ctx, cancel := context.WithCancel(context.Background())
	id, key := l.Key.String(), l.Key
	log := newRunnerLog(c.log, key, c.set.grouped)
	r := &leaseRunner{
		c: c, m: c.set.of(id), id: id, shard: key.Shard, key: key, fromStart: fromStart,
		taken:    taken{checkpoint: l.Checkpoint, sub: l.SubSequence, start: l.Start, counter: l.Counter, epoch: holdingEpoch(l, c.set.of(id).learntEpoch())},
		log:      log,
		leaseCtx: ctx, leaseCancel: cancel,
		k:        newKeeper(l, c.cfg.cutoff(written), written),
		lag:      newLagClock(position{l.Checkpoint, l.SubSequence}),
		h:        handling{abandoned: make(chan struct{})},
		quit:     make(chan struct{}),
		procDone: make(chan struct{}),
		readDone: make(chan struct{}),
		proc:     processorState{sent: make(chan struct{}, 1)},
	}
	if l.Session != "" && c.sess != nil {
		r.k.sess, r.k.gen = c.sess, l.SessionGen
	}
	return r
}

// run runs the lease until it is released or lost; the keeper's loop runs
// on the caller's goroutine, the reader and processor on their own.
func (r *leaseRunner) run(parent context.Context) {
	batches := make(chan *Batch)
	fetchCtx, fetchCancel := context.WithCancel(r.leaseCtx)
	rd := r.c.newReader(r)
	r.proc.start(func() { r.processor(batches, fetchCancel) })
	rd.start(fetchCtx, batches, func() { close(r.readDone) })
	// The grace period starts when the runner is told to stop (stop) or
	// its lease's context ends; either end needs a processor to see it.
	unwatch := context.AfterFunc(r.leaseCtx, func() {
		r.armWatchdog()
		r.proc.ensure()
	})
	r.keep(parent)
	r.k.close()
	fetchCancel()
	<-r.readDone
	r.proc.ensure()
	<-r.procDone
	r.proc.wg.Wait()
	unwatch()
	r.disarmWatchdog()
	r.leaseCancel()
}

// stop asks the runner to finish the batch in hand, write its checkpoint
// and release the lease.
func (r *leaseRunner) stop() { r.stopFor(stopAsked) }

// stopFor is stop with its cause: stopAsked, or stopRemoved.
func (r *leaseRunner) stopFor(cause stopCause) {
	r.end.raise(cause)
	r.quitOnce.Do(func() {
		r.k.mu.Lock()
		r.k.stopAt = time.Now()
		r.k.mu.Unlock()
		close(r.quit)
		r.armWatchdog()
		r.proc.ensure()
	})
}

// handOff stops the runner after the batch in hand and makes its release
// go to taker. The request stays on the row until the release, so the
// handle may carry it before a renewal has returned it.
func (r *leaseRunner) handOff(taker string) {
	r.k.mu.Lock()
	if r.k.lease.HandoffTo == "" {
		r.k.lease.HandoffTo = taker
	}
	r.k.mu.Unlock()
	if r.end.raise(stopHandoff) {
		if taker == "" {
			r.log.Info("releasing the lease; finishing the batch in hand")
		} else {
			r.log.Info("handoff requested by " + taker + "; finishing the batch in hand")
		}
		r.stop()
	}
}

// markLost records that the lease is no longer ours: the handler's context
// is cancelled and the runner stops, writing nothing more.
func (r *leaseRunner) markLost(reason string, err error) {
	if r.end.raise(stopLost) {
		r.count(evLost, 1)
		r.k.mu.Lock()
		counter := r.k.lease.Counter
		r.k.mu.Unlock()
		r.log.Warn("lease lost: "+reason, "counter", counter, "err", err)
	}
	// The handler's context first: the stop hook must find it cancelled.
	r.leaseCancel()
	r.stop()
}

// lost reports whether the lease was lost.
func (r *leaseRunner) lost() bool { return r.end.get() == stopLost }

// valid reports whether the lease is still surely ours: not lost, and the
// cut-off (a margin before a lease duration after the last successful write
// was sent) has not passed.
func (r *leaseRunner) valid() bool {
	if r.lost() {
		return false
	}
	return time.Now().Before(r.k.cutoff())
}

// stopReason is what the stop hook is told when the processor stops: the
// cause, or for a reader that ended by itself (the shard is gone) shutting
// down while the lease is still surely ours, and lost once no write
// succeeded for a lease duration (it may be another worker's already).
func (r *leaseRunner) stopReason() StopReason {
	switch r.end.get() {
	case stopLost:
		return StopLost
	case stopShardEnd:
		return StopShardEnded
	case stopHandoff:
		return StopHandedOff
	case stopRemoved:
		return StopStreamRemoved
	case stillRunning:
		if !r.valid() {
			return StopLost
		}
	}
	return StopShuttingDown
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
	return r.taken.checkpoint, r.taken.sub, r.taken.start
}

// taken is what a runner keeps of the lease as this worker took it.
type taken struct {
	checkpoint string
	sub        int64
	start      Start
	counter    int64 // the acquire's: the holding's fencing token
	epoch      int64 // the stream epoch the token leads with
}

// fence returns the runner's token: the stream's incarnation and the
// counter of the acquire that made the lease the runner's.
func (r *leaseRunner) fence() FenceToken {
	return FenceToken{stream: r.key.Stream, shard: r.shard, epoch: r.taken.epoch, counter: r.taken.counter}
}

// status is r's part of a Status at now.
func (r *leaseRunner) status(now time.Time) ShardStatus {
	r.k.mu.Lock()
	sh := ShardStatus{Shard: r.c.set.publicID(r.id), Counter: r.k.lease.Counter, HandoffTo: r.k.lease.HandoffTo,
		Checkpoint: r.k.pending.seq, SubSequence: r.k.pending.sub}
	r.k.mu.Unlock()
	var lag Lag
	lag, sh.Read = r.lag.lag(now)
	sh.BehindLatest, sh.CheckpointAge = lag.BehindLatest, lag.CheckpointAge
	if stuckFor, left, knowLeft, ok := r.stuck(now); ok {
		r.h.stuckMu.Lock()
		seq := r.h.stuck.seq
		r.h.stuckMu.Unlock()
		sh.Stuck = &StuckRetry{For: stuckFor, Sequence: seq, AgesOutIn: left, AgesOutKnown: knowLeft}
	}
	return sh
}

// count counts n of e for r: in a Group, its metric carries r's stream
// (which replaces the group's name in the stream attribute).
func (r *leaseRunner) count(e event, n int64, kv ...attribute.KeyValue) {
	r.c.count(e, n, append(kv, r.c.set.attrs(r.id)...)...)
}

// shardAttrs are the attributes of r's per-shard metrics: its shard, and in
// a Group its stream.
func (r *leaseRunner) shardAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("stream", r.key.Stream), shardAttr(r.shard)}
}

// attrs are the attributes of r's measurements with kv: in a Group, its
// stream in place of the group's name.
func (r *leaseRunner) attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return r.c.ins.attrs(append(kv, r.c.set.attrs(r.id)...)...)
}
