package shardlease

import (
	"context"
	"slices"
	"time"
)

// TableChecker is implemented by stores that can verify their backing table
// before the consumer starts (DynamoStore does).
type TableChecker interface {
	CheckTable(ctx context.Context) error
}

// IdentityStore is implemented by lease stores that record which
// incarnation of a stream its rows belong to, in one row per stream (both
// stores of this package do). The consumer checks it at start and at every
// shard sync, and refuses to run on rows of a stream that was deleted and
// created again (see ErrStreamRecreated).
type IdentityStore interface {
	// StreamIdentity returns the identity recorded for stream. None recorded
	// is an error matching ErrLeaseNotFound.
	StreamIdentity(ctx context.Context, stream string) (StreamIdentity, error)

	// RecordStreamIdentity records id for its stream if none is recorded
	// (created=true) and returns the identity recorded now, which differs
	// from id when another one was recorded before.
	RecordStreamIdentity(ctx context.Context, id StreamIdentity) (recorded StreamIdentity, created bool, err error)

	// ResetStream deletes every row of id.Stream (leases, checkpoints and
	// worker rows) and records id as the stream's identity. It is for
	// operators, with every consumer of the stream stopped: it writes
	// without fencing. It returns how many lease rows it deleted.
	ResetStream(ctx context.Context, id StreamIdentity) (deleted int, err error)
}

// tableNamer is implemented by stores with a table name (DynamoStore).
type tableNamer interface{ Table() string }

// HandoffWithdrawer is implemented by lease stores that let a taker withdraw
// a handoff request it made (both stores of this package do). A worker that
// shuts down withdraws its pending requests, so that no holder hands a lease
// to a worker that is gone. With a store without it, such a lease waits a
// lease duration for the gone taker instead.
type HandoffWithdrawer interface {
	// WithdrawHandoff removes the handoff request naming taker from key's
	// row, without bumping the counter. It reports whether it removed one;
	// a request already answered, or naming another taker, is left alone
	// and is not an error. A holder releasing the lease afterwards frees it
	// instead of handing it to taker.
	WithdrawHandoff(ctx context.Context, key LeaseKey, taker string) (bool, error)
}

type holderDurationKey struct{}

// The holder's lease duration is written on the row (attribute
// lease_duration, milliseconds) by every acquire, renewal and checkpoint of
// a consumer, so that a worker configured with a shorter lease duration
// (during a rolling deploy that changes WithLeaseDuration) still waits out
// the holder's: a taker judges a lease expired only once its counter stood
// still for the longer of its own lease duration and the row's.

// WithHolderLeaseDuration returns a context that carries the lease duration
// of the worker making a write. The consumer passes it to Acquire, Renew and
// Checkpoint; a LeaseStore writes it on the row (see HolderLeaseDuration).
func WithHolderLeaseDuration(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, holderDurationKey{}, d)
}

// HolderLeaseDuration returns the lease duration carried by ctx (see
// WithHolderLeaseDuration), or 0. A LeaseStore writes a positive one on the
// row in Acquire, Renew and Checkpoint and returns it in Lease.Duration;
// Acquire without one clears the row's. A store that keeps no duration
// works, but then a fleet must not mix lease durations.
func HolderLeaseDuration(ctx context.Context) time.Duration {
	d, _ := ctx.Value(holderDurationKey{}).(time.Duration)
	return max(d, 0)
}

// expiresAfter is how long a taker whose own lease duration is own waits,
// with l's counter standing still, before it may take l: the longer of its
// own and the holder's lease duration written on the row.
func expiresAfter(l Lease, own time.Duration) time.Duration {
	return max(own, l.Duration)
}

// LineageStore is implemented by lease stores that keep where a shard starts
// on its row and can delete the rows of finished shards (both stores of this
// package do). The consumer uses it, when the store has it, to decide where
// a child shard starts when its row is made, to fill in the parents of rows
// made without them (imported or older rows), and to delete rows that can no
// longer matter. A store without it still works, but its table only grows,
// and a child whose parent row was deleted starts at the initial position.
type LineageStore interface {
	// CreateAt is Create that also records start on the new row. An
	// existing row is not changed (created=false, no error).
	CreateAt(ctx context.Context, key LeaseKey, parents []string, start Start) (created bool, err error)

	// SetLineage records parents and start on the row of l, a row nobody
	// has read yet: it succeeds only while the row is free, holds no
	// checkpoint and its counter still equals l.Counter, and bumps the
	// counter. Otherwise it fails with ErrLeaseHeld (ErrLeaseNotFound when
	// the row is gone).
	SetLineage(ctx context.Context, l Lease, parents []string, start Start) (Lease, error)

	// DeleteFinished deletes the row of l if its checkpoint is ShardEnd and
	// its counter still equals l.Counter. It reports whether it deleted the
	// row; a row that is gone, moved on or not finished is left alone and is
	// not an error.
	DeleteFinished(ctx context.Context, l Lease) (bool, error)
}

