package shardlease

import (
	"context"
	"errors"
	"time"

	"github.com/shardlease/shardlease/internal/balance"
)

// sideWatches are a worker's deputy namings beyond its first one, and the
// watches it keeps unnamed. Where
// workers read different streams, each stream has a coordinator of its own
// (see docs/coordination.md#several-streams-and-mixed-tables), which names
// deputies among that stream's readers; a worker may then be named by two
// coordinators, each on a row of its own, and watches both: the first
// naming as the deputy's watch, the others here. The coordination holds
// it; Run's goroutine alone calls it.
type sideWatches struct {
	byRow map[sideKey]sideWatch // by the row the naming is on and what it watches
}

// sideKey is a naming beyond the first: the row it is on, and the lease it
// asks to watch (one row may carry the namings of several coordinators).
type sideKey struct{ row, first string }

// sideWatch is one naming beyond the first: the lease it watches, and the
// moment that lease, as last seen, would have stood still long enough for
// the alarm.
type sideWatch struct {
	first   string
	stallAt time.Time
}

// name records a naming on row to watch first, and reports whether it is
// new.
func (s *sideWatches) name(row, first string) bool {
	if s.byRow == nil {
		s.byRow = map[sideKey]sideWatch{}
	}
	k := sideKey{row, first}
	w, ok := s.byRow[k]
	s.byRow[k] = sideWatch{first: first, stallAt: w.stallAt}
	return !ok
}

// selfRow is the row of the watches a worker takes on unnamed (see
// watchUnnamed): no row it runs carries them.
const selfRow = ""

// watchUnnamed makes anchors the watches this worker keeps unnamed (see
// balance.Unwatched), and reports whether one is new.
func (s *sideWatches) watchUnnamed(anchors []string) bool {
	s.unname(selfRow)
	added := false
	for _, a := range anchors {
		added = s.name(selfRow, a) || added
	}
	return added
}

// unname forgets the namings on row, if any.
func (s *sideWatches) unname(row string) {
	for k := range s.byRow {
		if k.row == row {
			delete(s.byRow, k)
		}
	}
}

// keep forgets the namings of leases that are not in firsts (the readable
// first leases of this worker's latest listing): of a stream it does not
// read, or does not read now, or a lease no longer first.
func (s *sideWatches) keep(firsts map[string]bool) {
	for k, w := range s.byRow {
		if !firsts[w.first] {
			delete(s.byRow, k)
		}
	}
}

// clear forgets every naming.
func (s *sideWatches) clear() { clear(s.byRow) }

// prune forgets the namings on rows this worker no longer runs, and
// reports whether any is left.
func (s *sideWatches) prune(holds func(string) bool) bool {
	for k := range s.byRow {
		if k.row != selfRow && !holds(k.row) {
			delete(s.byRow, k)
		}
	}
	return len(s.byRow) > 0
}

// nextStall returns the earliest moment a watched lease would stand still
// long enough for the alarm, zero when none is known.
func (s *sideWatches) nextStall() time.Time {
	var at time.Time
	for _, w := range s.byRow {
		if !w.stallAt.IsZero() && (at.IsZero() || w.stallAt.Before(at)) {
			at = w.stallAt
		}
	}
	return at
}

// look reads each watched lease's row, eventually consistent, and reports
// whether one shows no owner (or is gone) or a counter that stood still
// longer than a renewal, as lookAtFirst judges the first naming's: the
// coordinator that named this worker stopped (stopped, "" for a free
// lease), and it lists. obs are the scheduler's observations; stall is
// coordination.stall. A lease the deputy's own look read already
// (looked) is not read again, nor one named on two rows twice.
func (s *sideWatches) look(ctx context.Context, c *Consumer, v *sessionView, obs map[string]observation, stall func(Lease) time.Duration, looked string) (stopped string, alarm bool) {
	read := map[string]bool{looked: true}
	for _, w := range s.byRow {
		if read[w.first] {
			continue
		}
		read[w.first] = true
		l, o, ok := readWatched(ctx, c, v, obs, w.first)
		if !ok {
			continue
		}
		at := o.changed.Add(stall(l))
		for k2, w2 := range s.byRow {
			if w2.first == w.first {
				s.byRow[k2] = sideWatch{first: w.first, stallAt: at}
			}
		}
		if l.Owner == "" || l.Owner != c.cfg.identity && o.seen.Sub(o.changed) >= stall(l) {
			c.log.Info("a coordinator's lease this worker watches stands still or is free: listing", "lease", w.first, "owner", l.Owner, "counter", l.Counter)
			stopped, alarm = l.Owner, true
		}
	}
	return stopped, alarm
}

// watchedRead is a watched lease's row as one look read it: the
// observation of its counter, and when the look was made.
type watchedRead struct {
	observation
	seen time.Time
}

// readWatched reads the row of the watched lease first, eventually
// consistent (a row not found reads as free: its shard finished and was
// cleaned up, or it was deleted), and records the observation in obs. ok
// is false when the read failed otherwise: the look changes nothing. The
// deputy's look (lookAtFirst) and the side watches' both read this way. A
// row a session keeps is read at one look in watchReuse+1, once a take
// interval has passed, and as soon as its session no longer reads live;
// the looks between read the session's row alone (sessionView.cachedWatch).
func readWatched(ctx context.Context, c *Consumer, v *sessionView, obs map[string]observation, first string) (Lease, watchedRead, bool) {
	l, cached := v.cachedWatch(first, time.Now(), c.cfg.takeInterval)
	if !cached {
		gctx, cancel := c.storeCtx(ctx)
		var err error
		l, err = c.caps.notes.GetEventually(gctx, keyOf(first))
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseNotFound):
			l = Lease{}
		default:
			if ctx.Err() == nil {
				c.log.Debug("reading a coordinator's lease failed", "lease", first, "err", err)
			}
			return Lease{}, watchedRead{}, false
		}
		v.watchRead(first, l, time.Now())
	}
	v.reread(ctx, c, l)
	v.watchSeen(first, l)
	now := time.Now()
	return l, watchedRead{observeRow(obs, first, l.Counter, v.mark(l), now), now}, true
}

// alarming reports whether a listing shows a watched lease free, expired
// or standing still and not held by this worker: an alarm raised for it
// lasts until that lease moves again or this worker holds it.
func (s *sideWatches) alarming(in balance.Listing, byShard map[string]Lease) bool {
	for _, w := range s.byRow {
		l, ok := byShard[w.first]
		if !ok || in.Held[w.first] || !in.Firsts[w.first] || in.Skip[w.first] || in.Refused[w.first] {
			continue
		}
		if l.Owner == "" || in.Expired[w.first] || in.Stalled[w.first] {
			return true
		}
	}
	return false
}
