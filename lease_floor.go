package shardlease

// This file is the fence floor: one row per stream, "stream:#fence", that
// orders the fencing tokens of every holding of the stream's shards by the
// lease table alone.
//
// A holding's token is the counter its acquire wrote, led by an epoch. The
// counter of one row only grows, but a row can be deleted and made again
// (by hand, by a Group's DeleteRemovedAfter, by adopt-stream), and its
// counter would start again below the tokens sinks keep. So every acquire
// of the stores of this package first reserves a counter from the stream's
// floor row, with one atomic add that returns the floor's new value, and
// writes that value as the lease's counter. Every reservation is above every
// earlier one, so a later holding's token is above an earlier holding's on
// whichever row, made whenever. The floor row is never deleted: ResetStream
// and DeleteStreamRows keep it.
//
// The epoch is the stream's creation time as the table knows it, kept on the
// floor row and raised, never lowered: by RecordStreamIdentity and
// ResetStream, by an acquire whose worker knows the stream's identity
// (passed in the acquire's context), and, while it is zero, from the
// stream's identity row. So a worker that cannot call DescribeStreamSummary
// carries the same epoch as one that can; and the epoch of a holding is the
// one its acquire read, fixed for the holding.
//
// The one thing no floor survives is a new lease table (or the floor row
// deleted by hand): counters start again at zero there.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// fenceFloor is a stream's floor as one reservation returned it.
type fenceFloor struct {
	epoch   int64 // the stream's creation time (unix ms); 0 when the table does not know it
	counter int64 // the counter reserved: above every earlier reservation
}

// floorKey is the key of stream's floor row, "stream:#fence". Like the
// identity row's, its shard part starts with identityMark, so listings
// never take it for a lease.
func floorKey(stream string) LeaseKey { return LeaseKey{Stream: stream, Shard: identityMark + "fence"} }

// knownEpochKey carries, in an acquire's context, the stream epoch the
// acquiring worker learnt from Kinesis.
type knownEpochKey struct{}

// withKnownEpoch returns ctx carrying epoch, which an acquire raises the
// stream's floor epoch to when the floor has less.
func withKnownEpoch(ctx context.Context, epoch int64) context.Context {
	if epoch <= 0 {
		return ctx
	}
	return context.WithValue(ctx, knownEpochKey{}, epoch)
}

// knownEpoch returns the epoch withKnownEpoch put in ctx, or 0.
func knownEpoch(ctx context.Context) int64 {
	e, _ := ctx.Value(knownEpochKey{}).(int64)
	return e
}

// A reservation is safe only for the row it was made after observing: a
// worker paused between its reservation and its acquire could otherwise
// find the row deleted, held by others with greater tokens and made again,
// and take the new row with its older reservation. So every row is made
// with a random incarnation, and a consumer's acquire is conditional on the
// incarnation it observed (withObservedRow) as well as on the counter.

// newRowIncarnation returns the incarnation of a row being made.
func newRowIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// observedRowKey carries, in an acquire's context, the incarnation of the
// row as the acquiring worker observed it, and the session it named.
type observedRowKey struct{}

// observedRow is what an acquire's context carries of the row observed.
type observedRow struct {
	incarnation string
	session     string // the session that kept it (Lease.Session), if any
	gen         int64
}

// withObservedRow returns ctx carrying l's incarnation: the acquire then
// takes the row only while it is that incarnation. It carries the session
// that keeps l too, whose packed checkpoint a claim carries (lease_packed.go).
func withObservedRow(ctx context.Context, l Lease) context.Context {
	return context.WithValue(ctx, observedRowKey{}, observedRow{l.incarnation, l.Session, l.SessionGen})
}

// observedIncarnation returns the incarnation withObservedRow put in ctx,
// and false when ctx carries none (an operator's tool, which hands no
// token out).
func observedIncarnation(ctx context.Context) (string, bool) {
	o, ok := ctx.Value(observedRowKey{}).(observedRow)
	return o.incarnation, ok
}