// LeaseStore keeps the lease rows. Every method takes a context first and
// honours its cancellation. Every successful write moves the fencing
// counter up (by one, except that an Acquire may move it further, as the
// stores of this package do to pass the stream's fence floor) and returns
// the lease as written; the returned lease is the handle for the next
// write.
//
// The context of Acquire, Renew and Checkpoint carries the writer's lease
// duration (HolderLeaseDuration). A store writes a positive one on the row
// and returns it in Lease.Duration, so that takers configured with a shorter
// lease wait out the holder's; a store that drops it still fences every
// write, but one reader per shard then holds only while every worker runs
// the same lease duration.
//
// Implementations must be safe for concurrent use.
type LeaseStore interface {
	// Create writes a free row for key with the given parents if the row does
	// not exist. It returns created=false and no error when the row exists
	// already; the existing row is not changed.
	Create(ctx context.Context, key LeaseKey, parents []string) (created bool, err error)

	// Get returns the row for key, read consistently. A missing row is an
	// error matching ErrLeaseNotFound.
	Get(ctx context.Context, key LeaseKey) (Lease, error)

	// List returns every row of stream, and no row of any other stream,
	// ordered by shard id.
	List(ctx context.Context, stream string) ([]Lease, error)

	// Acquire makes owner the holder of key. It succeeds when the row is free
	// or when its counter still equals observed (the counter the caller saw
	// unchanged for a whole lease duration, or saw when it was asked to take
	// over). Otherwise it fails with ErrLeaseHeld. A missing row fails with
	// ErrLeaseNotFound. The counter it writes is above the row's; the stores
	// of this package reserve it from the stream's fence floor, so that it is
	// also above every counter an earlier acquire of the stream wrote, on
	// any row (see FenceToken).
	Acquire(ctx context.Context, key LeaseKey, owner string, observed int64) (Lease, error)

	// Renew extends held. It succeeds only while the row's owner and counter
	// equal held's; otherwise it fails with ErrLeaseLost (also when the row
	// is gone). expiry is written for operators to read.
	Renew(ctx context.Context, held Lease, expiry time.Time) (Lease, error)

	// Checkpoint records progress and renews held in one write, under the
	// same condition as Renew. subSequence is -1 unless the checkpoint is
	// inside an aggregated record.
	Checkpoint(ctx context.Context, held Lease, checkpoint string, subSequence int64, expiry time.Time) (Lease, error)

	// Release frees held so that anybody may acquire it at once, keeping the
	// checkpoint. If held names a pending handoff (held.HandoffTo, as the
	// renewal that carried the request returned it), the row is released to
	// that taker instead, while the row still names it; a handle that has
	// not seen the request frees the row. It succeeds only while the row's owner and
	// counter equal held's; when the row is free already (released twice) it
	// returns the row and no error. When somebody else holds it, it fails with
	// ErrLeaseLost.
	Release(ctx context.Context, held Lease) (Lease, error)

	// RequestHandoff asks the live holder of current.Key to hand it to taker.
	// It succeeds only while the row's owner is still current.Owner and no
	// other handoff is pending, and fails with ErrLeaseHeld otherwise (or
	// ErrLeaseNotFound). Of the writes to a lease row, it alone leaves the
	// counter as it is (the holder's own writes, acquiring, and copying
	// progress in with Import or a legacy adoption all bump it), so that
	// the holder keeps renewing, sees HandoffTo in the lease its next renewal
	// returns, finishes its batch, checkpoints and releases, which makes the
	// taker the owner. A taker whose request goes unanswered for a whole lease
	// duration acquires the lease the ordinary way.
	RequestHandoff(ctx context.Context, current Lease, taker string) (Lease, error)
}

