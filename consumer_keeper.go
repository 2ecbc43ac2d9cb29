package shardlease

import (
	"context"
	"errors"
	"time"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/seqnum"
	"go.opentelemetry.io/otel/attribute"
)

// attempt is one write of the keeper: a checkpoint when dirty, else a
// renewal.
type attempt struct {
	seq    string
	sub    int64
	dirty  bool
	expiry time.Time
	sent   time.Time // when it was first sent: it may have landed then
}

func (r *leaseRunner) mark(seq string, sub int64) error {
	if r.lost.Load() {
		return &LeaseError{Op: "checkpoint", Key: r.key, Err: ErrLeaseLost}
	}
	r.mu.Lock()
	if r.sealed {
		r.mu.Unlock()
		return r.errReleased()
	}
	if comparePosition(seq, sub, r.pendSeq, r.pendSub) > 0 {
		r.pendSeq, r.pendSub = seq, sub
	}
	r.mu.Unlock()
	select {
	case r.cpMoved <- struct{}{}:
	default:
	}
	return nil
}

func (r *leaseRunner) flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case r.flushReq <- reply:
	case <-r.keeperDone:
		return &LeaseError{Op: "flush", Key: r.key, Err: ErrLeaseLost}
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// comparePosition orders (sequence number, sub-sequence) pairs. Sequence
// numbers are decimal strings of up to 128 bits; ShardEnd is after all; an
// empty one before all. A whole record (sub -1) is after all its
// sub-records.
func comparePosition(seqA string, subA int64, seqB string, subB int64) int {
	if c := seqnum.Compare(seqA, seqB); c != 0 {
		return c
	}
	wa, wb := subA < 0, subB < 0
	switch {
	case wa && wb:
		return 0
	case wa:
		return 1
	case wb:
		return -1
	case subA < subB:
		return -1
	case subA > subB:
		return 1
	}
	return 0
}

// keep does every write to the lease row: renewals, checkpoints riding on
// them, flushes, and the final checkpoint and release.
func (r *leaseRunner) keep(parent context.Context) {
	cfg := r.c.cfg
	wctx := WithHolderLeaseDuration(context.WithoutCancel(parent), cfg.leaseDuration)
	tick := time.NewTicker(cfg.checkpointFlush)
	defer tick.Stop()
	retry := time.NewTimer(0)
	if !retry.Stop() {
		<-retry.C
	}
	defer retry.Stop()
	bo := backoff.Backoff{Min: min(cfg.retryMin, cfg.renewInterval/4), Max: cfg.renewInterval / 3}
	lastWrite := r.lastWrite
	// cut fires at the cut-off: no write succeeded for almost a lease
	// duration, so the handler's context is cancelled now, before any
	// taker may see the lease expired.
	r.mu.Lock()
	cut := time.NewTimer(time.Until(r.validUntil))
	r.mu.Unlock()
	defer cut.Stop()

	write := func(force bool) error {
		r.mu.Lock()
		held := r.lease
		seq, sub := r.pendSeq, r.pendSub
		dirty := seq != r.wroteSeq || sub != r.wroteSub
		r.mu.Unlock()
		expiry, sent := cfg.wallClock().Add(cfg.leaseDuration), time.Now()
		if a := r.unsure; a != nil {
			// If the first attempt landed, the row's counter moved then, and
			// the lease is ours for a lease duration from then only.
			seq, sub, dirty, expiry, sent, force = a.seq, a.sub, a.dirty, a.expiry, a.sent, true
		}
		if !dirty && !force && time.Since(lastWrite)+cfg.checkpointFlush/2 < cfg.renewInterval {
			return nil
		}
		ctx, cancel := context.WithTimeout(wctx, cfg.renewInterval)
		defer cancel()
		var next Lease
		var err error
		if dirty {
			next, err = r.c.store.Checkpoint(ctx, held, seq, sub, expiry)
		} else {
			next, err = r.c.store.Renew(ctx, held, expiry)
		}
		if err != nil {
			r.unsure = &attempt{seq: seq, sub: sub, dirty: dirty, expiry: expiry, sent: sent}
			return err
		}
		r.unsure = nil
		r.mu.Lock()
		r.lease = next
		r.validUntil = cfg.cutoff(sent)
		cut.Reset(time.Until(r.validUntil))
		if dirty {
			r.wroteSeq, r.wroteSub = seq, sub
		}
		r.mu.Unlock()
		lastWrite = sent
		r.c.ins.renewDuration.Record(wctx, seconds(time.Since(sent)), r.c.ins.attrs(attribute.Bool("checkpoint", dirty)))
		if dirty {
			r.log.Debug("checkpoint written", "checkpoint", seq, "sub", sub, "counter", next.Counter)
		}
		if next.HandoffTo != "" {
			r.handOff(next.HandoffTo)
		}
		if next.Note != held.Note {
			r.c.sendNote(r.shard, next.Note)
		}
		return nil
	}
	// failed handles a failed write and reports whether the keeper must stop.
	failed := func(err error) bool {
		if errors.Is(err, ErrLeaseLost) {
			r.markLost("a write was refused", err)
			return true
		}
		if isFatal(err) {
			r.log.Error("lease table unusable", "err", err)
			r.markLost("the lease table is unusable", err)
			return true
		}
		if !r.valid() {
			r.markLost("no write succeeded for a whole lease duration", err)
			return true
		}
		r.c.count(evWriteFailure, 1)
		r.log.Warn("lease write failed; retrying", "err", err)
		retry.Reset(bo.Next())
		return false
	}

	for {
		select {
		case <-tick.C:
			if err := write(false); err != nil {
				if failed(err) {
					return
				}
				continue
			}
			bo.Reset()
		case <-retry.C:
			if err := write(true); err != nil {
				if failed(err) {
					return
				}
				continue
			}
			bo.Reset()
		case reply := <-r.flushReq:
			err := write(true)
			if err != nil && failed(err) {
				reply <- err
				return
			}
			reply <- err
		case <-cut.C:
			if !r.valid() {
				r.markLost("no write succeeded since the cut-off, a margin before the lease could expire", nil)
				return
			}
		case <-r.abandoned:
			return
		case <-r.procDone:
			if r.isAbandoned() {
				return
			}
			// The reader holds nothing open (a subscription, say) once the
			// lease is released, so the next holder is not refused.
			<-r.readDone
			r.finish(wctx)
			return
		}
	}
}

