package shardlease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardlease/shardlease/internal/backoff"
)

// panicStack returns the stack of a panic being recovered, called from the
// deferred function that recovers it: one "function (file:line)" entry per
// frame, from the panic site outward to the library's call of the handler,
// without the runtime's panic machinery. The first entry is the panic site.
func panicStack() []string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []string
	seenPanic := false
	for {
		f, more := frames.Next()
		switch {
		case !seenPanic:
			// The deferred function and the runtime up to gopanic.
			seenPanic = f.Function == "runtime.gopanic"
		case len(out) == 0 && strings.HasPrefix(f.Function, "runtime."):
			// panicmem, sigpanic, panicIndex...: how the runtime panicked.
		case strings.HasPrefix(f.Function, "github.com/shardlease/shardlease.(*leaseRunner)."):
			// The library's own frames below the handler.
			return out
		default:
			out = append(out, fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line))
		}
		if !more {
			return out
		}
	}
}

// logPanic logs a handler panic as one Error line, with the panic value,
// the panic site and the stack as a list of frames, once per panic site and
// batch: the retries of a batch that panics at the same place again are
// logged at Debug only (Stats().HandlerPanics counts every one). The
// handler's goroutines call it (one per lane with WithKeyConcurrency).
func (r *leaseRunner) logPanic(b *Batch, value any, stack []string) {
	site := "unknown"
	if len(stack) > 0 {
		site = stack[0]
	}
	first, last := "", ""
	if len(b.Records) > 0 {
		first, last = b.Records[0].SequenceNumber, b.Records[len(b.Records)-1].SequenceNumber
	}
	seen := fmt.Sprintf("%s|%s|%s|%d", site, first, last, len(b.Records))
	r.h.mu.Lock()
	again := seen == r.h.panicSeen
	r.h.panicSeen = seen
	r.h.mu.Unlock()
	if again {
		r.log.Debug("handler panicked again at the same place on the same batch", "panic", fmt.Sprint(value), "site", site)
		return
	}
	r.log.Error("handler panicked; the batch is retried", "panic", fmt.Sprint(value), "site", site,
		"records", len(b.Records), "first", first, "stack", stack)
}

// abandonedShards records the leases whose handler was abandoned, for Run's
// error. Runners add to it from their own goroutines; Run reads it as it
// returns.
type abandonedShards struct {
	mu   sync.Mutex
	keys []LeaseKey // in the order abandoned; a shard abandoned twice is named once
}

func (a *abandonedShards) add(key LeaseKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.keys, key) {
		a.keys = append(a.keys, key)
	}
}

// err is Run's error when handlers were abandoned, nil otherwise.
func (a *abandonedShards) err(grace time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) == 0 {
		return nil
	}
	return &AbandonedHandlersError{Shards: slices.Clone(a.keys), Grace: grace}
}

// errAbandoned is what a handler call returns to the runner once the
// handler was abandoned.
var errAbandoned = errors.New("shardlease: the handler did not return within the grace period and was abandoned")

// The watchdog: once the runner is told to stop or its lease's context is
// cancelled, the handler has the grace period to return. Its context is
// cancelled a tenth of the grace period before the end, so that a handler
// that honours it returns (and its lease is released or handed over)
// instead of being abandoned; at the end it is abandoned. Two timers carry
// the rule; no goroutine waits for it.

// armWatchdog starts the grace period, once; stop and the lease's context
// call it.
func (r *leaseRunner) armWatchdog() {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.h.cut != nil || r.processed() {
		return
	}
	grace := r.c.cfg.grace()
	r.h.cut = time.AfterFunc(grace-grace/10, func() {
		if r.processed() {
			return
		}
		r.leaseCancel()
		r.h.mu.Lock()
		defer r.h.mu.Unlock()
		r.h.last = time.AfterFunc(grace/10, func() {
			if !r.processed() {
				r.abandon()
			}
		})
	})
}

// disarmWatchdog stops its timers once the processor is done.
func (r *leaseRunner) disarmWatchdog() {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	for _, t := range []*time.Timer{r.h.cut, r.h.last} {
		if t != nil {
			t.Stop()
		}
	}
}

