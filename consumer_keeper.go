package shardlease

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// The keeper makes every write to one lease row, on the runner's own
// goroutine: renewals every renew interval, the checkpoints that ride on
// them, the flushes a handler asks for, and at the end the final checkpoint
// and the release. Every write takes one path: nextWrite picks it, send
// makes it and records its outcome.
//
// A write that failed without a refusal may have landed with only its reply
// lost. It is sent again as it was, first, before anything else: the store
// then recognises it as this worker's own write, and the lease is timed
// from when it was first sent, as a taker would time it. A refused write
// (ErrLeaseLost) means the lease is lost; so does the cut-off passing with
// no write succeeding (see cutoffDivisor): the handler's context is
// cancelled before any taker may see the lease expired.

// position is a place in a shard: a sequence number, and the sub-sequence
// of a user record inside a KPL aggregate (-1 for a whole record).
type position struct {
	seq string
	sub int64
}

// positionOf returns the position of rec.
func positionOf(rec Record) position { return position{rec.SequenceNumber, rec.SubSequenceNumber} }

// compare orders positions. Sequence numbers are decimal strings of up to
// 128 bits; ShardEnd is after all; an empty one before all. A whole record
// (sub -1) is after all its sub-records.
func (p position) compare(q position) int {
	if c := seqnum.Compare(p.seq, q.seq); c != 0 {
		return c
	}
	wa, wb := p.sub < 0, q.sub < 0
	switch {
	case wa && wb:
		return 0
	case wa:
		return 1
	case wb:
		return -1
	case p.sub < q.sub:
		return -1
	case p.sub > q.sub:
		return 1
	}
	return 0
}

// keeper is the state of a runner's one write path. Fields marked (mu) are
// shared with the other goroutines of the runner under mu; the others are
// the keeper goroutine's alone.
type keeper struct {
	mu         sync.Mutex
	lease      Lease     // (mu) the handle: the row as the last write left it
	validUntil time.Time // (mu) the cut-off, on this machine's monotonic clock
	pending    position  // (mu) the checkpoint to write; moved forward by mark
	written    position  // (mu) the checkpoint the row holds
	handed     position  // (mu) manual checkpoints: the last record handled
	hasHanded  bool      // (mu)
	stopAt     time.Time // (mu) when the runner was told to stop
	sealed     bool      // (mu) no checkpoint can be written any more

	lastWrite time.Time // when the last successful write was sent
	unsure    *attempt  // the last write, failed without a refusal

	// sess keeps the lease when gen is not 0 (the lease row names the
	// session): the lease is ours until the session's cut-off, and the
	// keeper writes only checkpoints and what the mail asks for.
	sess *sessionKeeper
	gen  int64
	// packed is set while the session's keeps carry the lease's
	// checkpoints (consumer_packed.go): the keeper then writes the row
	// only to flush one that stood still, for a Flush, and at the end.
	packed bool

	flushReq chan chan error // a handler's Flush, answered by the keeper
	poll     chan struct{}   // poked when the session's mail names the lease
	moved    chan struct{}   // poked when pending moves
	done     chan struct{}   // closed once the keeper writes no more
}

// attempt is one write of the keeper: a checkpoint when dirty, else a
// renewal. again is set when it is a write sent before whose outcome is
// unknown.
type attempt struct {
	pos    position
	dirty  bool
	again  bool
	expiry time.Time
	sent   time.Time // when it was first sent: it may have landed then
}

