package shardlease

import (
	"context"
	"fmt"
	"runtime/debug"
)

// StopReason says why this worker stopped reading a shard.
type StopReason string

// Stop reasons.
const (
	// StopHandedOff: another worker asked for the lease (balancing) and it is
	// released to that worker after the stop hook.
	StopHandedOff StopReason = "handed off"
	// StopShuttingDown: Run's context was cancelled (or the shard can no
	// longer be read, as when it was deleted); the lease is released after
	// the stop hook.
	StopShuttingDown StopReason = "shutting down"
	// StopLost: the lease was lost (another worker took it, or no renewal
	// succeeded for a lease duration). The handler's context is cancelled
	// before the stop hook runs, and nothing can be checkpointed any more.
	StopLost StopReason = "lost"
	// StopShardEnded: the shard was closed by a reshard and read to its end;
	// SHARD_END is written after the stop hook and the lease released.
	StopShardEnded StopReason = "shard ended"
)

// ShardStart tells a start hook where this worker starts reading a shard.
type ShardStart struct {
	// Stream and ShardID name the shard.
	Stream, ShardID string
	// Checkpoint is the shard's checkpoint: reading resumes after it (after
	// the user record SubSequence inside an aggregate when SubSequence >= 0).
	// It is ShardEnd for a shard finished already, and empty for a shard
	// never checkpointed, which is read from Position.
	Checkpoint  string
	SubSequence int64
	// Position is where a shard without a checkpoint is read from:
	// TrimHorizon (also for the child of a shard this application read),
	// Latest or AtTimestamp. Empty when Checkpoint is set.
	Position InitialPosition
}

// ShardStop tells a stop hook why this worker stops reading a shard, and
// lets a handler that buffers records checkpoint what it flushed.
type ShardStop struct {
	// Stream and ShardID name the shard.
	Stream, ShardID string
	// Reason is why the shard stops.
	Reason StopReason

	r *leaseRunner
}

// Checkpoint marks every record of the shard up to and including rec as
// processed, as Batch.Checkpoint does. Called from a stop hook for a handoff,
// a shutdown or a shard end, it is written by the final checkpoint that
// follows the hook. For a lost lease it fails with ErrLeaseLost.
func (s *ShardStop) Checkpoint(rec Record) error {
	if rec.SequenceNumber == "" {
		return errorf("%w: stream %s shard %s: the record has no sequence number", ErrInvalidConfig, s.Stream, s.ShardID)
	}
	return s.r.mark(rec.SequenceNumber, rec.SubSequenceNumber)
}

// ShardHooks are called as this worker starts and stops reading a shard,
// for handlers that keep per-shard state (buffers, open files, caches).
// Both run on the shard's own goroutine, never at the same time as the
// shard's handler: OnStart before the first batch, OnStop after the last
// handler call returned. Every OnStart is followed by exactly one OnStop. A
// panic in a hook is recovered and logged. Either may be nil.
type ShardHooks struct {
	// OnStart is called when this worker starts reading a shard, before the
	// first batch. ctx is the lease's context (as the handler's).
	OnStart func(ctx context.Context, start ShardStart)
	// OnStop is called when this worker stops reading a shard. For a
	// handoff, a shutdown and a shard end it runs before the final
	// checkpoint is written and the lease released, so a handler that
	// buffers records can flush them and call stop.Checkpoint; ctx is then
	// cancelled after the shutdown timeout (WithShutdownTimeout) or when the
	// lease is lost. For a lost lease it runs after the handler's context
	// was cancelled and the handler returned: drop what is buffered, another
	// worker reads those records again; ctx is then a fresh context bounded
	// by the shutdown timeout.
	OnStop func(ctx context.Context, stop *ShardStop)
}

// WithShardHooks sets hooks called as this worker starts and stops reading
// each shard. Default: none.
func WithShardHooks(h ShardHooks) Option { return func(c *config) { c.hooks = h } }

// started runs the start hook, before the first batch.
func (r *leaseRunner) started() {
	fn := r.c.cfg.hooks.OnStart
	if fn == nil {
		return
	}
	r.mu.Lock()
	s := ShardStart{Stream: r.key.Stream, ShardID: r.shard, Checkpoint: r.lease.Checkpoint, SubSequence: r.lease.SubSequence}
	r.mu.Unlock()
	if s.Checkpoint == "" {
		s.SubSequence = -1
		s.Position = r.c.cfg.position
		if r.fromStart {
			s.Position = TrimHorizon
		}
		if st := r.start(); !st.IsZero() {
			s.Position = st.Position
		}
	}
	defer r.recoverHook("OnStart")
	fn(r.leaseCtx, s)
}

// stopped runs the stop hook once, with reason, or (reason empty) with the
// reason the processor stopped for.
func (r *leaseRunner) stopped(reason StopReason) {
	if !r.stopHookRan.CompareAndSwap(false, true) {
		return
	}
	if reason == "" {
		asked := false
		select {
		case <-r.quit:
			asked = true
		default:
		}
		switch {
		case r.lost.Load():
			reason = StopLost
		case r.handedOff.Load():
			reason = StopHandedOff
		case asked || r.valid():
			// Asked to stop, or the reader ended by itself (the shard is
			// gone): the lease is released after the hook.
			reason = StopShuttingDown
		default:
			// No write succeeded for a lease duration: the lease may be
			// another worker's already.
			reason = StopLost
		}
	}
	if reason == StopLost {
		r.leaseCancel() // the handler's context ends before the hook runs
	}
	r.log.Debug("stopping the shard", "reason", string(reason))
	fn := r.c.cfg.hooks.OnStop
	if fn == nil {
		return
	}
	parent := r.leaseCtx
	if reason == StopLost {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithTimeout(parent, r.c.cfg.shutdownTimeout)
	defer cancel()
	defer r.recoverHook("OnStop")
	fn(ctx, &ShardStop{Stream: r.key.Stream, ShardID: r.shard, Reason: reason, r: r})
}

func (r *leaseRunner) recoverHook(name string) {
	if v := recover(); v != nil {
		r.log.Error("shard hook "+name+" panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}
}
