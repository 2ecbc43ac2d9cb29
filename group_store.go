package shardlease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// groupStore is the lease store a Group's consumer sees: the user's store,
// with every stream in the group's set seen as one stream named after the
// group, whose shard ids are "stream/shard" (see memberSet). The consumer's
// scheduler therefore lists, balances and coordinates the leases of all
// the group's streams at once, with its own rules unchanged; the rows in the
// table stay keyed "stream:shard", as a Consumer of the stream writes them.
//
// Its listings return the rows of the streams in the set only: a row of a
// stream that left the set (or was never in it) is never read. Worker rows
// are the group's ("group:@owner"). The stream identity calls are passed
// through: they name real streams.
type groupStore struct {
	inner LeaseStore
	caps  storeCaps // inner's
	name  string    // the group's
	set   *memberSet
}

// groupCaps returns the capabilities of the group's store: those of inner,
// each through g.
func groupCaps(g *groupStore) storeCaps {
	in := g.caps
	out := storeCaps{table: in.table, identity: in.identity, tableName: in.tableName}
	if in.workers != nil {
		out.workers = g
		out.eventual = g
		if in.notes != nil {
			out.notes = g
		}
	}
	if in.lineage != nil {
		out.lineage = g
	}
	if in.withdraws != nil {
		out.withdraws = g
	}
	return out
}

// real returns the row key of the consumer's key k.
func (g *groupStore) real(k LeaseKey) LeaseKey {
	if k.Stream != g.name {
		return k
	}
	stream, shard := g.set.split(k.Shard)
	return LeaseKey{Stream: stream, Shard: shard}
}

// realParents returns the shard ids of the consumer's parent ids.
func (g *groupStore) realParents(parents []string) []string {
	if parents == nil {
		return nil
	}
	out := make([]string, len(parents))
	for i, p := range parents {
		_, out[i] = g.set.split(p)
	}
	return out
}

// realLease is l as the user's store knows it.
func (g *groupStore) realLease(l Lease) Lease {
	l.Key = g.real(l.Key)
	l.Parents = g.realParents(l.Parents)
	return l
}

// seen is the row l as the consumer sees it.
func (g *groupStore) seen(l Lease) Lease {
	if l.Key.Stream == "" {
		return l // a failed call's zero lease
	}
	stream := l.Key.Stream
	l.Key = LeaseKey{Stream: g.name, Shard: g.set.idOf(stream, l.Key.Shard)}
	if l.Parents != nil {
		ps := make([]string, len(l.Parents))
		for i, p := range l.Parents {
			ps[i] = g.set.idOf(stream, p)
		}
		l.Parents = ps
	}
	return l
}

func (g *groupStore) seenOr(l Lease, err error) (Lease, error) { return g.seen(l), err }

func (g *groupStore) Create(ctx context.Context, key LeaseKey, parents []string) (bool, error) {
	return g.inner.Create(ctx, g.real(key), g.realParents(parents))
}

func (g *groupStore) Get(ctx context.Context, key LeaseKey) (Lease, error) {
	return g.seenOr(g.inner.Get(ctx, g.real(key)))
}

// List lists every stream in the set, registered or not (the shard sync
// and the shutdown list this way); take rounds list the registered ones.
func (g *groupStore) List(ctx context.Context, stream string) ([]Lease, error) {
	leases, _, err := g.list(ctx, true, false)
	return leases, err
}

// Acquire refuses, with ErrLeaseHeld and without a write, a row of a stream
// out of the set or whose fan-out consumer is not registered yet: a take
// decided from a listing or a deadline older than the set's change must not
// start a reader of it.
func (g *groupStore) Acquire(ctx context.Context, key LeaseKey, owner string, observed int64) (Lease, error) {
	if err := g.ready("acquire", key); err != nil {
		return Lease{}, err
	}
	return g.seenOr(g.inner.Acquire(ctx, g.real(key), owner, observed))
}

// ready fails with ErrLeaseHeld, for op on the consumer's key, unless the
// key's stream is in the set and ready to read.
func (g *groupStore) ready(op string, key LeaseKey) error {
	real := g.real(key)
	if m := g.set.of(key.Shard); m == nil || !g.set.has(real.Stream) || !m.registered.Load() || m.gone.Load() {
		return &LeaseError{Op: op, Key: real, Err: errorf("%w: stream %s is not in group %s's set, or not ready to read", ErrLeaseHeld, real.Stream, g.name)}
	}
	return nil
}

func (g *groupStore) Renew(ctx context.Context, held Lease, expiry time.Time) (Lease, error) {
	return g.seenOr(g.inner.Renew(ctx, g.realLease(held), expiry))
}

