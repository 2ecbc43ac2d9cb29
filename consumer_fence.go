package shardlease

// This file is the fencing token a handler hands to its sink, so that the
// sink itself can refuse the writes of a holder that lost its lease.
//
// A holding's token is the counter of the acquire that began it (a lease
// received by handoff begins with one too), led by the stream's epoch:
// fixed for the holding. Both come from the lease table alone. The stores
// of this package reserve every acquire's counter from the stream's fence
// floor row, which only grows and which no deletion removes, and write the
// floor's epoch beside it (see lease_floor.go); so every later holding of a
// shard has a greater token than every earlier one, whichever worker holds
// it and whatever that worker could learn from Kinesis, across handoffs,
// rewinds and imports (fenced writes that bump the counter), rows deleted
// and made again, and re-created streams (whose later creation time the
// floor's epoch takes). What no token survives is a new lease table (or the
// floor row deleted by hand): counters start again at zero, the new holder's
// tokens are lower than those a sink kept, and the sink refuses them until
// an operator clears the shard's fence there. That errs on the safe side
// (the shard stalls, no effect is applied twice). Over a store that keeps
// no floor, a token is the row's counter led by the epoch the worker learnt
// itself, and orders only while the row lives.

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ErrFenceMismatch is what FenceToken.Compare returns for two tokens of
// different shards (or a zero token): their order means nothing.
var ErrFenceMismatch = errors.New("shardlease: fence tokens of different shards cannot be compared")

// FenceToken is the fencing token of one holding of one shard's lease: every
// batch of a holding carries the same token, and any later holding of the
// shard carries a greater one, whichever worker holds it. A sink that keeps
// per shard the highest token it applied and refuses writes with a lower one
// refuses every write of a holder that lost its lease, once the next holder
// wrote (see docs/handlers.md, "Exactly-once effects"). Tokens of different
// shards are not ordered: Compare refuses them.
type FenceToken struct {
	stream, shard string
	epoch         int64 // the stream's creation time (unix ms); 0 when unknown
	counter       int64 // the lease counter the holding's acquire wrote
}

// fenceValueLen is the length of a token's Value: two 16-digit hex numbers
// and a dot.
const fenceValueLen = 33

// Fence returns the fencing token of the holding this batch comes from.
// A batch no consumer handed out (one a test made) has the zero token,
// which Compare refuses.
func (b *Batch) Fence() FenceToken {
	if b.r == nil {
		return FenceToken{}
	}
	return b.r.fence()
}

// Fence returns the fencing token of the holding that stops, for a stop
// hook that flushes buffered records to a sink.
func (s *ShardStop) Fence() FenceToken { return s.r.fence() }

// Stream returns the stream of the token's shard.
func (t FenceToken) Stream() string { return t.stream }

// ShardID returns the token's shard.
func (t FenceToken) ShardID() string { return t.shard }

// Counter returns the lease counter the holding began at: the counter its
// acquire wrote.
func (t FenceToken) Counter() int64 { return t.counter }

// Epoch returns the stream's creation time the token leads with (a
// re-created stream's is later), or the zero time when the consumer could
// not learn the stream's identity.
func (t FenceToken) Epoch() time.Time {
	if t.epoch == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t.epoch).UTC()
}

// Scope returns "stream:shard": the key a sink keeps the shard's highest
// token under. Only tokens of one scope are ordered.
func (t FenceToken) Scope() string { return LeaseKey{Stream: t.stream, Shard: t.shard}.String() }

// IsZero reports whether t is the zero token, which no batch carries.
func (t FenceToken) IsZero() bool { return t == FenceToken{} }

// Value returns the token as 33 characters of fixed width whose byte order
// is the tokens' order within a scope ("0000018f3a2b1c00.000000000000002a"):
// a SQL or DynamoDB sink stores it and compares it with <= in a condition.
func (t FenceToken) Value() string {
	return fmt.Sprintf("%016x.%016x", uint64(t.epoch), uint64(t.counter))
}

// Bytes returns the token as 16 bytes whose unsigned byte order is the
// tokens' order within a scope, for a binary column or attribute.
func (t FenceToken) Bytes() []byte {
	out := make([]byte, 16)
	binary.BigEndian.PutUint64(out, uint64(t.epoch))
	binary.BigEndian.PutUint64(out[8:], uint64(t.counter))
	return out
}

// String returns the scope and the value, "orders:shardId-000000000001/...".
func (t FenceToken) String() string { return t.Scope() + "/" + t.Value() }

// Compare orders t and u: -1 when t is older, 0 for one holding, +1 when t
// is newer. Tokens of different scopes, or a zero token, are an error
// matching ErrFenceMismatch.
func (t FenceToken) Compare(u FenceToken) (int, error) {
	if t.IsZero() || u.IsZero() || t.stream != u.stream || t.shard != u.shard {
		return 0, fmt.Errorf("%w: %s and %s", ErrFenceMismatch, t, u)
	}
	switch {
	case t.epoch != u.epoch:
		return cmp.Compare(t.epoch, u.epoch), nil
	default:
		return cmp.Compare(t.counter, u.counter), nil
	}
}

// ParseFenceToken returns the token of scope ("stream:shard", as Scope
// gives it) whose Value is value.
func ParseFenceToken(scope, value string) (FenceToken, error) {
	key, err := ParseLeaseKey(scope)
	if err != nil {
		return FenceToken{}, fmt.Errorf("shardlease: fence token scope %q: %w", scope, err)
	}
	epoch, counter, ok := strings.Cut(value, ".")
	if len(value) != fenceValueLen || !ok {
		return FenceToken{}, fmt.Errorf("%w: fence token %q of %s: want 16 hex digits, a dot and 16 hex digits, as FenceToken.Value gives", ErrInvalidConfig, value, scope)
	}
	e, err1 := hexInt(epoch)
	c, err2 := hexInt(counter)
	if err := errors.Join(err1, err2); err != nil {
		return FenceToken{}, fmt.Errorf("%w: fence token %q of %s: %w", ErrInvalidConfig, value, scope, err)
	}
	return FenceToken{stream: key.Stream, shard: key.Shard, epoch: e, counter: c}, nil
}

func hexInt(s string) (int64, error) {
	if _, err := hex.DecodeString(s); err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 16, 64)
	return int64(n), err
}

// FencePosition returns the record's place in its shard as a string whose
// byte order is the shard's order: the sequence number's length and digits,
// then the sub-sequence (a whole record after its sub-records). A sink keeps
// the last one it applied beside the token and refuses a write at or below
// it: that record's effect is in already.
func (r Record) FencePosition() string {
	seq := strings.TrimLeft(r.SequenceNumber, "0")
	sub := "~" // a whole record orders after every sub-record of its aggregate
	if r.SubSequenceNumber >= 0 {
		sub = fmt.Sprintf("%020d", r.SubSequenceNumber)
	}
	return fmt.Sprintf("%03d:%s.%s", len(seq), seq, sub)
}

// epochOf is a stream incarnation as a token leads with it.
func epochOf(id StreamIdentity) int64 { return max(id.Created.UnixMilli(), 0) }

// fenceEpoch is the stream's incarnation as this worker learnt it: set by
// the scheduler once it checked the stream's identity at start, before any
// lease is taken; zero when the identity is not known. A holding's token
// leads with the fence floor's epoch its acquire read, which is at least
// this (see holdingEpoch); this one counts alone only over a store that
// keeps no floor.
type fenceEpoch struct{ atomic.Int64 }

// learn records the stream's identity as checked.
func (e *fenceEpoch) learn(id StreamIdentity) { e.Store(epochOf(id)) }
