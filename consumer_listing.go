package shardlease

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// tableReader lists what a consumer reads of the lease table: the rows of
// the streams in its set and its worker rows, named workersOf (a
// Consumer's stream, or a Group's name). Rows keep their keys
// ("stream:shard"); no listing returns a row of a stream out of the set.
// It holds no state; Run's goroutine alone calls it.
type tableReader struct {
	store     LeaseStore
	caps      storeCaps
	set       *memberSet
	workersOf string
}

// forRound lists for a take round: the rows of the streams in the set that
// are ready to read (their fan-out consumer registered), eventually
// consistent when the store can, and the worker rows when the store keeps
// them.
func (t tableReader) forRound(ctx context.Context) ([]Lease, []Worker, error) {
	var names []string
	for _, m := range t.set.all() {
		if m.registered.Load() {
			names = append(names, m.name)
		}
	}
	if !t.set.grouped {
		return t.one(ctx, names)
	}
	return t.streams(ctx, names, false)
}

// rows lists the rows of every stream in the set, registered or not, with
// a consistent read: shard syncs and the shutdown list this way.
func (t tableReader) rows(ctx context.Context) ([]Lease, error) {
	return t.rowsOf(ctx, t.set.names())
}

// rowsOf lists the rows of the streams names, with a consistent read.
func (t tableReader) rowsOf(ctx context.Context, names []string) ([]Lease, error) {
	if !t.set.grouped {
		return t.listEach(ctx, names)
	}
	leases, _, err := t.streams(ctx, names, true)
	return leases, err
}

// one lists a Consumer's stream (none before it is registered) as a
// Consumer always has: one call naming the stream.
func (t tableReader) one(ctx context.Context, names []string) (leases []Lease, workers []Worker, err error) {
	for _, n := range names {
		switch {
		case t.caps.eventual != nil:
			leases, workers, err = t.caps.eventual.ListWithWorkersEventually(ctx, n)
		case t.caps.workers != nil:
			leases, workers, err = t.caps.workers.ListWithWorkers(ctx, n)
		default:
			leases, err = t.store.List(ctx, n)
		}
	}
	return leases, workers, err
}

// streams lists the rows of names and the worker rows: with one read of
// the table when the store is a GroupLister, else with a listing per
// stream (consistent, whatever consistent says) and one for the worker
// rows. Rows are ordered by key.
func (t tableReader) streams(ctx context.Context, names []string, consistent bool) ([]Lease, []Worker, error) {
	var leases []Lease
	var workers []Worker
	var err error
	if gl := t.caps.groups; gl != nil {
		leases, workers, err = gl.ListStreams(ctx, names, t.workersOf, consistent)
	} else {
		leases, workers, err = t.each(ctx, names)
	}
	slices.SortFunc(leases, func(a, b Lease) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return leases, workers, err
}

// each lists each stream's rows, and the worker rows, on their own. A
// listing that found corrupt rows keeps the others; any other failure
// ends it.
func (t tableReader) each(ctx context.Context, names []string) ([]Lease, []Worker, error) {
	leases, err := t.listEach(ctx, names)
	var cre *CorruptRowsError
	if err != nil && !errors.As(err, &cre) {
		return nil, nil, err
	}
	var workers []Worker
	if t.caps.workers != nil {
		_, ws, werr := t.caps.workers.ListWithWorkers(ctx, t.workersOf)
		if werr != nil {
			return nil, nil, werr
		}
		workers = ws
	}
	return leases, workers, err
}

// listEach lists each stream's rows with a call of its own (consistent).
// A listing that found corrupt rows keeps the others, its error joined to
// the result; any other failure ends it.
func (t tableReader) listEach(ctx context.Context, names []string) ([]Lease, error) {
	var leases []Lease
	var errs []error
	for _, n := range names {
		ls, err := t.store.List(ctx, n)
		var cre *CorruptRowsError
		if err != nil && !errors.As(err, &cre) {
			return nil, err
		}
		leases = append(leases, ls...)
		errs = append(errs, err)
	}
	return leases, errors.Join(errs...)
}