// WorkerStore is implemented by lease stores that also keep worker rows (both
// stores of this package do). The consumer uses it, when the store has it, so
// that workers starting together, or joining a stream whose shards are all
// held, see each other before they hold anything and take their share in one
// round instead of overshooting and handing leases back. A store without it
// still works: a worker is then seen only once it holds a lease.
type WorkerStore interface {
	// ListWithWorkers returns what List returns and the stream's worker
	// rows, ordered by owner, from one read of the table.
	ListWithWorkers(ctx context.Context, stream string) ([]Lease, []Worker, error)

	// Heartbeat creates owner's worker row for stream, or bumps its counter,
	// and returns the row as written.
	Heartbeat(ctx context.Context, stream, owner string) (Worker, error)

	// RemoveWorker deletes w's row if its counter still equals w.Counter.
	// It reports whether it deleted the row; a row that is gone or has moved
	// on is left alone and is not an error.
	RemoveWorker(ctx context.Context, w Worker) (bool, error)
}

// EventualLister is implemented by worker stores that can list a stream's
// rows more cheaply when the listing may be a moment old (DynamoStore: an
// eventually consistent Scan, which costs half the read capacity of a
// consistent one). The consumer's take rounds list this way when the store
// has it; every decision a take round makes from its listing is carried out
// by a conditional write on the counter it saw, so a row read before its
// latest write only makes that write fail, and expiry is timed from the first
// listing that showed a counter, which comes after the write that set it. A
// wrapper of a store that changes what ListWithWorkers returns should
// implement this too, or hide it (the consumer prefers it).
type EventualLister interface {
	// ListWithWorkersEventually returns what ListWithWorkers returns, except
	// that each row may be as it was a moment before its latest write.
	ListWithWorkersEventually(ctx context.Context, stream string) ([]Lease, []Worker, error)
}

// GroupLister is implemented by worker stores that can list the rows of
// several streams of one table, and one stream's worker rows, from one read
// of the table (both stores of this package do). A Group lists this way,
// so that the streams it reads from one table cost one listing per take
// interval between them, not one each; with a store without it, a Group
// lists each stream and the worker rows in reads of their own.
type GroupLister interface {
	// ListStreams returns the lease rows of every stream in streams,
	// ordered by stream and then shard id, and the worker rows of
	// workersOf, ordered by owner. consistent asks for a consistent read;
	// without it each row may be as it was a moment before its latest
	// write (as ListWithWorkersEventually).
	ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]Lease, []Worker, error)
}

// StreamRemover is implemented by lease stores that can delete the rows of
// a stream nobody reads any more (both stores of this package do). A Group
// with GroupConfig.DeleteRemovedAfter calls it once that wait has passed
// since a stream left the group and no worker reads it.
type StreamRemover interface {
	// DeleteStreamRows deletes every lease row of stream that nobody holds,
	// and each row whose shard stale names while its counter still equals
	// the one given (a row the caller saw stand still for a lease duration:
	// its holder is gone), each with a delete conditional on that; and the
	// stream's worker rows. It leaves the identity row until no lease row
	// is left. It returns how many lease rows it deleted and how many it
	// left because they were held (call it again later).
	DeleteStreamRows(ctx context.Context, stream string, stale map[string]int64) (deleted, held int, err error)
}

// NoteStore is implemented by stores that let the worker coordinating a
// stream reach the holders of its leases without every worker listing the
// table: the coordinator writes a note on a row the holder renews anyway, and
// the holder reads it in the row its next renewal returns. Both stores
// implement it; without it every worker lists the stream's rows each take
// interval, as before coordination.
type NoteStore interface {
	// Note writes note on current's row while its owner is still
	// current.Owner. Like RequestHandoff it leaves the counter, and every
	// other attribute, as it is, so the holder's next renewal succeeds and
	// returns it. It fails with ErrLeaseHeld when the owner changed (or
	// ErrLeaseNotFound).
	Note(ctx context.Context, current Lease, note string) (Lease, error)
	// GetEventually returns key's row as Get does, except that it may be as
	// it was a moment before its latest write (an eventually consistent
	// read: half the cost of Get's).
	GetEventually(ctx context.Context, key LeaseKey) (Lease, error)
}

// normalStart is start as the stores keep it: timestamps to the millisecond.
func normalStart(s Start) Start {
	if !s.Timestamp.IsZero() {
		s.Timestamp = time.UnixMilli(s.Timestamp.UnixMilli())
	}
	return s
}

func normalParents(parents []string) ([]string, error) {
	for _, p := range parents {
		if err := ValidateShardID(p); err != nil {
			return nil, errorf("parent: %w", err)
		}
	}
	if len(parents) == 0 {
		return nil, nil
	}
	out := slices.Clone(parents)
	slices.Sort(out)
	return slices.Compact(out), nil
}