// processed reports whether the processor has returned.
func (r *leaseRunner) processed() bool {
	select {
	case <-r.procDone:
		return true
	default:
		return false
	}
}

// abandon gives up on the handler: its context is cancelled, the keeper
// stops renewing and writes nothing more (not even a release: the handler
// may still be running, so the lease must expire rather than move at once),
// and the shard stays with nobody in this worker until the handler returns.
func (r *leaseRunner) abandon() {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	select {
	case <-r.h.abandoned:
		return
	case <-r.procDone:
		return // the handler returned meanwhile: nothing to abandon
	default:
	}
	close(r.h.abandoned)
	r.leaseCancel()
	if r.h.running > 0 {
		r.c.markStuck(r)
		// The one line for this event: stopRunners' own timer only calls
		// abandon, which logs here at most once per runner.
		r.log.Error("handler abandoned: it did not return within the grace period after its context was cancelled (shutdown, drain, handoff or lost lease); "+
			"its goroutine is left behind, the lease is no longer renewed and expires for the other workers, and Run will return ErrHandlerAbandoned; "+
			"a handler must return when its context is cancelled",
			"grace", r.c.cfg.grace())
	}
}

// isAbandoned reports whether the handler was abandoned.
func (r *leaseRunner) isAbandoned() bool {
	select {
	case <-r.h.abandoned:
		return true
	default:
		return false
	}
}

// call runs the handler on its own goroutine, so that a handler that does
// not return can be abandoned.
func (r *leaseRunner) call(b *Batch) error {
	r.h.mu.Lock()
	if r.isAbandoned() {
		r.h.mu.Unlock()
		return errAbandoned
	}
	r.h.running++
	r.h.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := r.callHandler(b)
		r.h.mu.Lock()
		r.h.running--
		if r.h.running == 0 && r.isAbandoned() {
			r.c.unstick(r)
		}
		r.h.mu.Unlock()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-r.h.abandoned:
		return errAbandoned
	}
}

// runStartHook runs the start hook, before the first batch.
func (r *leaseRunner) runStartHook() {
	fn := r.c.cfg.hooks.OnStart
	if fn == nil {
		return
	}
	seq, sub, _ := r.startsFrom()
	s := ShardStart{Stream: r.key.Stream, ShardID: r.shard, Checkpoint: seq, SubSequence: sub}
	if s.Checkpoint == "" {
		s.SubSequence = -1
		s.Position = r.initialPosition()
	}
	defer r.recoverHook("OnStart")
	fn(r.leaseCtx, s)
}

