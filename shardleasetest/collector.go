package shardleasetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardlease/shardlease"
)

// Received is one record a [Collector] saw processed, with where it came
// from.
type Received struct {
	// Stream and ShardID name the batch the record came in.
	Stream, ShardID string
	shardlease.Record
}

// Collector is a [shardlease.Handler] that remembers every record of every
// batch it processed, so that a test can wait for them. Make one with
// [Collect] and pass its Handle method to [shardlease.NewConsumer]. It is
// safe for concurrent use by any number of consumers.
type Collector struct {
	next shardlease.Handler

	mu      sync.Mutex
	got     []Received
	changed chan struct{} // closed at the next batch kept; see wake
}

// Collect returns a Collector that hands each batch to next (the handler
// under test) and keeps the batch's records when next returns nil. A nil
// next processes every batch at once.
func Collect(next shardlease.Handler) *Collector {
	return &Collector{next: next}
}

// Handle is the Collector's [shardlease.Handler]. It returns what next
// returned; it keeps the records only of a batch next processed (returned
// nil for), so a batch retried after an error is kept once it succeeds.
func (c *Collector) Handle(ctx context.Context, batch *shardlease.Batch) error {
	if c.next != nil {
		if err := c.next(ctx, batch); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range batch.Records {
		r.Data = slices.Clone(r.Data)
		c.got = append(c.got, Received{Stream: batch.Stream, ShardID: batch.ShardID, Record: r})
	}
	c.wake()
	return nil
}

// Records returns the records kept so far, in the order the batches were
// processed. A record the consumer delivered twice (at least once, as when
// a lease moves) appears twice.
func (c *Collector) Records() []Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// WaitFor blocks until the Collector holds at least n records and returns
// them all (as Records does). If that takes longer than timeout, it fails
// the test, saying how many it holds. Call it from the test's goroutine, as
// t.Fatal requires.
func (c *Collector) WaitFor(t testing.TB, n int, timeout time.Duration) []Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := c.Wait(ctx, n)
	if err != nil {
		t.Fatalf("shardleasetest: %d records processed within %v, want %d; is the handler failing, or the consumer not running?", len(got), timeout, n)
		return nil
	}
	return got
}

// Wait blocks until the Collector holds at least n records and returns them
// all (as Records does). If ctx ends first, it returns those it holds and
// ctx's error.
func (c *Collector) Wait(ctx context.Context, n int) ([]Received, error) {
	for {
		c.mu.Lock()
		if len(c.got) >= n {
			got := slices.Clone(c.got)
			c.mu.Unlock()
			return got, nil
		}
		changed := c.changes()
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return c.Records(), ctx.Err()
		}
	}
}

// changes returns a channel closed at the next batch kept. c.mu must be
// held.
func (c *Collector) changes() <-chan struct{} {
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return c.changed
}

// wake closes the channel changes handed out. c.mu must be held.
func (c *Collector) wake() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}