// newKeeper returns the keeper of l, which a write sent at written made
// ours until validUntil.
func newKeeper(l Lease, validUntil, written time.Time) keeper {
	at := position{l.Checkpoint, l.SubSequence}
	return keeper{
		lease: l, validUntil: validUntil, lastWrite: written,
		pending: at, written: at,
		flushReq: make(chan chan error),
		poll:     make(chan struct{}, 1),
		moved:    make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// cutoff returns when the lease stops being surely ours.
func (k *keeper) cutoff() time.Time {
	if k.gen != 0 {
		return k.sess.cutoff(k.gen)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validUntil
}

// pastCutoff refuses a write of a lease a session keeps once the session's
// cut-off passed (or the session ended): a write to the lease row proves
// nothing of the session, and no write of an incarnation another worker may
// have fenced may be sent. A lease renewed by its holder writes on: its
// write is what proves it.
func (k *keeper) pastCutoff(key LeaseKey) error {
	if k.gen == 0 || time.Now().Before(k.cutoff()) {
		return nil
	}
	return &LeaseError{Op: "write", Key: key, Err: errorf("%w: the session that keeps the lease is past its cut-off or ended; nothing more is written", ErrLeaseLost)}
}

// close marks the keeper done: no checkpoint is taken and no flush answered
// any more.
func (k *keeper) close() {
	k.mu.Lock()
	k.sealed = true
	k.mu.Unlock()
	close(k.done)
}

// unwritable returns the error of a checkpoint made once none can be
// written any more: the lease lost, or released (the final write sealed
// the pending checkpoint). r.k.mu is held.
func (r *leaseRunner) unwritable() error {
	if r.lost() {
		return &LeaseError{Op: "checkpoint", Key: r.key, Err: ErrLeaseLost}
	}
	if r.k.sealed {
		return r.errReleased()
	}
	return nil
}

// mark moves the pending checkpoint forward to p (never back).
func (r *leaseRunner) mark(p position) error {
	k := &r.k
	k.mu.Lock()
	if err := r.unwritable(); err != nil {
		k.mu.Unlock()
		return err
	}
	if p.compare(k.pending) > 0 {
		k.pending = p
		r.lag.moved(p)
	}
	k.mu.Unlock()
	select {
	case k.moved <- struct{}{}:
	default:
	}
	return nil
}

// flush asks the keeper to write now, and waits for the write.
func (r *leaseRunner) flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case r.k.flushReq <- reply:
	case <-r.k.done:
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

// nextWrite returns the handle and the keeper's next write: the write whose
// outcome is unknown, sent again as it was; else the pending checkpoint,
// when the row does not hold it yet; else a renewal.
func (r *leaseRunner) nextWrite() (Lease, attempt) {
	k := &r.k
	k.mu.Lock()
	held, pending, dirty := k.lease, k.pending, k.pending != k.written
	k.mu.Unlock()
	if a := k.unsure; a != nil {
		again := *a
		again.again = true
		return held, again
	}
	cfg := r.c.cfg
	return held, attempt{pos: pending, dirty: dirty, expiry: cfg.wallClock().Add(cfg.leaseDuration), sent: time.Now()}
}

// send makes write a on held and records its outcome. On success the row as
// written is the handle, the lease is ours until the cut-off after a.sent
// (if a first attempt landed, the counter moved then), and a checkpoint it
// carried is the row's. On failure a is kept to be sent again as it was.
func (r *leaseRunner) send(ctx context.Context, held Lease, a attempt) (Lease, error) {
	var next Lease
	var err error
	ctx = r.lag.withLag(ctx)
	if a.dirty {
		next, err = r.c.store.Checkpoint(ctx, held, a.pos.seq, a.pos.sub, a.expiry)
	} else {
		next, err = r.c.store.Renew(ctx, held, a.expiry)
	}
	k := &r.k
	if err != nil {
		a.again = false
		k.unsure = &a
		return Lease{}, err
	}
	k.unsure = nil
	k.mu.Lock()
	k.lease = next
	k.validUntil = r.c.cfg.cutoff(a.sent)
	if a.dirty {
		k.written = a.pos
	}
	k.mu.Unlock()
	k.lastWrite = a.sent
	return next, nil
}

// keep renews the lease (checkpoints riding on renewals) and answers
// flushes until the runner stops, then makes the final write (finish).
func (r *leaseRunner) keep(parent context.Context) {
	kl := newKeepLoop(r, parent)
	defer kl.stop()
	for kl.next() {
	}
}

// keepLoop is the keeper's timers and backoff, kept on the heap so that the
// keeper waits between writes on a small stack. Only the keeper goroutine
// uses it.
type keepLoop struct {
	r    *leaseRunner
	wctx context.Context // the writes' context: the holder's lease duration, never cancelled
	tick *time.Ticker
	// cut fires at the cut-off: no write succeeded for almost a lease
	// duration, so the handler's context is cancelled now, before any
	// taker may see the lease expired.
	cut   *time.Timer
	retry *time.Timer // made at the first failed write
	bo    backoff.Backoff
	// ended is closed once the session that keeps the lease ends; nil
	// (never ready) when the keeper renews the row itself.
	ended <-chan struct{}
}

func newKeepLoop(r *leaseRunner, parent context.Context) *keepLoop {
	cfg := r.c.cfg
	var ended <-chan struct{}
	if r.k.gen != 0 {
		ended = r.k.sess.endedOf(r.k.gen)
		r.k.packed = r.k.sess.pack != nil && r.k.sess.pack.join(r.key, r.k.gen, r.packedView)
	}
	return &keepLoop{
		r:     r,
		ended: ended,
		wctx:  WithHolderLeaseDuration(context.WithoutCancel(parent), cfg.leaseDuration),
		tick:  time.NewTicker(cfg.checkpointFlush),
		cut:   time.NewTimer(time.Until(r.k.cutoff())),
		bo:    backoff.Backoff{Min: min(cfg.retryMin, cfg.renewInterval/4), Max: cfg.renewInterval / 3},
	}
}

// stop stops the loop's timers, and takes the lease out of the session's
// pack.
func (kl *keepLoop) stop() {
	if kl.r.k.packed {
		kl.r.k.sess.pack.leave(kl.r.key)
	}
	kl.tick.Stop()
	kl.cut.Stop()
	if kl.retry != nil {
		kl.retry.Stop()
	}
}

// next waits for the keeper's next event and handles it; it reports false
// when the keeper must stop.
func (kl *keepLoop) next() bool {
	r := kl.r
	select {
	case <-kl.tick.C:
		return kl.renew(false)
	case <-timerC(kl.retry):
		return kl.renew(true)
	case reply := <-r.k.flushReq:
		err := r.renew(kl.wctx, true, kl.cut)
		stop := err != nil && kl.failed(err)
		reply <- err
		return !stop
	case <-kl.cut.C:
		if !r.valid() {
			r.markLost("no write succeeded since the cut-off, a margin before the lease could expire", nil)
			return false
		}
		// A session's keeps move the cut-off without the keeper.
		kl.cut.Reset(time.Until(r.k.cutoff()))
		return true
	case <-kl.ended:
		r.markLost("the worker's session ended (fenced by another worker, or not kept for almost a lease duration)", nil)
		return false
	case <-r.k.poll:
		return kl.renew(true)
	case <-r.h.abandoned:
		kl.leaveToExpire()
		return false
	case <-r.procDone:
		if !r.isAbandoned() {
			// The reader holds nothing open (a subscription, say) once the
			// lease is released, so the next holder is not refused.
			<-r.readDone
			r.finish(kl.wctx)
		}
		return false
	}
}

// leaveToExpire hands a lease a session keeps, whose handler was abandoned,
// over to expiry: one acquire of its own row on the handle's counter, which
// clears the session's record, so that the lease expires for the others a
// lease duration later, as a lease renewed by its holder does once the
// renewals stop. Without it the row would name a live session for good and
// nobody would take it.
func (kl *keepLoop) leaveToExpire() {
	r := kl.r
	if r.k.gen == 0 || r.lost() {
		return
	}
	r.k.mu.Lock()
	held := r.k.lease
	r.k.mu.Unlock()
	ctx, cancel := context.WithTimeout(kl.wctx, r.c.cfg.callTimeout())
	defer cancel()
	if _, err := r.c.store.Acquire(ctx, held.Key, held.Owner, held.Counter); err != nil {
		r.log.Warn("handing an abandoned lease over to expiry failed; its session keeps it while this worker runs", "err", err)
	}
}

// renew writes when due; it reports false when the keeper must stop.
func (kl *keepLoop) renew(force bool) bool {
	err := kl.r.renew(kl.wctx, force, kl.cut)
	if err == nil {
		kl.bo.Reset()
		return true
	}
	return !kl.failed(err)
}

// failed handles a failed write and reports whether the keeper must stop;
// if not, the write is tried again after the next backoff.
func (kl *keepLoop) failed(err error) bool {
	if kl.r.writeFailed(err) {
		return true
	}
	if d := kl.bo.Next(); kl.retry == nil {
		kl.retry = time.NewTimer(d)
	} else {
		kl.retry.Reset(d)
	}
	return false
}

// renew makes the keeper's next write when one is due: forced (a retry or a
// flush), a write to send again, a pending checkpoint, or the renew
// interval (less half a checkpoint interval) since the last write. It
// answers a handoff request or a note the written row carries.
func (r *leaseRunner) renew(ctx context.Context, force bool, cut *time.Timer) error {
	cfg := r.c.cfg
	held, a := r.nextWrite()
	if r.k.gen != 0 && !force {
		// A session writes no renewals: a lag its keeps do not carry
		// goes to the row every renew interval.
		age := time.Duration(0)
		if l, ok := r.lag.lag(time.Now()); ok {
			age = l.CheckpointAge
		}
		force = lagToRow(r.k.packed, a.pos, age, time.Since(r.k.lastWrite), cfg.renewInterval)
	}
	if r.k.packed && !force && !a.again && (!a.dirty || !r.k.sess.pack.idle(r.key, cfg.leaseDuration)) {
		return nil // the session's keeps carry the checkpoint
	}
	if !a.dirty && !force && !a.again && (r.k.gen != 0 || time.Since(r.k.lastWrite)+cfg.checkpointFlush/2 < cfg.renewInterval) {
		return nil
	}
	if err := r.k.pastCutoff(r.key); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.renewInterval)
	defer cancel()
	next, err := r.send(wctx, held, a)
	if err != nil {
		return err
	}
	cut.Reset(time.Until(r.k.cutoff()))
	r.c.ins.renewDuration.Record(ctx, seconds(time.Since(a.sent)), r.attrs(attribute.Bool("checkpoint", a.dirty)))
	if a.dirty {
		r.log.Debug("checkpoint written", "checkpoint", a.pos.seq, "sub", a.pos.sub, "counter", next.Counter)
	}
	if next.HandoffTo != "" {
		r.handOff(next.HandoffTo)
	}
	if next.Note != held.Note {
		r.c.sendNote(r.id, next.Note)
	}
	return nil
}

// lagToRow reports whether the runner of a lease a session keeps writes
// its row for the lag alone: records wait behind its checkpoint (age), the
// session's keeps do not carry the lag (not packed, or no checkpoint yet
// to pack it with, see packedWant), and the row was last written a renew
// interval ago or more. A per-lease renewal carries the lag as often.
func lagToRow(packed bool, pending position, age, sinceWrite, renew time.Duration) bool {
	if age <= 0 || (packed && pending.seq != "") {
		return false
	}
	return sinceWrite >= renew
}

// packedView is what the session's pack sees of the lease at a keep: the
// holding's counter, the pending checkpoint, whether the row holds it, and
// the lag.
func (r *leaseRunner) packedView() packedView {
	k := &r.k
	k.mu.Lock()
	v := packedView{counter: k.lease.Counter, at: k.pending, rowHolds: k.pending == k.written}
	k.mu.Unlock()
	if l, ok := r.lag.lag(time.Now()); ok {
		v.lag = &l
	}
	return v
}

// writeFailed handles a failed renewal and reports whether the keeper must
// stop: a refusal or an unusable table loses the lease, as does a lease no
// longer surely ours; anything else is counted and logged, to be retried.
func (r *leaseRunner) writeFailed(err error) bool {
	switch {
	case errors.Is(err, ErrLeaseLost):
		r.markLost("a write was refused", err)
		return true
	case errors.Is(err, ErrCorruptLease):
		// Retrying cannot mend it, and a session's keeps would keep the
		// lease for good: it is left to whoever fixes the row.
		r.markLost("its row cannot be decoded", err)
		return true
	case isFatal(err):
		r.log.Error("lease table unusable", "err", err)
		r.markLost("the lease table is unusable", err)
		return true
	case !r.valid():
		r.markLost("no write succeeded for a whole lease duration", err)
		return true
	}
	r.count(evWriteFailure, 1)
	r.log.Warn("lease write failed; retrying", "err", err)
	return false
}

// finish writes the final checkpoint and releases the lease (to the
// requested taker during a handoff), within the grace period counted from
// the stop, handler time included.
func (r *leaseRunner) finish(wctx context.Context) {
	if r.lost() {
		return
	}
	cfg := r.c.cfg
	r.k.mu.Lock()
	from := r.k.stopAt
	r.k.mu.Unlock()
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
		released, err := r.finalWrite(ctx)
		switch {
		case released:
			return
		case err == nil:
			continue
		case errors.Is(err, ErrLeaseLost) || isFatal(err) || !r.valid():
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

// finalWrite makes one step of the final write: the next write while one is
// due (a pending checkpoint, or a write to send again), else the release,
// once no checkpoint can come in any more. It reports whether the lease was
// released.
func (r *leaseRunner) finalWrite(ctx context.Context) (released bool, err error) {
	if err := r.k.pastCutoff(r.key); err != nil {
		return false, err
	}
	held, a := r.nextWrite()
	if a.dirty || a.again {
		_, err := r.send(ctx, held, a)
		return false, err
	}
	k := &r.k
	k.mu.Lock()
	if k.pending != a.pos {
		k.mu.Unlock()
		return false, nil // a checkpoint came in meanwhile: write it first
	}
	k.sealed = true
	k.mu.Unlock()
	if r.end.get() == stopShardEnd {
		// A finished shard is nobody's work: free it rather than hand it over.
		held.HandoffTo = ""
	}
	row, err := r.c.store.Release(ctx, held)
	if err != nil {
		return false, err
	}
	r.count(evReleased, 1)
	r.log.Info("lease released", "checkpoint", a.pos.seq, "to", row.Owner, "counter", row.Counter)
	return true, nil
}

// awaitCheckpoint waits until the pending checkpoint reaches target, and
// reports whether it did before stop or abort was closed.
func (r *leaseRunner) awaitCheckpoint(target position, stop, abort <-chan struct{}) bool {
	for {
		r.k.mu.Lock()
		done := r.k.pending.compare(target) >= 0
		r.k.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-r.k.moved:
		case <-stop:
			return false
		case <-abort:
			return false
		}
	}
}

// awaitManualCheckpoints waits, with manual checkpoints, until the handler
// checkpointed every record it accepted, or ctx ends: the final write then
// carries the work finished during the stop.
func (r *leaseRunner) awaitManualCheckpoints(ctx context.Context) {
	if !r.c.cfg.manualCheckpoint || r.end.get() == stopShardEnd {
		return
	}
	if handed, has := r.k.accepted(); has && !r.awaitCheckpoint(handed, ctx.Done(), nil) {
		r.log.Warn("stopping before the handler checkpointed every record it accepted; the rest is handed again to the next holder")
	}
}

// endShard records SHARD_END once the last batch is processed (in manual
// mode: once the handler checkpointed every record it accepted, the last
// batch's or, when that batch is empty, an earlier one's).
func (r *leaseRunner) endShard() {
	if r.c.cfg.manualCheckpoint {
		if handed, has := r.k.accepted(); has && !r.awaitCheckpoint(handed, r.quit, r.leaseCtx.Done()) {
			return
		}
	}
	r.k.mu.Lock()
	r.k.pending = position{ShardEnd, -1}
	r.k.mu.Unlock()
	r.end.raise(stopShardEnd)
	r.log.Info("shard read to its end")
}

// accepted returns, with manual checkpoints, the last record a handler
// accepted (returned nil for), if any.
func (k *keeper) accepted() (position, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.handed, k.hasHanded
}

// timerC is t's channel, or nil (never ready) when there is no timer.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}