func (g *groupStore) Checkpoint(ctx context.Context, held Lease, checkpoint string, sub int64, expiry time.Time) (Lease, error) {
	return g.seenOr(g.inner.Checkpoint(ctx, g.realLease(held), checkpoint, sub, expiry))
}

func (g *groupStore) Release(ctx context.Context, held Lease) (Lease, error) {
	return g.seenOr(g.inner.Release(ctx, g.realLease(held)))
}

// RequestHandoff refuses, as Acquire does, a row of a stream out of the set
// or not ready to read.
func (g *groupStore) RequestHandoff(ctx context.Context, current Lease, taker string) (Lease, error) {
	if err := g.ready("request handoff", current.Key); err != nil {
		return Lease{}, err
	}
	return g.seenOr(g.inner.RequestHandoff(ctx, g.realLease(current), taker))
}

func (g *groupStore) ListWithWorkers(ctx context.Context, stream string) ([]Lease, []Worker, error) {
	return g.list(ctx, true, true)
}

func (g *groupStore) ListWithWorkersEventually(ctx context.Context, stream string) ([]Lease, []Worker, error) {
	return g.list(ctx, false, true)
}

func (g *groupStore) Heartbeat(ctx context.Context, stream, owner string) (Worker, error) {
	return g.caps.workers.Heartbeat(ctx, g.name, owner)
}

func (g *groupStore) RemoveWorker(ctx context.Context, w Worker) (bool, error) {
	return g.caps.workers.RemoveWorker(ctx, w)
}

func (g *groupStore) Note(ctx context.Context, current Lease, note string) (Lease, error) {
	return g.seenOr(g.caps.notes.Note(ctx, g.realLease(current), note))
}

func (g *groupStore) GetEventually(ctx context.Context, key LeaseKey) (Lease, error) {
	return g.seenOr(g.caps.notes.GetEventually(ctx, g.real(key)))
}

func (g *groupStore) CreateAt(ctx context.Context, key LeaseKey, parents []string, start Start) (bool, error) {
	return g.caps.lineage.CreateAt(ctx, g.real(key), g.realParents(parents), start)
}

func (g *groupStore) SetLineage(ctx context.Context, l Lease, parents []string, start Start) (Lease, error) {
	return g.seenOr(g.caps.lineage.SetLineage(ctx, g.realLease(l), g.realParents(parents), start))
}

func (g *groupStore) DeleteFinished(ctx context.Context, l Lease) (bool, error) {
	return g.caps.lineage.DeleteFinished(ctx, g.realLease(l))
}

func (g *groupStore) WithdrawHandoff(ctx context.Context, key LeaseKey, taker string) (bool, error) {
	return g.caps.withdraws.WithdrawHandoff(ctx, g.real(key), taker)
}

// list returns the rows of every stream in the set (registered: only those
// whose fan-out consumer is registered) and the group's worker rows: with one read of the table when the store is a GroupLister, else
// with a listing per stream (consistent, whatever consistent says) and one
// for the worker rows.
func (g *groupStore) list(ctx context.Context, consistent, registered bool) ([]Lease, []Worker, error) {
	var names []string
	for _, m := range g.set.all() {
		if m.registered.Load() || !registered {
			names = append(names, m.name)
		}
	}
	var leases []Lease
	var workers []Worker
	var err error
	if gl := g.caps.groups; gl != nil {
		leases, workers, err = gl.ListStreams(ctx, names, g.name, consistent)
	} else {
		leases, workers, err = g.listEach(ctx, names)
	}
	out := make([]Lease, len(leases))
	for i, l := range leases {
		out[i] = g.seen(l)
	}
	slices.SortFunc(out, func(a, b Lease) int { return strings.Compare(a.Key.Shard, b.Key.Shard) })
	return out, workers, err
}

// listEach lists each stream's rows, and the worker rows, on their own.
func (g *groupStore) listEach(ctx context.Context, names []string) ([]Lease, []Worker, error) {
	var leases []Lease
	var errs []error
	for _, n := range names {
		ls, err := g.inner.List(ctx, n)
		var cre *CorruptRowsError
		if err != nil && !errors.As(err, &cre) {
			return nil, nil, err
		}
		leases = append(leases, ls...)
		errs = append(errs, err)
	}
	var workers []Worker
	if g.caps.workers != nil {
		_, ws, err := g.caps.workers.ListWithWorkers(ctx, g.name)
		if err != nil {
			return nil, nil, err
		}
		workers = ws
	}
	return leases, workers, errors.Join(errs...)
}
