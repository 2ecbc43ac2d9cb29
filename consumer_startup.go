package shardlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/kinesisread"
)

// Start-up, as Run carries it out: check the table, write the worker row,
// sync the shards (retried), register the fan-out consumer. A start-up that
// hangs is not silent: the startupWatch logs at Warn, every lease duration,
// the step Run waits on, the call in progress and the last error. A failure
// says how many attempts were made and how long they took, as measured.

// startupSyncAttempts bounds the retries of the first shard sync.
const startupSyncAttempts = 8

// startup runs the first shard sync (sync), watched by w. A transient
// failure (throttling, a 500, a timeout) is retried within startupTimeout;
// a missing stream or table, a corrupt row, an endpoint that is not
// reached (see ErrEndpointUnreachable), or a failure that persists is
// returned. It returns nil when ctx is cancelled.
func (w *startupWatch) startup(ctx context.Context, sync func(context.Context) error) error {
	c := w.c
	limit := c.cfg.startupTimeout()
	sctx, cancel := context.WithTimeout(kinesisread.WithObserver(ctx, w.observe), limit)
	defer cancel()
	bo := backoff.Backoff{Min: c.cfg.retryMin, Max: c.cfg.retryMax}
	begun := time.Now()
	for attempt := 1; ; attempt++ {
		err := sync(sctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		err = credentialsHint(err)
		w.failed(attempt, err)
		stop := isFatal(err) || errors.Is(err, ErrCorruptLease) || errors.Is(err, ErrEndpointUnreachable)
		if stop || sctx.Err() != nil || attempt > startupSyncAttempts || !bo.Sleep(sctx) {
			if ctx.Err() != nil {
				return nil
			}
			return errorf("shardlease: stream %s: start-up failed %s%s: %w", c.stream, startupTally(attempt, time.Since(begun), limit, stop), w.retried(), err)
		}
		c.log.Warn("shard sync failed at start; retrying", "attempt", attempt, "err", err)
	}
}

// startupTally says how a start-up ended: after how many attempts, in how
// long, and why it stopped there.
func startupTally(attempts int, took, limit time.Duration, fatal bool) string {
	n := "1 attempt"
	if attempts > 1 {
		n = fmt.Sprintf("%d attempts", attempts)
	}
	took = took.Round(time.Millisecond)
	switch {
	case fatal:
		return fmt.Sprintf("after %s in %v (not retried)", n, took)
	case took >= limit:
		return fmt.Sprintf("after %s in %v (its limit is %v)", n, took, limit)
	default:
		return fmt.Sprintf("after %s in %v (the most it makes)", n, took)
	}
}

// startupWatch keeps a start-up that hangs from being silent: while Run has
// not finished starting (table check, worker row, first shard sync), it
// logs at Warn, every lease duration, which step it is still waiting on,
// the call in progress and the last error.
type startupWatch struct {
	c     *Consumer
	begun time.Time

	// mu guards the rest: Run's goroutine writes the step and the
	// failures, the listings' observer writes call and err, the timer
	// reads.
	mu      sync.Mutex
	step    string
	calls   string      // the calls the step makes
	call    string      // the call in progress, as last observed
	err     error       // the last error of this step
	attempt int         // the shard sync's attempt that failed last
	retries int         // the failed calls the listings observed
	lastBad string      // the call that failed last
	timer   *time.Timer // nil once done
}

// watchStartup starts watching; call step as Run moves on and done when it
// has started or given up.
func (c *Consumer) watchStartup(step, call string) *startupWatch {
	w := &startupWatch{c: c, begun: time.Now(), step: step, calls: call, call: call}
	every := c.cfg.leaseDuration
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(every, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.timer == nil {
			return
		}
		attrs := []any{"waited", time.Since(w.begun).Round(time.Millisecond)}
		if w.call != "" {
			attrs = append(attrs, "call", w.call)
		}
		if w.attempt > 0 {
			attrs = append(attrs, "attempts", w.attempt)
		}
		if w.err != nil {
			attrs = append(attrs, "last_err", w.err)
		} else {
			attrs = append(attrs, "last_err", "none yet: the call has not answered")
		}
		c.log.Warn("start-up is taking long; still "+w.step, attrs...)
		w.timer.Reset(every)
	})
	return w
}

// at records the step Run is waiting on now and the calls it makes.
func (w *startupWatch) at(step, call string) {
	w.mu.Lock()
	w.step, w.calls, w.call, w.err, w.attempt, w.retries = step, call, call, nil, 0, 0
	w.mu.Unlock()
}

// observe is the listings' Observer: it records the call in progress and
// its failures; once a listing is complete, the step's other calls are in
// progress.
func (w *startupWatch) observe(call string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case call == "":
		w.call = w.calls
	case err != nil:
		w.call, w.err, w.lastBad = call, err, call
		w.retries++
	default:
		w.call = call
	}
}

// retried says how many calls within the shard sync's attempts failed,
// when they were more than the attempts: a listing retries on its own.
func (w *startupWatch) retried() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.retries <= w.attempt {
		return ""
	}
	return fmt.Sprintf(", in which %d calls failed, the last to %s", w.retries, w.lastBad)
}

// failed records that attempt of the step failed with err.
func (w *startupWatch) failed(attempt int, err error) {
	w.mu.Lock()
	w.attempt, w.err = attempt, err
	w.mu.Unlock()
}

// done stops the watch; started says whether Run is consuming now.
func (w *startupWatch) done(started bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		return
	}
	w.timer.Stop()
	w.timer = nil
	if started {
		w.c.log.Info("started", "took", time.Since(w.begun).Round(time.Millisecond))
	}
}

// startupCalls names the calls of each start-up step, for the watch.
type startupCalls struct{ table, row, sync, fanOut string }

// startupCallsOf names the calls a start-up makes on streams: DynamoDB's
// on table t when the store has one, the store's methods otherwise.
func startupCallsOf(t, streams string) startupCalls {
	if t == "" {
		return startupCalls{table: "the store's CheckTable", row: "the store's Heartbeat",
			sync:   fmt.Sprintf("Kinesis ListShards and DescribeStreamSummary on %s; the store's List", streams),
			fanOut: "Kinesis DescribeStreamConsumer and RegisterStreamConsumer"}
	}
	return startupCalls{table: "DynamoDB DescribeTable and Scan on table " + t, row: "DynamoDB UpdateItem on table " + t,
		sync:   fmt.Sprintf("Kinesis ListShards and DescribeStreamSummary on %s; DynamoDB Scan on table %s", streams, t),
		fanOut: "Kinesis DescribeStreamConsumer and RegisterStreamConsumer"}
}

// streamsNamed names a consumer's stream, or a group's streams.
func streamsNamed(grouped bool, name string) string {
	if grouped {
		return "the streams of group " + name
	}
	return "stream " + name
}