// finish writes the final checkpoint and releases the lease (to the
// requested taker during a handoff).
func (r *leaseRunner) finish(wctx context.Context) {
	if r.lost.Load() {
		return
	}
	cfg := r.c.cfg
	// The grace period counts from the stop, handler time included.
	r.mu.Lock()
	from := r.stopAt
	r.mu.Unlock()
	if from.IsZero() {
		from = time.Now()
	}
	ctx, cancel := context.WithDeadline(wctx, from.Add(cfg.grace()))
	defer cancel()
	// Checkpoints of work still in flight are waited for during half the
	// grace period; the other half is the final writes'.
	actx, acancel := context.WithDeadline(wctx, from.Add(cfg.grace()/2))
	r.awaitManualCheckpoints(actx)
	acancel()
	bo := backoff.Backoff{Min: cfg.retryMin, Max: cfg.retryMax}
	for {
		r.mu.Lock()
		held := r.lease
		seq, sub := r.pendSeq, r.pendSub
		dirty := seq != r.wroteSeq || sub != r.wroteSub
		r.mu.Unlock()
		expiry, renew := cfg.wallClock().Add(cfg.leaseDuration), false
		if a := r.unsure; a != nil {
			// Send the write whose outcome is unknown again first.
			seq, sub, dirty, expiry, renew = a.seq, a.sub, a.dirty, a.expiry, !a.dirty
		}
		var err error
		if dirty || renew {
			var next Lease
			if dirty {
				next, err = r.c.store.Checkpoint(ctx, held, seq, sub, expiry)
			} else {
				next, err = r.c.store.Renew(ctx, held, expiry)
			}
			if err == nil {
				r.unsure = nil
				r.mu.Lock()
				r.lease = next
				if dirty {
					r.wroteSeq, r.wroteSub = seq, sub
				}
				r.mu.Unlock()
				continue
			}
			if r.unsure == nil {
				r.unsure = &attempt{seq: seq, sub: sub, dirty: dirty, expiry: expiry, sent: time.Now()}
			}
		} else {
			r.mu.Lock()
			if r.pendSeq != seq || r.pendSub != sub {
				r.mu.Unlock()
				continue // a checkpoint came in meanwhile: write it first
			}
			r.sealed = true
			r.mu.Unlock()
			var released Lease
			if r.endedShard.Load() {
				// A finished shard is nobody's work: free it rather than hand it over.
				held.HandoffTo = ""
			}
			released, err = r.c.store.Release(ctx, held)
			if err == nil {
				r.c.count(evReleased, 1)
				r.log.Info("lease released", "checkpoint", seq, "to", released.Owner, "counter", released.Counter)
				return
			}
		}
		if errors.Is(err, ErrLeaseLost) || isFatal(err) || !r.valid() {
			r.markLost("the final write was refused", err)
			return
		}
		r.log.Warn("final lease write failed; retrying", "err", err)
		if !bo.Sleep(ctx) {
			r.log.Error("giving up on the final checkpoint and release; the lease expires after a lease duration", "err", err)
			return
		}
	}
}

// awaitManualCheckpoints waits, with manual checkpoints, until the handler
// checkpointed every record it accepted, or ctx ends: the final write then
// carries the work finished during the stop.
func (r *leaseRunner) awaitManualCheckpoints(ctx context.Context) {
	if !r.c.cfg.manualCheckpoint || r.endedShard.Load() {
		return
	}
	for {
		r.mu.Lock()
		done := !r.hasHanded || comparePosition(r.pendSeq, r.pendSub, r.handedSeq, r.handedSub) >= 0
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-r.cpMoved:
		case <-ctx.Done():
			r.log.Warn("stopping before the handler checkpointed every record it accepted; the rest is handed again to the next holder")
			return
		}
	}
}
