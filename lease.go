package shardlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/shardlease/shardlease/internal/seqnum"
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

func validateName(what, name string, maxLen int) error {
	if name == "" {
		return errorf("%w: %s is empty; use 1 to %d characters of a-z, A-Z, 0-9, '_', '.' and '-'", ErrInvalidName, what, maxLen)
	}
	if len(name) > maxLen {
		return errorf("%w: %s %q is %d characters long; use 1 to %d characters of a-z, A-Z, 0-9, '_', '.' and '-'", ErrInvalidName, what, name, len(name), maxLen)
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
	// Lag is the holder's lag as its last renewal or checkpoint wrote it
	// (see HolderLag); nil when the last write to the row carried none.
	Lag *Lag
	// Session is the key of the worker row whose session keeps the lease
	// (see SessionStore), and SessionGen that session's generation; "" and
	// 0 when the holder renews the row itself.
	Session    string
	SessionGen int64

	// fenceEpoch is the stream epoch of the fence floor the row's last
	// acquire read (see lease_floor.go); 0 on rows of stores that keep no
	// floor.
	fenceEpoch int64
	// incarnation is the random id the row was made with, so that a row
	// deleted and made again is not taken for the one observed before; ""
	// on rows made by earlier releases.
	incarnation string
}

// Held reports whether somebody holds the lease.
func (l Lease) Held() bool { return l.Owner != "" }

// KeptBy returns the session that keeps l (see SessionStore): its worker
// row's stream and owner and its generation, with the counter unknown (0).
// ok is false when l names no session: its holder renews the row itself.
func (l Lease) KeptBy() (s Worker, ok bool) {
	stream, owner, ok := strings.Cut(l.Session, ":"+workerMark)
	if !ok || l.SessionGen == 0 {
		return Worker{}, false
	}
	return Worker{Stream: stream, Owner: owner, Gen: l.SessionGen}, true
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
	// Gen is the generation of the session the row holds (see
	// SessionStore); 0 on a row that holds no session.
	Gen int64
	// Duration is the holder's lease duration, written by every open and
	// keep of a session; 0 when the row does not say.
	Duration time.Duration
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

// isNil reports whether v is nil or an interface holding a nil pointer (a
// typed nil client such as (*kinesis.Client)(nil), which would panic at the
// first call).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// StreamIdentity names one incarnation of a stream: a stream deleted and
// created again under the same name has the same name and ARN but another
// creation time, and Kinesis reuses its shard ids, so rows keyed
// "stream:shard" cannot tell the two apart by themselves.
type StreamIdentity struct {
	// Stream is the stream's name.
	Stream string
	// ARN is the stream's ARN.
	ARN string
	// Created is when the stream was created, as Kinesis reports it.
	Created time.Time
}

// Same reports whether id and other name the same incarnation.
func (id StreamIdentity) Same(other StreamIdentity) bool {
	return id.Stream == other.Stream && id.ARN == other.ARN && id.Created.Equal(other.Created)
}

func (id StreamIdentity) String() string {
	return fmt.Sprintf("%s (created %s)", id.ARN, id.Created.UTC().Format(time.RFC3339))
}

// Finished reports whether l's shard was read to its end.
func (l Lease) Finished() bool { return l.Checkpoint == ShardEnd }

// incarnationMark separates the user's owner id from the random incarnation
// in the identity a consumer writes into rows: "pod-0#a1b2c3d4e5f60718".
const incarnationMark = "#"

// incarnationBytes is the size of the random incarnation: 64 bits, so that
// two runs never write the same identity.
const incarnationBytes = 8

// newIncarnation returns the identity one run of a consumer (or one CLI
// command) writes into rows: the user's owner id, readable, plus a random
// incarnation. Two processes started with the same owner id (a reused pod
// name while the old pod still runs, two consumers of one stream in one
// process) thus never take each other's rows for their own.
func newIncarnation(owner string) string {
	var b [incarnationBytes]byte
	_, _ = rand.Read(b[:])
	return owner + incarnationMark + hex.EncodeToString(b[:])
}

// NewOwnerIdentity returns a fresh identity for owner: the owner id plus a
// random 64-bit incarnation, as a consumer writes into rows for each run.
// Tools that write lease rows themselves (the shardlease CLI does) use one
// per command, so that no two writers ever share an identity.
func NewOwnerIdentity(owner string) string { return newIncarnation(owner) }

// OwnerName returns the owner id a user configured (WithOwnerID) from an
// identity written in a row, by cutting the incarnation off:
// OwnerName("pod-0#a1b2c3d4e5f60718") is "pod-0". An identity without an
// incarnation (written by an earlier release, or by hand) is returned as it
// is.
func OwnerName(identity string) string {
	i := strings.LastIndex(identity, incarnationMark)
	if i < 0 || len(identity)-i-1 != 2*incarnationBytes {
		return identity
	}
	if _, err := hex.DecodeString(identity[i+1:]); err != nil {
		return identity
	}
	return identity[:i]
}

// Start is where a reader of a shard starts while the shard's row holds no
// checkpoint. It is decided once, when the row is made, and kept on the row,
// so that it does not depend on which other rows exist when the lease is
// taken (a parent's row may be gone by then).
type Start struct {
	// Position is TrimHorizon, Latest or AtTimestamp; empty on rows made
	// without a Start.
	Position InitialPosition
	// Timestamp is the AtTimestamp position; zero otherwise.
	Timestamp time.Time
}

// IsZero reports whether no start was recorded.
func (s Start) IsZero() bool { return s.Position == "" }

// String returns the position, with the timestamp for AtTimestamp.
func (s Start) String() string {
	if s.Position == AtTimestamp {
		return string(s.Position) + " " + s.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	return string(s.Position)
}

// validate checks a Start before a store writes it.
func (s Start) validate() error {
	switch s.Position {
	case "", TrimHorizon, Latest:
		if !s.Timestamp.IsZero() {
			return errorf("%w: start %s has a timestamp; only %s takes one", ErrInvalidConfig, s.Position, AtTimestamp)
		}
	case AtTimestamp:
		if s.Timestamp.IsZero() {
			return errorf("%w: start %s has no timestamp", ErrInvalidConfig, AtTimestamp)
		}
	default:
		return errorf("%w: start position %q is not %s, %s or %s", ErrInvalidConfig, s.Position, TrimHorizon, Latest, AtTimestamp)
	}
	return nil
}

func identityKey(stream string) LeaseKey {
	return LeaseKey{Stream: stream, Shard: identityMark + "identity"}
}

// isIdentityKey reports whether a lease_key value is an identity row's.
func isIdentityKey(key string) bool {
	_, after, ok := strings.Cut(key, ":")
	return ok && strings.HasPrefix(after, identityMark)
}

// ValidateTableName checks a DynamoDB table name: 3 to 255 characters of
// a-z, A-Z, 0-9, '_', '.' and '-'.
func ValidateTableName(name string) error {
	if len(name) < 3 && name != "" {
		return errorf("%w: table name %q is shorter than 3 characters; use 3 to 255 characters of a-z, A-Z, 0-9, '_', '.' and '-'", ErrInvalidName, name)
	}
	return validateName("table name", name, 255)
}

// identityMark starts the part after the colon of a stream's identity row:
// "stream:#identity". '#' never appears in a shard id.
const identityMark = "#"

// validCheckpoint checks a checkpoint value before it is written.
func validCheckpoint(checkpoint string, subSequence int64) error {
	if checkpoint == "" {
		return errorf("%w: checkpoint is empty; pass a record's sequence number or ShardEnd", ErrInvalidConfig)
	}
	if subSequence < -1 {
		return errorf("%w: sub-sequence %d is negative; pass -1 for a whole record", ErrInvalidConfig, subSequence)
	}
	if checkpoint == ShardEnd {
		return nil
	}
	if !seqnum.IsSequence(checkpoint) {
		return errorf("%w: checkpoint %q is not a sequence number (decimal digits) or %s", ErrInvalidConfig, checkpoint, ShardEnd)
	}
	return nil
}

// streamNameOfARN returns the stream name in a Kinesis stream ARN
// ("arn:<partition>:kinesis:<region>:<account>:stream/<name>").
func streamNameOfARN(arn string) (string, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "kinesis" {
		return "", false
	}
	name, ok := strings.CutPrefix(parts[5], "stream/")
	if !ok || ValidateStreamName(name) != nil {
		return "", false
	}
	return name, true
}
