package shardlease

import (
	"context"
	"strings"
	"time"
)

// removals looks after the rows of the streams that left a Group's set.
// Run's scheduler holds it and calls settle after each poll of the source
// (the source's goroutine only signals, through memberSet.polled), so that
// every write of a lease row is made from Run's goroutine. A Consumer has
// none.
type removals struct {
	c   *Consumer
	cfg GroupConfig
	// rowsSeen is what settle last saw of the held rows of removed
	// streams, by key, with when they last moved; sessions, of the
	// sessions that keep them.
	rowsSeen map[string]observation
	sessions *sessionView
}

// settle looks after the rows of the streams out of the set, from one
// listing of each: it releases the rows this worker owns but does not run
// (releaseUnrun: a handoff its release answered just as the stream left
// made this worker their owner, and it no longer lists them to take them),
// for as long as such a handoff may land; and once a stream has been out
// DeleteRemovedAfter it deletes the stream's rows (see deleteRows).
func (rm *removals) settle(ctx context.Context) {
	c := rm.c
	now := time.Now()
	for stream, since := range c.set.left() {
		out := now.Sub(since)
		deleting := rm.cfg.DeleteRemovedAfter > 0 && out >= max(rm.cfg.DeleteRemovedAfter, rm.handoffWindow())
		if out > rm.handoffWindow() && rm.cfg.DeleteRemovedAfter == 0 {
			c.set.forget(stream) // its rows are kept; nothing more to do
			continue
		}
		if out > rm.handoffWindow() && !deleting {
			continue
		}
		lctx, cancel := c.storeCtx(ctx)
		rows, err := c.store.List(lctx, stream)
		cancel()
		if err != nil {
			c.log.Warn("listing a removed stream's rows failed; retrying at the next poll", "stream", stream, "err", err)
			continue
		}
		releaseUnrun(ctx, c, rows)
		if deleting {
			rm.deleteRows(ctx, stream, rows, now)
		}
	}
}

// handoffWindow is how long after a stream left the set a handoff to this
// worker may still land: the holder answers at its next renewal, after its
// batch and the grace period, and its own source may tell it a poll later.
func (rm *removals) handoffWindow() time.Duration {
	cfg := rm.c.cfg
	return 2*rm.cfg.SourceInterval + 2*cfg.leaseDuration + cfg.shutdownTimeout
}

// deleteRows deletes the rows of stream, which has been out of the set
// DeleteRemovedAfter, when the store can (StreamRemover): the free ones,
// and the held ones whose counter and owner this worker saw stand still
// for a lease duration (the holder's longer one, when its row says so):
// their holder is gone, and with the stream out of every set nobody takes
// them. rows is the stream's listing at now.
func (rm *removals) deleteRows(ctx context.Context, stream string, rows []Lease, now time.Time) {
	if rm.c.holdsStream(stream) {
		return // its runners have not released yet
	}
	sr := rm.c.caps.remover
	if sr == nil {
		rm.c.log.Warn("the lease store cannot delete a removed stream's rows (it is no StreamRemover); they are kept", "stream", stream)
		rm.c.set.forget(stream)
		return
	}
	stale := make(map[string]int64)
	live := 0
	rm.sessions.update(ctx, rm.c, rows, nil)
	for _, l := range rows {
		key := l.Key.String()
		if l.Owner == "" {
			continue
		}
		o := observeRow(rm.rowsSeen, key, l.Counter, rm.sessions.mark(l), now)
		if now.Sub(o.changed) >= rm.sessions.wait(l, rm.c.cfg.leaseDuration) {
			stale[l.Key.Shard] = l.Counter
		} else {
			live++
		}
	}
	if live > 0 {
		// A worker still reads the stream (its source has it, or it has
		// not seen the removal): deleting the rows it released would make
		// it start them again from the initial position.
		rm.c.log.Info("a removed stream's rows are still read by a worker; deleting them once none is", "stream", stream, "read", live)
		return
	}
	dctx, cancel := rm.c.storeCtx(ctx)
	deleted, held, err := sr.DeleteStreamRows(dctx, stream, stale)
	cancel()
	switch {
	case err != nil:
		rm.c.log.Warn("deleting a removed stream's rows failed; retrying at the next poll", "stream", stream, "err", err)
	case held > 0:
		rm.c.log.Info("a removed stream's rows are still held; deleting them once their holders have been gone a lease duration", "stream", stream, "deleted", deleted, "held", held)
	default:
		rm.c.log.Info("deleted a removed stream's rows", "stream", stream, "deleted", deleted)
		rm.c.set.forget(stream)
		for key := range rm.rowsSeen {
			if strings.HasPrefix(key, stream+":") {
				delete(rm.rowsSeen, key)
			}
		}
	}
}
