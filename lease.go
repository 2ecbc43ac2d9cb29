package shardlease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ShardEnd is the checkpoint written once every record of a closed shard has
// been processed. A child shard is not read until each of its parents holds
// it (or the parent's row is gone).
const ShardEnd = "SHARD_END"

// LeaseKey names one lease: a shard of a stream. Its string form, used as the
// DynamoDB partition key, is "stream:shard".
type LeaseKey struct {
	Stream string
	Shard  string
}

// String returns "stream:shard".
func (k LeaseKey) String() string { return k.Stream + ":" + k.Shard }

// Validate reports whether both halves are names Kinesis would accept.
func (k LeaseKey) Validate() error {
	if err := ValidateStreamName(k.Stream); err != nil {
		return err
	}
	return ValidateShardID(k.Shard)
}

// ParseLeaseKey parses the "stream:shard" form written by LeaseKey.String.
// Stream names cannot contain ':' so the first colon separates the halves.
func ParseLeaseKey(s string) (LeaseKey, error) {
	stream, shard, ok := strings.Cut(s, ":")
	if !ok {
		return LeaseKey{}, errorf("%w: lease key %q has no ':'; a lease key is \"stream:shard\", e.g. \"orders:shardId-000000000000\"", ErrInvalidName, s)
	}
	k := LeaseKey{Stream: stream, Shard: shard}
	if err := k.Validate(); err != nil {
		return LeaseKey{}, errorf("shardlease: lease key %q: %w", s, err)
	}
	return k, nil
}

// ValidateStreamName checks a Kinesis stream name: 1 to 128 characters of
// a-z, A-Z, 0-9, '_', '.' and '-'.
func ValidateStreamName(name string) error {
	return validateName("stream", name, 128)
}

// ValidateShardID checks a Kinesis shard id: 1 to 128 characters of a-z, A-Z,
// 0-9, '_', '.' and '-' (for example "shardId-000000000000").
func ValidateShardID(id string) error {
	return validateName("shard id", id, 128)
}

