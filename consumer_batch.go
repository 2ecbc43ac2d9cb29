package shardlease

import (
	"context"
	"time"
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
	// StopStreamRemoved: the shard's stream left its Group's set; the
	// batch in hand was finished, and the lease is released after the stop
	// hook with the final checkpoint.
	StopStreamRemoved StopReason = "stream removed"
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
	return s.r.mark(positionOf(rec))
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

// Record is one user record handed to a Handler.
type Record struct {
	// SequenceNumber is the Kinesis sequence number of the record.
	SequenceNumber string
	// SubSequenceNumber is the index of a user record inside a KPL aggregated
	// record, or -1 for a plain record.
	SubSequenceNumber int64
	// PartitionKey is the record's partition key.
	PartitionKey string
	// ExplicitHashKey is the explicit hash key of a de-aggregated user record
	// that had one; empty otherwise.
	ExplicitHashKey string
	// Data is the record's payload.
	Data []byte
	// ApproximateArrivalTimestamp is when Kinesis accepted the record.
	ApproximateArrivalTimestamp time.Time
}

// Batch is the records of one GetRecords call on one shard, in order.
type Batch struct {
	// Stream and ShardID name where the records come from.
	Stream  string
	ShardID string
	// Records is never empty.
	Records []Record
	// MillisBehindLatest is how far the batch is behind the tip of the
	// stream, as Kinesis reported it.
	MillisBehindLatest int64

	r    *leaseRunner
	end  bool // the last batch of a closed shard
	lane int  // the lane handing it (WithKeyConcurrency), else 0
}

// Checkpoint marks every record of the shard up to and including rec as
// processed. The checkpoint is written with the lease's next renewal (see
// WithCheckpointInterval); call Flush to write it at once. A checkpoint never
// moves backwards: an older rec than the latest is ignored. Handlers that
// finish work asynchronously call it once the work is done, from any
// goroutine; it keeps working after the handler returns, for as long as the
// lease is held. It fails with an error matching ErrLeaseLost once the lease
// is lost, released or handed over: the next holder handles those records
// again. At a handoff or shutdown the final write waits (half the grace
// period at most) for the checkpoints of every batch the handler returned
// nil for.
//
// With WithKeyConcurrency it marks the batch's own records up to and
// including rec as processed; the checkpoint follows the watermark.
func (b *Batch) Checkpoint(rec Record) error {
	if rec.SequenceNumber == "" {
		return errorf("%w: stream %s shard %s: the record has no sequence number", ErrInvalidConfig, b.Stream, b.ShardID)
	}
	if b.r == nil {
		return b.notHandedOut("Checkpoint")
	}
	if ln := b.r.h.lanes; ln != nil {
		return ln.checkpoint(b, rec)
	}
	return b.r.mark(positionOf(rec))
}

// Flush writes the pending checkpoint now (and renews the lease), waiting
// for the write. It fails with ErrLeaseLost once the lease is gone.
func (b *Batch) Flush(ctx context.Context) error {
	if b.r == nil {
		return b.notHandedOut("Flush")
	}
	return b.r.flush(ctx)
}

// notHandedOut is the error of a checkpoint call on a batch that no
// consumer handed out (one a test made): there is no lease to write to.
func (b *Batch) notHandedOut(call string) error {
	return errorf("%w: stream %s shard %s: %s on a batch no consumer handed out (made by a test): there is no lease to write; run the handler under a Consumer to test checkpoints",
		ErrInvalidConfig, b.Stream, b.ShardID, call)
}

// DeadLetterFunc receives records of a shard that its handler failed on
// WithMaxAttempts times each, with the error of the last failure; today one
// record per call, at its place in the shard's order. Store them somewhere
// to look at later (a queue, a table, a log). Returning nil lets the
// checkpoint move past them; returning an error calls it again after a
// backoff, for as long as the lease is held, and nothing after the records
// is handled or checkpointed meanwhile. ctx is cancelled when the lease is
// lost. A panic is recovered and treated as an error. In a Group, shard is
// "stream/shard".
type DeadLetterFunc func(ctx context.Context, shard string, records []Record, err error) error