func validIdentity(id StreamIdentity) error {
	if err := ValidateStreamName(id.Stream); err != nil {
		return err
	}
	if id.ARN == "" || id.Created.IsZero() {
		return errorf("%w: stream identity of %s has no ARN or creation time", ErrInvalidConfig, id.Stream)
	}
	return nil
}

// storeCaps are the optional capabilities of a lease store, resolved once
// when a consumer is made. A nil field is a capability the store lacks; the
// doc of each interface says what the consumer does without it.
type storeCaps struct {
	table    TableChecker
	workers  WorkerStore
	eventual EventualLister // only with workers: it lists worker rows too
	// notes is nil unless the store keeps worker rows too: coordination
	// needs both (without it every worker lists).
	notes NoteStore
	// sessions is nil unless the store keeps worker rows too; packed is
	// nil unless it keeps sessions.
	sessions  SessionStore
	packed    PackedCheckpointStore
	lineage   LineageStore
	identity  IdentityStore
	withdraws HandoffWithdrawer
	groups    GroupLister     // a Group lists its streams in one read with it
	remover   StreamRemover   // a Group deletes a removed stream's rows with it
	rewinder  Rewinder        // Rewind and overwriting imports clear checkpoints with it
	atCounter counterAcquirer // operators' tools take the exact row they read with it
	// tableName is the store's table ("" when it has none), for errors.
	tableName string
}

// createRow makes key's row if it is missing, with parents, and with start
// when the store keeps starts (lineage, its LineageStore, is not nil); it
// reports whether it made the row.
func createRow(ctx context.Context, store LeaseStore, lineage LineageStore, key LeaseKey, parents []string, start Start) (bool, error) {
	if lineage != nil {
		return lineage.CreateAt(ctx, key, parents, start)
	}
	return store.Create(ctx, key, parents)
}

// resolveCaps finds the optional capabilities of store.
func resolveCaps(store LeaseStore) storeCaps {
	var c storeCaps
	c.table, _ = store.(TableChecker)
	c.workers, _ = store.(WorkerStore)
	if c.workers != nil {
		c.eventual, _ = store.(EventualLister)
		c.notes, _ = store.(NoteStore)
		c.sessions, _ = store.(SessionStore)
		c.packed, _ = store.(PackedCheckpointStore)
	}
	c.lineage, _ = store.(LineageStore)
	c.identity, _ = store.(IdentityStore)
	c.withdraws, _ = store.(HandoffWithdrawer)
	c.groups, _ = store.(GroupLister)
	c.remover, _ = store.(StreamRemover)
	c.rewinder, _ = store.(Rewinder)
	c.atCounter, _ = store.(counterAcquirer)
	if tn, ok := store.(tableNamer); ok {
		c.tableName = tn.Table()
	}
	return c
}

// Rewinder is implemented by lease stores that can move a row's progress
// back (both stores of this package do): clear its checkpoint, so that a
// reader starts where the row's recorded Start says, or mark the shard
// finished. Rewind, and ImportCheckpoints with WithImportOverwrite, need it
// to move a row to no checkpoint. The consumer never calls it. Without it
// progress only moves by Checkpoint, to a sequence number or ShardEnd:
// Rewind then refuses with ErrInvalidConfig before it writes anything.
type Rewinder interface {
	// RewindRow sets held's checkpoint to checkpoint, which is "" (none: a
	// reader starts at start) or ShardEnd, removes its sub-sequence, and
	// records start (the zero Start removes it). Like Checkpoint it
	// succeeds only while the row's owner and counter equal held's, and
	// bumps the counter; otherwise it fails with ErrLeaseLost (also when
	// the row is gone). It leaves the expiry as it is.
	RewindRow(ctx context.Context, held Lease, checkpoint string, start Start) (Lease, error)
}

// validRewind checks the arguments of RewindRow.
func validRewind(checkpoint string, start Start) error {
	if checkpoint != "" && checkpoint != ShardEnd {
		return errorf("%w: a rewind sets the checkpoint to none or %s, not %q; move it to a sequence number with Checkpoint", ErrInvalidConfig, ShardEnd, checkpoint)
	}
	return start.validate()
}

// sameStart reports whether a and b name the same start.
func sameStart(a, b Start) bool {
	return a.Position == b.Position && a.Timestamp.Equal(b.Timestamp)
}
