package shardlease

import (
	"context"
	"errors"
	"reflect"
	"time"
)

// A held lease's life is bounded on every path, whatever the handler or the
// network does:
//
//   - cut-off: the holder stops handing batches, and cancels the handler's
//     context, a margin before a lease duration has passed since its last
//     successful write was sent (cutoffMargin);
//   - grace: once the lease's context is cancelled or the runner is asked to
//     stop (handoff, shutdown), the handler has the grace period to return;
//     after it the runner abandons the handler (its goroutine is left
//     behind), stops renewing and writes nothing more, so the lease expires
//     for the others and Run can return;
//   - calls: every call on the network has a deadline (callTimeout,
//     readTimeout).

// cutoffDivisor sets the cut-off margin: a holder stops a tenth of a lease
// duration before the lease could expire for a taker, which covers monotonic
// clocks running at slightly different rates and the time a handler takes to
// notice its cancelled context.
const cutoffDivisor = 10

// cutoff returns when a lease whose last successful write was sent at sent
// stops being handed batches.
func (c config) cutoff(sent time.Time) time.Time {
	return sent.Add(c.leaseDuration - c.leaseDuration/cutoffDivisor)
}

// tidyReserve is the part of the shutdown timeout kept for withdrawing
// handoff requests, releasing rows handed over late and removing the worker
// row, after the runners had the rest.
func (c config) tidyReserve() time.Duration {
	return min(c.renewInterval, c.shutdownTimeout/4)
}

// grace is how long a stopping runner (handoff, shutdown, lost lease) waits
// for its handler and its final writes.
func (c config) grace() time.Duration { return c.shutdownTimeout - c.tidyReserve() }

// callTimeout bounds each call of the coordinator to the lease store
// (listings, acquires, handoff requests, worker rows): half a lease
// duration, so that a slow but working table still answers while a hung
// call cannot stall take rounds for long. The keeper's writes have the renew
// interval.
func (c config) callTimeout() time.Duration { return max(c.renewInterval, c.leaseDuration/2) }

// readTimeout bounds each call to Kinesis: a hung GetRecords must not keep a
// lease renewed while its shard reads nothing. Enhanced fan-out's calls have
// it too (registration, and SubscribeToShard until it answers).
func (c config) readTimeout() time.Duration { return c.leaseDuration }

// subscriptionHeartbeat is the longest Kinesis stays silent on an open
// SubscribeToShard subscription: it sends an event, empty if need be, at
// least every five seconds.
const subscriptionHeartbeat = 5 * time.Second

// silenceTimeout is how long an open subscription may deliver no event at
// all (not even an empty one) before the reader closes it and subscribes
// again: a lease duration, and at least two of the service's heartbeats, so
// that a quiet shard is not resubscribed over and over.
func (c config) silenceTimeout() time.Duration {
	return max(c.leaseDuration, 2*subscriptionHeartbeat)
}

// callTimedOut reports whether err is a call's own deadline passing while
// ctx, the caller's context, is still live: a transient failure, retried.
func callTimedOut(ctx context.Context, err error) bool {
	return ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}

// storeCtx returns ctx bounded by the store call timeout.
func (c *Consumer) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.callTimeout())
}

// errAbandoned is what a handler call returns to the runner once the
// handler was abandoned.
var errAbandoned = errors.New("shardlease: the handler did not return within the shutdown timeout and was abandoned")

// watchdog abandons the handler if it has not returned within the grace
// period after the runner was told to stop or its lease's context was
// cancelled.
func (r *leaseRunner) watchdog() {
	select {
	case <-r.procDone:
		return
	case <-r.quit:
	case <-r.leaseCtx.Done():
	}
	// The handler's context is cancelled a tenth of the grace period before
	// the end, so that a handler that honours it returns (and its lease is
	// released or handed over) instead of being abandoned.
	grace := r.c.cfg.grace()
	t := time.NewTimer(grace - grace/10)
	defer t.Stop()
	select {
	case <-r.procDone:
		return
	case <-t.C:
		r.leaseCancel()
	}
	t.Reset(grace / 10)
	select {
	case <-r.procDone:
	case <-t.C:
		r.abandon()
	}
}

// abandon gives up on the handler: its context is cancelled, the keeper
// stops renewing and writes nothing more (not even a release: the handler
// may still be running, so the lease must expire rather than move at once),
// and the shard stays with nobody in this worker until the handler returns.
func (r *leaseRunner) abandon() {
	r.handlerMu.Lock()
	defer r.handlerMu.Unlock()
	select {
	case <-r.abandoned:
		return
	case <-r.procDone:
		return // the handler returned meanwhile: nothing to abandon
	default:
	}
	close(r.abandoned)
	r.leaseCancel()
	if r.inHandler {
		r.c.markStuck(r)
		r.log.Error("the handler did not return within the shutdown timeout after its context was cancelled or the lease was asked to stop; "+
			"its goroutine is left behind, the lease is no longer renewed and expires for the other workers; handlers must return when their context is cancelled",
			"timeout", r.c.cfg.grace())
	}
}

// isAbandoned reports whether the handler was abandoned.
func (r *leaseRunner) isAbandoned() bool {
	select {
	case <-r.abandoned:
		return true
	default:
		return false
	}
}

// call runs the handler on its own goroutine, so that a handler that does
// not return can be abandoned.
func (r *leaseRunner) call(b *Batch) error {
	r.handlerMu.Lock()
	if r.isAbandoned() {
		r.handlerMu.Unlock()
		return errAbandoned
	}
	r.inHandler = true
	r.handlerMu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := r.callHandler(b)
		r.handlerMu.Lock()
		r.inHandler = false
		if r.isAbandoned() {
			r.c.unstick(r)
		}
		r.handlerMu.Unlock()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-r.abandoned:
		return errAbandoned
	}
}

// markStuck records that r's handler runs on after r was abandoned: the
// shard is neither counted nor taken by this worker until it returns.
func (c *Consumer) markStuck(r *leaseRunner) {
	c.mu.Lock()
	c.stuck[r.shard] = r
	c.mu.Unlock()
}

func (c *Consumer) unstick(r *leaseRunner) {
	c.mu.Lock()
	if c.stuck[r.shard] == r {
		delete(c.stuck, r.shard)
	}
	c.mu.Unlock()
	r.log.Info("the abandoned handler returned")
}

// stuckSet returns the shards whose abandoned handlers still run.
func (c *Consumer) stuckSet() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.stuck))
	for id := range c.stuck {
		out[id] = true
	}
	return out
}

// errReleased is the cause of a manual checkpoint made after the lease was
// released (handed over, shut down, or its shard finished).
func (r *leaseRunner) errReleased() error {
	return &LeaseError{Op: "checkpoint", Key: r.key, Err: errorf("%w: the lease was released (handed over, shut down or read to its end) or given up; the checkpoint was not written", ErrLeaseLost)}
}

// isNil reports whether v is nil or an interface holding a nil pointer (a
// typed nil client such as (*kinesis.Client)(nil), which would panic at the
// first call).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// boundedSync runs a shard sync within a lease duration: a hung call must
// not stall the coordinator's loop (and its take rounds) for longer.
func (co *coordinator) boundedSync(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, co.c.cfg.leaseDuration)
	defer cancel()
	return co.syncShardsRunning(sctx)
}