func validateName(what, name string, max int) error {
	if name == "" {
		return errorf("%w: %s is empty; use 1 to %d characters of a-z, A-Z, 0-9, '_', '.' and '-'", ErrInvalidName, what, max)
	}
	if len(name) > max {
		return errorf("%w: %s %q is %d characters long; use 1 to %d characters of a-z, A-Z, 0-9, '_', '.' and '-'", ErrInvalidName, what, name, len(name), max)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !nameByte(c) {
			return errorf("%w: %s %q has %q at byte %d; use only a-z, A-Z, 0-9, '_', '.' and '-'", ErrInvalidName, what, name, rune(c), i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// Lease is one row of the lease table as a store last saw it. A Lease returned
// by a successful write is the caller's handle: renew, checkpoint and release
// succeed only while the row's owner and counter still equal the handle's.
type Lease struct {
	// Key names the stream and shard.
	Key LeaseKey
	// Owner is the holder's owner id; empty when the lease is free.
	Owner string
	// Counter is the fencing counter, bumped by every write to the row.
	Counter int64
	// Checkpoint is the sequence number of the last processed record, ShardEnd
	// once the shard was read to its end, or empty when nothing was processed.
	Checkpoint string
	// SubSequence is the sub-sequence number (KPL aggregation) of the last
	// processed user record within the Checkpoint record, or -1 when the
	// whole record was processed.
	SubSequence int64
	// Parents are the shard ids of the shards this one was split or merged
	// from.
	Parents []string
	// Start is where a reader starts while the row holds no checkpoint,
	// decided when the row was made (see LineageStore). It is the zero Start
	// on rows written without it: the consumer then decides when it takes
	// the lease.
	Start Start
	// HandoffTo is the owner id a live holder was asked to hand the lease to;
	// empty when no handoff is pending.
	HandoffTo string
	// Expiry is the holder's wall-clock estimate of when the lease runs out,
	// written for operators. It is never used for a decision: clocks skew.
	Expiry time.Time
	// Duration is the holder's lease duration as its last write put it on
	// the row (see HolderLeaseDuration); zero when the row does not say.
	// Takers wait the longer of their own lease duration and this one.
	Duration time.Duration
	// Note is what the worker that coordinates the stream last asked of the
	// holder (see NoteStore); empty when it asked nothing. Acquiring and
	// releasing the lease clear it.
	Note string
}

// Held reports whether somebody holds the lease.
func (l Lease) Held() bool { return l.Owner != "" }

// LeaseStore keeps the lease rows. Every method takes a context first and
// honours its cancellation. Every successful write bumps the fencing counter
// by one and returns the lease as written; the returned lease is the handle
// for the next write.
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
	// ErrLeaseNotFound.
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
	// checkpoint. If a handoff is pending, the row is released to the
	// requested taker instead. It succeeds only while the row's owner and
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

// Worker is a worker row: the presence of a running worker that holds no
// lease, so that other workers count it when they work out their fair share.
// A worker that holds a lease is counted through its leases and needs no row.
type Worker struct {
	// Stream is the stream the worker consumes.
	Stream string
	// Owner is the worker's owner id.
	Owner string
	// Counter is bumped by every heartbeat. Other workers judge the worker
	// alive while they see it move, as they judge leases: a row unchanged
	// for a lease duration, by the observer's own clock, is a worker gone.
	Counter int64
}

// Key returns the row's key: "stream:@owner". '@' never appears in a shard
// id, so a worker row is never mistaken for a lease.
func (w Worker) Key() string { return workerKey(w).String() }

// workerMark starts the part after the colon of a worker row's key.
const workerMark = "@"

// checkWorker checks the arguments of a worker-row operation.
func checkWorker(ctx context.Context, w Worker) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateStreamName(w.Stream); err != nil {
		return err
	}
	if w.Owner == "" {
		return errorf("%w: owner id is empty", ErrInvalidConfig)
	}
	return nil
}

// workerKey is a worker row's key, "stream:@owner", in the LeaseKey form
// the stores and their errors use.
func workerKey(w Worker) LeaseKey { return LeaseKey{Stream: w.Stream, Shard: workerMark + w.Owner} }

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

// Sentinel errors. Each store wraps them so that errors.Is finds them, with a
// typed error naming the table and key around them.
var (
	// ErrLeaseLost means a write to a lease the caller held was refused
	// because its owner or counter moved: somebody else took it. The caller
	// must stop processing the shard at once.
	ErrLeaseLost = errors.New("shardlease: lease lost")
	// ErrLeaseHeld means Acquire or RequestHandoff found the lease held by
	// somebody else with a counter other than the one observed.
	ErrLeaseHeld = errors.New("shardlease: lease held by another owner")
	// ErrLeaseNotFound means the row does not exist.
	ErrLeaseNotFound = errors.New("shardlease: lease not found")
	// ErrInvalidName means a stream name, shard id or table name is empty or
	// has characters the service does not allow.
	ErrInvalidName = errors.New("shardlease: invalid name")
	// ErrTableNotFound means the lease table does not exist.
	ErrTableNotFound = errors.New("shardlease: lease table not found")
	// ErrBadTableSchema means the lease table's key schema is not a single
	// string partition key named lease_key.
	ErrBadTableSchema = errors.New("shardlease: lease table has the wrong key schema")
	// ErrCorruptLease means a row's attributes cannot be decoded.
	ErrCorruptLease = errors.New("shardlease: corrupt lease row")
	// ErrInvalidConfig means an option or argument has a value that cannot
	// work.
	ErrInvalidConfig = errors.New("shardlease: invalid configuration")
)

// LeaseError names the table and lease a store operation failed on. Unwrap
// yields both the sentinel (ErrLeaseLost, ...) and the underlying cause, such
// as the SDK's error.
type LeaseError struct {
	Op    string // "acquire", "renew", "checkpoint", ...
	Table string // empty for MemoryStore
	Key   LeaseKey
	Err   error
}

func (e *LeaseError) Error() string {
	where := e.Key.String()
	if e.Table != "" {
		where = "table " + e.Table + ": " + where
	}
	return fmt.Sprintf("%s%s %s: %s", errPrefix, e.Op, where, bare(e.Err))
}

// Unwrap returns the wrapped error.
func (e *LeaseError) Unwrap() error { return e.Err }
