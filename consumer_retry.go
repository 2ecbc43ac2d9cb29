package shardlease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.opentelemetry.io/otel/metric"

	"github.com/shardlease/shardlease/internal/backoff"
)

// DeadLetterFunc receives records of a shard that its handler failed on
// WithMaxAttempts times each, with the error of the last failure; today one
// record per call, at its place in the shard's order. Store them somewhere
// to look at later (a queue, a table, a log). Returning nil lets the
// checkpoint move past them; returning an error calls it again after a
// backoff, for as long as the lease is held, and nothing after the records
// is handled or checkpointed meanwhile. ctx is cancelled when the lease is
// lost. A panic is recovered and treated as an error.
type DeadLetterFunc func(ctx context.Context, shard string, records []Record, err error) error

// WithMaxAttempts bounds how often a failing batch is handed to the handler.
// After n failed calls the batch is narrowed down by halves, in order: each
// half is handed over once, a half that succeeds is checkpointed, a half that
// fails is halved again, and a single record is tried alone until it has
// failed n times. Such a record goes to the WithDeadLetter callback before
// the records after it are handed over, and the checkpoint moves past it
// once the callback returns nil. One failing record in a batch of b costs
// about 2n + 2·log2(b) handler calls; every other record is handled once.
// Each dead-lettered record is logged at Error level with its shard and
// sequence number and counted in Stats.RecordsDeadLettered and the
// shardlease.records.deadlettered metric.
//
// Default 0: retry without a limit, so that no record is ever skipped; the
// shardlease.retry.stuck and shardlease.retry.ages_out_in gauges and an
// Error log line (from the third failure in a row, then once a minute) then
// tell how long a shard has been stuck, on which sequence number, and how
// long until that record leaves the stream. n > 0 needs
// WithDeadLetter, and cannot be combined with WithManualCheckpoints.
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithDeadLetter sets the callback that receives the records the handler
// failed on WithMaxAttempts times. It needs WithMaxAttempts.
func WithDeadLetter(fn DeadLetterFunc) Option { return func(c *config) { c.deadLetter = fn } }

// checkRetry validates the retry options; bad formats an ErrInvalidConfig.
func checkRetry(c *config, bad func(format string, args ...any) error) error {
	switch {
	case c.maxAttempts < 0:
		return bad("WithMaxAttempts(%d): use a positive number of attempts, or 0 to retry without a limit", c.maxAttempts)
	case c.maxAttempts > 0 && c.deadLetter == nil:
		return bad("WithMaxAttempts(%d) needs WithDeadLetter(fn): records that fail every attempt must go somewhere, they are never dropped", c.maxAttempts)
	case c.maxAttempts == 0 && c.deadLetter != nil:
		return bad("WithDeadLetter needs WithMaxAttempts(n): without a limit a failing batch is retried forever and nothing reaches the callback")
	case c.maxAttempts > 0 && c.manualCheckpoint:
		return bad("WithMaxAttempts cannot be combined with WithManualCheckpoints: the consumer cannot move a checkpoint past a dead-lettered record that the handler checkpoints itself; retry inside the handler instead")
	}
	return nil
}

// stuckLogEvery is how often a shard whose batch keeps failing, without a
// limit on attempts, logs at Error level; the first time after
// stuckLogAfter failed attempts in a row (a single failure is only a
// warning).
const (
	stuckLogEvery = time.Minute
	stuckLogAfter = 3
)

// stuckState is what a runner reports while its handler keeps failing on
// one batch; the metric callback reads it.
type stuckState struct {
	since   time.Time // first attempt on the batch (monotonic)
	seq     string    // first record of the batch: the checkpoint is stuck before it
	arrival time.Time // its ApproximateArrivalTimestamp
	logged  time.Time // last Error log line
}

// retrying records that the handler failed on b, which it has been trying
// since since, for the stuck-shard metrics; without a limit on attempts it
// also logs at Error level (see stuckLogEvery) how long the shard has been
// stuck, on which sequence number, and how long until that record ages out
// of the stream.
func (r *leaseRunner) retrying(b *Batch, since time.Time, attempt int, err error) {
	first := b.Records[0]
	now := time.Now()
	r.stuckMu.Lock()
	s := r.stuckOn(first, since)
	due := r.c.cfg.maxAttempts == 0 && attempt >= stuckLogAfter && (s.logged.IsZero() || now.Sub(s.logged) >= stuckLogEvery)
	if due {
		s.logged = now
	}
	r.stuckMu.Unlock()
	r.c.learnRetention()
	if !due {
		return
	}
	args := []any{"sequence", first.SequenceNumber, "stuck_for", now.Sub(since).Round(time.Millisecond), "attempts", attempt, "err", err}
	if left, ok := r.c.agesOutIn(first.ApproximateArrivalTimestamp, now); ok {
		args = append(args, "ages_out_in", left.Round(time.Second))
	}
	r.log.Error("shard stuck: the handler keeps failing on a batch and it is retried without a limit (see WithMaxAttempts); records that age out of the stream before it succeeds are lost", args...)
}

