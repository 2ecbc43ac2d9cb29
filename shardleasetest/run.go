package shardleasetest

import (
	"context"
	"sync"
	"testing"

	"github.com/shardlease/shardlease"
)

// Running is a Consumer that [Run] started. Its methods are safe for
// concurrent use.
type Running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's error; written before done is closed

	mu    sync.Mutex
	taken bool // Stop or Err handed the error to the test
}

// Run starts c.Run on a goroutine of its own, with a context that ends with
// the test, and returns at once. At cleanup it stops the consumer and waits
// for Run to return; if Run returned an error that the test did not take
// through [Running.Stop] or [Running.Err], the test fails with it.
//
// The consumer logs where NewConsumer was told to: make it with
// shardlease.WithLogger([Logger](t)) so that its log is the test's, shown
// with -v or when the test fails, instead of lines on standard error.
func Run(t testing.TB, c *shardlease.Consumer) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &Running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = c.Run(ctx)
	}()
	t.Cleanup(func() {
		r.cancel()
		<-r.done
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.err != nil && !r.taken {
			t.Errorf("shardleasetest: Consumer.Run returned an error: %v", r.err)
		}
	})
	return r
}

// Stop cancels the consumer's context, waits for Run to return and returns
// its error: nil after a clean stop. A consumer stopping checkpoints and
// releases its leases first. Stop may be called more than once.
func (r *Running) Stop() error {
	r.cancel()
	<-r.done
	return r.Err()
}

// Done is closed when Run has returned, by itself or after Stop.
func (r *Running) Done() <-chan struct{} { return r.done }

// Err returns Run's error once Run has returned (see [Running.Done]), and
// nil while it runs.
func (r *Running) Err() error {
	select {
	case <-r.done:
	default:
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.taken = true
	return r.err
}