// observedSession returns the session that kept the row withObservedRow
// put in ctx (ok false when ctx carries no row; s.Gen 0 when it named no
// session).
func observedSession(ctx context.Context) (s Worker, ok bool) {
	o, ok := ctx.Value(observedRowKey{}).(observedRow)
	if !ok {
		return Worker{}, false
	}
	s, _ = Lease{Session: o.session, SessionGen: o.gen}.KeptBy()
	return s, true
}

// floorSteps remembers the floor counter each stream's floor row last
// showed this store, so that a reservation adds just enough to pass the
// row it is for: the reserved counter must be at least observed+1 (a row's
// counter only grows) and above the floor. A stale memory only makes the
// add larger than needed; it never makes a reservation smaller than the
// floor's, which the add itself guarantees.
type floorSteps struct {
	mu   sync.Mutex
	seen map[string]int64 // by stream
}

// step is what a reservation of n counters for rows observed at counters
// up to observed adds to the floor of stream: at least n, and enough that
// the first of the n is above observed.
func (f *floorSteps) step(stream string, n, observed int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(n, observed+n-f.seen[stream])
}

// reservations are the fence counters one take round reserved, a block per
// stream, so that a round that takes many leases makes one floor write per
// stream, not one per lease. The block is reserved at the round's first
// take of the stream, after the listing the round's takes come from, so
// that each counter is still above every counter reserved before the rows
// it goes to were observed (see the incarnation note above: that is what a
// reservation must follow). A row observed at a counter the block does not
// pass gets a block of its own.
type reservations struct {
	mu     sync.Mutex
	size   int64
	blocks map[string]*fenceBlock // by stream
}

// fenceBlock is a block of reserved counters, next to last.
type fenceBlock struct{ epoch, next, last int64 }

// newReservations returns the reservations of a round that may take up to
// size leases.
func newReservations(size int) *reservations {
	return &reservations{size: int64(min(max(size, 1), maxReservedBlock)), blocks: make(map[string]*fenceBlock)}
}

// maxReservedBlock caps a round's block: counters are cheap, but a round
// that takes few of many listed leases should not move the floor far.
const maxReservedBlock = 256

// next returns the counter for an acquire of a row of stream observed at
// observed, reserving a block with reserve when none is left above it.
func (rs *reservations) next(ctx context.Context, stream string, observed int64, reserve func(ctx context.Context, stream string, n, observed int64) (fenceFloor, error)) (fenceFloor, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	b := rs.blocks[stream]
	if b == nil || b.next > b.last || b.next <= observed {
		f, err := reserve(ctx, stream, rs.size, observed)
		if err != nil {
			return fenceFloor{}, err
		}
		b = &fenceBlock{epoch: f.epoch, next: f.counter - rs.size + 1, last: f.counter}
		rs.blocks[stream] = b
	}
	f := fenceFloor{epoch: b.epoch, counter: b.next}
	b.next++
	return f, nil
}

// reservationsKey carries a take round's reservations in its acquires'
// contexts.
type reservationsKey struct{}

// withReservations returns ctx carrying rs.
func withReservations(ctx context.Context, rs *reservations) context.Context {
	return context.WithValue(ctx, reservationsKey{}, rs)
}

// reservationsOf returns the reservations ctx carries, or nil.
func reservationsOf(ctx context.Context) *reservations {
	rs, _ := ctx.Value(reservationsKey{}).(*reservations)
	return rs
}

// saw records a floor counter of stream read from the table.
func (f *floorSteps) saw(stream string, counter int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = make(map[string]int64)
	}
	f.seen[stream] = max(f.seen[stream], counter)
}

// holdingEpoch is the epoch of the token of a holding that began with l:
// the floor epoch its acquire read, or, from a store that keeps no floor
// (its rows carry none), the epoch the worker learnt itself.
func holdingEpoch(l Lease, learnt int64) int64 { return max(l.fenceEpoch, learnt) }
