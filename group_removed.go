package shardlease

import (
	"context"
	"strings"
	"time"
)

// settleRemoved looks after the rows of the streams out of the set, from
// one listing of each: it releases the rows this worker owns but does not
// run (a handoff its release answered just as the stream left made this
// worker their owner, and it no longer lists them to take them), for as
// long as such a handoff may land; and once a stream has been out
// DeleteRemovedAfter it deletes the stream's rows (see deleteRows).
func (g *Group) settleRemoved(ctx context.Context, final bool) {
	now := time.Now()
	for stream, since := range g.c.set.left() {
		out := now.Sub(since)
		deleting := g.cfg.DeleteRemovedAfter > 0 && out >= max(g.cfg.DeleteRemovedAfter, g.handoffWindow())
		if out > g.handoffWindow() && g.cfg.DeleteRemovedAfter == 0 {
			g.c.set.forget(stream) // its rows are kept; nothing more to do
			continue
		}
		if out > g.handoffWindow() && !deleting {
			continue
		}
		lctx, cancel := g.c.storeCtx(ctx)
		rows, err := g.c.store.List(lctx, stream)
		cancel()
		if err != nil {
			g.c.log.Warn("listing a removed stream's rows failed; retrying at the next poll", "stream", stream, "err", err)
			continue
		}
		g.releaseOrphans(ctx, rows, final)
		if deleting {
			g.deleteRows(ctx, stream, rows, now)
		}
	}
}

// handoffWindow is how long after a stream left the set a handoff to this
// worker may still land: the holder answers at its next renewal, after its
// batch and the grace period, and its own source may tell it a poll later.
func (g *Group) handoffWindow() time.Duration {
	cfg := g.c.cfg
	return 2*g.cfg.SourceInterval + 2*cfg.leaseDuration + cfg.shutdownTimeout
}

// releaseOrphans releases the rows of rows this worker owns and runs no
// runner of, neither a running one nor one whose handler was abandoned (that
// lease must expire, as it does for a Consumer), once two polls in a row saw
// the row so at one counter (a take that acquired it just before the stream
// left may not have launched its runner yet).
func (g *Group) releaseOrphans(ctx context.Context, rows []Lease, final bool) {
	me := g.c.OwnerID()
	stuck := g.c.stuckSet()
	for _, l := range rows {
		key := l.Key.String()
		if l.Owner != me || g.c.runsKey(l.Key) || stuck[key] {
			delete(g.orphans, key)
			continue
		}
		if c, seen := g.orphans[key]; !final && (!seen || c != l.Counter) {
			g.orphans[key] = l.Counter
			continue
		}
		delete(g.orphans, key)
		rctx, cancel := g.c.storeCtx(ctx)
		_, err := g.c.store.Release(rctx, l)
		cancel()
		if err != nil {
			g.c.log.Warn("releasing a removed stream's row handed to this worker failed; retrying at the next poll", "lease", l.Key.String(), "err", err)
			continue
		}
		g.c.log.Info("released a removed stream's row handed to this worker as the stream left", "lease", l.Key.String(), "counter", l.Counter)
	}
}

// deleteRows deletes the rows of stream, which has been out of the set
// DeleteRemovedAfter, when the store can (StreamRemover): the free ones,
// and the held ones whose counter and owner this worker saw stand still
// for a lease duration (the holder's longer one, when its row says so):
// their holder is gone, and with the stream out of every set nobody takes
// them. rows is the stream's listing at now.
func (g *Group) deleteRows(ctx context.Context, stream string, rows []Lease, now time.Time) {
	if g.c.holdsStream(stream) {
		return // its runners have not released yet
	}
	sr := g.c.caps.remover
	if sr == nil {
		g.c.log.Warn("the lease store cannot delete a removed stream's rows (it is no StreamRemover); they are kept", "stream", stream)
		g.c.set.forget(stream)
		return
	}
	stale := make(map[string]int64)
	live := 0
	for _, l := range rows {
		key := l.Key.String()
		if l.Owner == "" {
			continue
		}
		o := observeRow(g.rowsSeen, key, l.Counter, l.Owner, now)
		if now.Sub(o.changed) >= expiresAfter(l, g.c.cfg.leaseDuration) {
			stale[l.Key.Shard] = l.Counter
		} else {
			live++
		}
	}
	if live > 0 {
		// A worker still reads the stream (its source has it, or it has
		// not seen the removal): deleting the rows it released would make
		// it start them again from the initial position.
		g.c.log.Info("a removed stream's rows are still read by a worker; deleting them once none is", "stream", stream, "read", live)
		return
	}
	dctx, cancel := g.c.storeCtx(ctx)
	deleted, held, err := sr.DeleteStreamRows(dctx, stream, stale)
	cancel()
	switch {
	case err != nil:
		g.c.log.Warn("deleting a removed stream's rows failed; retrying at the next poll", "stream", stream, "err", err)
	case held > 0:
		g.c.log.Info("a removed stream's rows are still held; deleting them once their holders have been gone a lease duration", "stream", stream, "deleted", deleted, "held", held)
	default:
		g.c.log.Info("deleted a removed stream's rows", "stream", stream, "deleted", deleted)
		g.c.set.forget(stream)
		for key := range g.rowsSeen {
			if strings.HasPrefix(key, stream+":") {
				delete(g.rowsSeen, key)
			}
		}
	}
}