// stuckOn returns the stuck state, starting it (stuck on rec since since)
// if there is none. r.stuckMu is held.
func (r *leaseRunner) stuckOn(rec Record, since time.Time) *stuckState {
	if r.stuckAt == nil {
		r.stuckAt = &stuckState{since: since, seq: rec.SequenceNumber, arrival: rec.ApproximateArrivalTimestamp}
	}
	return r.stuckAt
}

// unstuck clears the stuck state once the batch is done.
func (r *leaseRunner) unstuck() {
	r.stuckMu.Lock()
	s := r.stuckAt
	r.stuckAt = nil
	r.stuckMu.Unlock()
	if s != nil && !s.logged.IsZero() {
		r.log.Info("shard moving again", "sequence", s.seq, "stuck_for", time.Since(s.since).Round(time.Millisecond))
	}
}

// stuck returns how long the runner has been stuck and how long until the
// record it is stuck on ages out (ok false when not stuck).
func (r *leaseRunner) stuck(now time.Time) (stuckFor, left time.Duration, knowLeft, ok bool) {
	r.stuckMu.Lock()
	s := r.stuckAt
	r.stuckMu.Unlock()
	if s == nil {
		return 0, 0, false, false
	}
	left, knowLeft = r.c.agesOutIn(s.arrival, now)
	return now.Sub(s.since), left, knowLeft, true
}

// isolate narrows recs, which the handler failed on failed times together
// (last with err), down to the records that fail alone, in order: a half
// the handler succeeds on is checkpointed at once, and a record that fails
// alone maxAttempts times goes to the dead-letter callback before the
// records after it are tried. It reports false when the runner must stop
// first; everything before the record in hand is checkpointed then, so a
// handoff hands nothing handled to the next worker.
func (r *leaseRunner) isolate(b *Batch, recs []Record, failed int, err error) bool {
	if len(recs) == 1 {
		bo := backoff.Backoff{Min: r.c.cfg.retryMin, Max: r.c.cfg.retryMax}
		for failed < r.c.cfg.maxAttempts {
			if !r.pause(bo.Next()) || !r.mayHand() {
				return false
			}
			if err = r.attempt(b.part(recs)); err == nil {
				r.progress(recs)
				return true
			}
			failed++
		}
		return r.deadLetter(recs, err)
	}
	mid := len(recs) / 2
	for _, half := range [][]Record{recs[:mid], recs[mid:]} {
		if !r.mayHand() {
			return false
		}
		err := r.attempt(b.part(half))
		if err == nil {
			r.progress(half)
			continue
		}
		if !r.isolate(b, half, 1, err) {
			return false
		}
	}
	return true
}

// progress checkpoints the last of recs, which are done.
func (r *leaseRunner) progress(recs []Record) {
	last := recs[len(recs)-1]
	_ = r.mark(last.SequenceNumber, last.SubSequenceNumber)
}

// part is a batch of some of b's records.
func (b *Batch) part(recs []Record) *Batch {
	return &Batch{Stream: b.Stream, ShardID: b.ShardID, Records: recs, MillisBehindLatest: b.MillisBehindLatest, r: b.r}
}

// attempt hands b to the handler once and counts the outcome.
func (r *leaseRunner) attempt(b *Batch) error {
	start := time.Now()
	err := r.call(b)
	r.c.ins.handlerTime.Record(bg, seconds(time.Since(start)), r.c.ins.attrs())
	if err == nil {
		r.c.stats.batches.Add(1)
		r.c.stats.records.Add(int64(len(b.Records)))
		r.c.ins.batches.Add(bg, 1, r.c.ins.attrs())
		r.c.ins.records.Add(bg, int64(len(b.Records)), r.c.ins.attrs())
		return nil
	}
	r.c.stats.handlerErrors.Add(1)
	r.c.ins.handlerErrors.Add(bg, 1, r.c.ins.attrs())
	return err
}

// pause waits d, reporting false when the runner must stop first.
func (r *leaseRunner) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.quit:
		return false
	case <-r.leaseCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

// giveUp handles b after the handler failed on it maxAttempts times: it
// narrows the batch down to the failing records and hands each to the
// dead-letter callback (see isolate). It reports false when the runner must
// stop first.
func (r *leaseRunner) giveUp(b *Batch, err error) bool {
	r.log.Warn("handler failed on the batch every attempt; narrowing it down to the failing records",
		"records", len(b.Records), "first", b.Records[0].SequenceNumber, "attempts", r.c.cfg.maxAttempts, "err", err)
	return r.isolate(b, b.Records, r.c.cfg.maxAttempts, err)
}