// runStopHook runs the stop hook once, with reason, or (reason empty) with the
// reason the processor runStopHook for.
func (r *leaseRunner) runStopHook(reason StopReason) {
	if !r.end.hooked.CompareAndSwap(false, true) {
		return
	}
	if reason == "" {
		reason = r.stopReason()
	}
	if reason == StopLost {
		r.leaseCancel() // the handler's context ends before the hook runs
	}
	r.log.Debug("stopping the shard", "reason", string(reason))
	fn := r.c.cfg.hooks.OnStop
	if fn == nil {
		return
	}
	parent := r.leaseCtx
	if reason == StopLost {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithTimeout(parent, r.c.cfg.shutdownTimeout)
	defer cancel()
	defer r.recoverHook("OnStop")
	fn(ctx, &ShardStop{Stream: r.key.Stream, ShardID: r.shard, Reason: reason, r: r})
}

func (r *leaseRunner) recoverHook(name string) {
	if v := recover(); v != nil {
		r.log.Error("shard hook "+name+" panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}
}

// process hands batches to the handler while the lease is held and no stop
// was asked for: one at a time, or to the lanes of WithKeyConcurrency,
// which it finishes or abandons before it returns. It reports true when it
// rested (see consumer_processor.go) rather than ended.
func (r *leaseRunner) process(batches <-chan *Batch) (rested bool) {
	ln := startLanes(r)
	defer ln.close()
	next := r.source(batches)
	for {
		b, ok, rest := next()
		if rest {
			return true
		}
		if !ok {
			return false
		}
		if len(b.Records) > 0 && !r.deliver(ln, b) {
			return false
		}
		if b.end {
			if ln.finish() { // else stopped before every record was done
				r.runStopHook(StopShardEnded)
				r.endShard()
			}
			return false
		}
	}
}

// deliver hands b to the handler (or the lanes) and marks it processed. It
// reports false when the runner must stop first.
func (r *leaseRunner) deliver(ln *lanes, b *Batch) bool {
	if ln != nil {
		return ln.dispatch(b)
	}
	if !r.handle(b) {
		return false
	}
	if !r.c.cfg.manualCheckpoint {
		// A batch holds whole Kinesis records, aggregates included.
		_ = r.mark(position{b.Records[len(b.Records)-1].SequenceNumber, -1})
	} else {
		last := positionOf(b.Records[len(b.Records)-1])
		r.k.mu.Lock()
		r.k.handed, r.k.hasHanded = last, true
		r.k.mu.Unlock()
	}
	return true
}

// handle runs the handler until it succeeds, retrying with backoff (up to
// WithMaxAttempts, then see giveUp). It reports false when the runner must
// stop first.
func (r *leaseRunner) handle(b *Batch) bool { return r.handleFrom(b, r.mayHand) }

// handleFrom is handle with start telling whether the first attempt may be
// made (lanes finishing their records after a stop was asked for).
func (r *leaseRunner) handleFrom(b *Batch, start func() bool) bool {
	cfg := r.c.cfg
	bo := backoff.Backoff{Min: cfg.retryMin, Max: cfg.retryMax}
	since := time.Now()
	defer r.unstuck(b.lane)
	for {
		gate := r.mayHand
		if bo.Attempts() == 0 {
			gate = start
		}
		if !gate() {
			return false
		}
		err := r.attempt(b)
		if err == nil {
			return true
		}
		if r.isAbandoned() || r.leaseCtx.Err() != nil {
			// Failed because the lease's context was cancelled: no
			// fault of the batch's, and no attempt counted against it.
			return false
		}
		if pe := (*PanicError)(nil); !errors.As(err, &pe) { // a panic was logged by logPanic
			r.log.Warn("handler failed; retrying the batch", "records", len(b.Records), "first", b.Records[0].SequenceNumber, "attempt", bo.Attempts()+1, "err", err)
		}
		if cfg.maxAttempts > 0 && bo.Attempts()+1 >= cfg.maxAttempts {
			return r.giveUp(b, err)
		}
		r.retrying(b, since, bo.Attempts()+1, err)
		if !r.pause(bo.Next()) {
			return false
		}
	}
}

// mayHand reports whether a batch may be handed to the handler now.
func (r *leaseRunner) mayHand() bool {
	select {
	case <-r.quit:
		return false
	case <-r.leaseCtx.Done():
		return false
	default:
	}
	return r.valid()
}

// callHandler calls the handler, turning a panic into a PanicError.
func (r *leaseRunner) callHandler(b *Batch) (err error) {
	defer func() {
		if v := recover(); v != nil {
			r.count(evHandlerPanic, 1)
			pe := &PanicError{Stream: b.Stream, ShardID: b.ShardID, Value: v, Stack: debug.Stack()}
			r.logPanic(b, v, panicStack())
			err = pe
		}
	}()
	return r.m.handler(r.leaseCtx, b)
}

// handling is the state of a runner's handler calls, shared by the
// processor, the handler's own goroutine and the watchdog as marked.
type handling struct {
	mu        sync.Mutex
	running   int           // (mu) handler calls running (one per lane at most)
	abandoned chan struct{} // closed (under mu) when the handler is given up on
	// panicSeen (mu) is the panic site and batch of the last handler panic
	// logged at Error (see logPanic).
	panicSeen string
	// lanes are the lanes of WithKeyConcurrency (nil without it), set by
	// the processor before the first batch.
	lanes *lanes
	// cut and last are the watchdog's timers (under mu): cut cancels the
	// handler's context, last abandons it; nil until armed.
	cut, last *time.Timer
	stuckMu   sync.Mutex
	stuck     *stuckState // (stuckMu) while the handler keeps failing on a batch
}
