package shardlease

import (
	"context"
	"time"
)

// Draining: a worker that hands every lease to the others while its process
// keeps running, before a deploy stops it.
//
// A drain is the graceful half of a shutdown without its end: Run's
// scheduler withdraws the handoff requests it made, stops every runner (each
// finishes the batch in hand, writes its final checkpoint and releases its
// lease, within the grace period), tells another worker to list if it
// coordinates (the `lead` note), releases rows handed to it meanwhile and
// removes its worker row, so that the others neither wait for it nor count
// it in their shares. The coordinator takes the released leases at its next
// listing, within a take interval, and the workers below their share ask for
// theirs by handoff: no record is handed to two handlers, none is lost. From
// then on the worker takes nothing, lists nothing and writes nothing until
// Run's context ends, when Run returns at once.
//
// A drain is asked for by Drain, or through the table: a `drain` note on a
// row this worker holds (the CLI's drain command writes one on each row of
// the worker), which its next renewal returns.

// drainer carries drain requests to Run's scheduler. Made by NewConsumer.
type drainer struct {
	requests chan chan error // Drain's requests; the scheduler answers each
	runDone  chan struct{}   // closed when Run returns
}

func newDrainer() drainer {
	return drainer{requests: make(chan chan error), runDone: make(chan struct{})}
}

// Drain hands every lease this worker holds to the other workers of the
// stream and returns once all are released: each runner finishes the batch
// in hand, writes its final checkpoint and releases its lease, as at
// shutdown, while the process keeps running. From then on the consumer takes
// nothing new; Run returns at once when its context ends. A service calls
// it on SIGTERM before it cancels Run (see docs/operating.md).
//
// Drain returns nil once drained (at once if it was drained already), ctx's
// error if ctx ends first (the drain goes on), and an error matching
// ErrInvalidConfig when Run is not running. A handler that does not return
// within the grace period is abandoned, as at shutdown, and its lease expires
// for the others.
func (c *Consumer) Drain(ctx context.Context) error {
	if !c.running.Load() {
		return errorf("%w: stream %s: Drain needs a running consumer: call it while Run runs", ErrInvalidConfig, c.stream)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	reply := make(chan error, 1)
	select {
	case c.drain.requests <- reply:
	case <-c.drain.runDone:
		return errorf("%w: stream %s: Drain after Run returned: nothing is held", ErrInvalidConfig, c.stream)
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

// drain is a drain (see the top of this file), run on Run's scheduler
// goroutine, which takes nothing meanwhile: bounded by the shutdown
// timeout, it hands every lease back, answers the request that asked for
// it (nil when the table asked), and stays drained until ctx ends.
func (d *drainer) drain(ctx context.Context, sc *scheduler, reply chan error) error {
	c := sc.c
	start := time.Now()
	c.log.Info("draining: handing every lease to the other workers", "held", c.heldCount())
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.shutdownTimeout)
	// Coordination goes on once the leases are released: the worker told
	// to list takes them at once, and watches a lease whose abandoned
	// handler keeps it until it expires.
	sc.handBack(dctx)
	if c.sess != nil {
		c.sess.retire(dctx)
	}
	cancel()
	c.log.Info("drained: this worker holds no lease and takes none until Run ends")
	c.log.Debug("drain took", "took", time.Since(start))
	if reply != nil {
		reply <- nil
	}
	return d.stay(ctx, sc)
}

// stay is the scheduler's loop once drained: it answers drain requests at
// once and waits for ctx to end.
func (d *drainer) stay(ctx context.Context, sc *scheduler) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case reply := <-d.requests:
			reply <- nil
		case <-sc.c.notes:
		case r := <-sc.exited:
			sc.forget(r)
		}
	}
}