// deadLetter hands recs, which failed every attempt (the last with err), to
// the dead-letter callback until it returns nil, then checkpoints them. It
// reports false when the runner must stop first.
func (r *leaseRunner) deadLetter(recs []Record, err error) bool {
	bo := backoff.Backoff{Min: r.c.cfg.retryMin, Max: r.c.cfg.retryMax}
	since := time.Now()
	for {
		if !r.mayHand() {
			return false
		}
		cerr := r.callDeadLetter(recs, err)
		if cerr == nil {
			break
		}
		// Stuck until the callback succeeds: report it as such.
		r.stuckMu.Lock()
		r.stuckOn(recs[0], since)
		r.stuckMu.Unlock()
		r.c.learnRetention()
		r.log.Error("dead-letter callback failed; calling it again, the checkpoint stays before the records",
			"records", len(recs), "first", recs[0].SequenceNumber, "attempt", bo.Attempts()+1, "err", cerr)
		if !r.pause(bo.Next()) {
			return false
		}
	}
	for _, rec := range recs {
		r.log.Error("record dead-lettered after failing every attempt", "sequence", rec.SequenceNumber, "sub", rec.SubSequenceNumber,
			"attempts", r.c.cfg.maxAttempts, "err", err)
	}
	r.c.stats.deadLettered.Add(int64(len(recs)))
	r.c.ins.deadLettered.Add(bg, int64(len(recs)), r.c.ins.attrs(shardAttr(r.shard)))
	r.progress(recs)
	return true
}

// callDeadLetter calls the dead-letter callback, turning a panic into an
// error.
func (r *leaseRunner) callDeadLetter(recs []Record, cause error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errorf("dead-letter callback panicked on stream %s shard %s: %v", r.key.Stream, r.shard, v)
		}
	}()
	return r.c.cfg.deadLetter(r.leaseCtx, r.shard, recs, cause)
}

// StreamDescriber is the optional part of a Kinesis client the consumer
// uses to learn the stream's retention period, so that a shard stuck on a
// failing batch reports how long until the record ages out.
// *kinesis.Client satisfies it; a KinesisAPI without it reports no such
// time.
type StreamDescriber interface {
	DescribeStreamSummary(ctx context.Context, params *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

var _ StreamDescriber = (*kinesis.Client)(nil)

// retention is the stream's retention period, learned once.
type retention struct {
	mu    sync.Mutex
	hours int32
	tried time.Time // last failed attempt; retried after stuckLogEvery
}

// agesOutIn returns how long until a record that arrived at arrival leaves
// the stream, when the retention period is known (see learnRetention).
func (c *Consumer) agesOutIn(arrival, now time.Time) (time.Duration, bool) {
	rt := &c.retention
	rt.mu.Lock()
	h := rt.hours
	rt.mu.Unlock()
	if arrival.IsZero() || h <= 0 {
		return 0, false
	}
	return arrival.Add(time.Duration(h) * time.Hour).Sub(now), true
}

// learnRetention asks the stream for its retention period, once it is
// needed: when a shard first gets stuck. A failure is retried after
// stuckLogEvery.
func (c *Consumer) learnRetention() {
	d, ok := c.kin.(StreamDescriber)
	if !ok {
		return
	}
	rt := &c.retention
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.hours > 0 || !rt.tried.IsZero() && time.Since(rt.tried) < stuckLogEvery {
		return
	}
	ctx, cancel := context.WithTimeout(bg, c.cfg.renewInterval)
	defer cancel()
	out, err := d.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(c.stream)})
	if err != nil || out.StreamDescriptionSummary == nil {
		rt.tried = time.Now()
		c.log.Warn("DescribeStreamSummary failed; stuck shards report no time until their records age out", "err", err)
		return
	}
	rt.hours = aws.ToInt32(out.StreamDescriptionSummary.RetentionPeriodHours)
}

// retryInstruments are the metrics of failing batches.
type retryInstruments struct {
	deadLettered metric.Int64Counter
	stuck        metric.Float64ObservableGauge
	agesOut      metric.Float64ObservableGauge
}

func newRetryInstruments(m metric.Meter) (retryInstruments, error) {
	var in retryInstruments
	var errs [3]error
	in.deadLettered, errs[0] = m.Int64Counter("shardlease.records.deadlettered", metric.WithDescription("Records handed to the dead-letter callback."))
	in.stuck, errs[1] = m.Float64ObservableGauge("shardlease.retry.stuck", metric.WithUnit("s"),
		metric.WithDescription("How long each shard whose handler keeps failing has been stuck on one batch."))
	in.agesOut, errs[2] = m.Float64ObservableGauge("shardlease.retry.ages_out_in", metric.WithUnit("s"),
		metric.WithDescription("How long until the oldest record of a stuck shard ages out of the stream."))
	return in, errors.Join(errs[:]...)
}

// observeStuck reports the stuck gauges of r.
func (in *instruments) observeStuck(o metric.Observer, shard string, r *leaseRunner, now time.Time) {
	stuckFor, left, knowLeft, ok := r.stuck(now)
	if !ok {
		return
	}
	o.ObserveFloat64(in.stuck, stuckFor.Seconds(), in.attrs(shardAttr(shard)))
	if knowLeft {
		o.ObserveFloat64(in.agesOut, left.Seconds(), in.attrs(shardAttr(shard)))
	}
}
