package shardlease

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/kinesisread"
)

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
	lane    int       // the lane stuck (0 without WithKeyConcurrency)
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
	r.h.stuckMu.Lock()
	s := r.stuckOn(b.lane, first, since)
	due := r.c.cfg.maxAttempts == 0 && attempt >= stuckLogAfter && (s.logged.IsZero() || now.Sub(s.logged) >= stuckLogEvery)
	if due {
		s.logged = now
	}
	r.h.stuckMu.Unlock()
	r.learnRetention()
	if !due {
		return
	}
	args := []any{"sequence", first.SequenceNumber, "stuck_for", now.Sub(since).Round(time.Millisecond), "attempts", attempt, "err", err}
	if left, ok := r.m.agesOutIn(first.ApproximateArrivalTimestamp, now); ok {
		args = append(args, "ages_out_in", left.Round(time.Second))
	}
	r.log.Error("shard stuck: the handler keeps failing on a batch and it is retried without a limit (see WithMaxAttempts); records that age out of the stream before it succeeds are lost", args...)
}

// stuckOn returns the stuck state, starting it (lane stuck on rec since
// since) if there is none: a shard reports its first lane stuck.
// r.h.stuckMu is held.
func (r *leaseRunner) stuckOn(lane int, rec Record, since time.Time) *stuckState {
	if r.h.stuck == nil {
		r.h.stuck = &stuckState{lane: lane, since: since, seq: rec.SequenceNumber, arrival: rec.ApproximateArrivalTimestamp}
	}
	return r.h.stuck
}

// unstuck clears the stuck state of lane once its batch is done.
func (r *leaseRunner) unstuck(lane int) {
	r.h.stuckMu.Lock()
	s := r.h.stuck
	if s == nil || s.lane != lane {
		r.h.stuckMu.Unlock()
		return
	}
	r.h.stuck = nil
	r.h.stuckMu.Unlock()
	if s != nil && !s.logged.IsZero() {
		r.log.Info("shard moving again", "sequence", s.seq, "stuck_for", time.Since(s.since).Round(time.Millisecond))
	}
}

// stuck returns how long the runner has been stuck and how long until the
// record it is stuck on ages out (ok false when not stuck).
func (r *leaseRunner) stuck(now time.Time) (stuckFor, left time.Duration, knowLeft, ok bool) {
	r.h.stuckMu.Lock()
	s := r.h.stuck
	r.h.stuckMu.Unlock()
	if s == nil {
		return 0, 0, false, false
	}
	left, knowLeft = r.m.agesOutIn(s.arrival, now)
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
		return r.deadLetter(b.lane, recs, err)
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

// progress checkpoints the last of recs, which are done (with lanes: marks
// them done, and the checkpoint follows the watermark).
func (r *leaseRunner) progress(recs []Record) {
	if ln := r.h.lanes; ln != nil {
		ln.wm.done(recs)
		return
	}
	_ = r.mark(positionOf(recs[len(recs)-1]))
}

// part is a batch of some of b's records.
func (b *Batch) part(recs []Record) *Batch {
	return &Batch{Stream: b.Stream, ShardID: b.ShardID, Records: recs, MillisBehindLatest: b.MillisBehindLatest, r: b.r, lane: b.lane}
}

// attempt hands b to the handler once and counts the outcome.
func (r *leaseRunner) attempt(b *Batch) error {
	start := time.Now()
	err := r.call(b)
	r.c.ins.handlerTime.Record(bg, seconds(time.Since(start)), r.attrs())
	if err == nil {
		r.count(evBatchesHandled, 1)
		r.count(evRecordsHandled, int64(len(b.Records)))
		return nil
	}
	r.count(evHandlerError, 1)
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
func (r *leaseRunner) deadLetter(lane int, recs []Record, err error) bool {
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
		r.h.stuckMu.Lock()
		r.stuckOn(lane, recs[0], since)
		r.h.stuckMu.Unlock()
		r.learnRetention()
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
	r.count(evDeadLettered, int64(len(recs)), r.shardAttrs()...)
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
	return r.c.cfg.deadLetter(r.leaseCtx, r.c.set.publicID(r.id), recs, cause)
}

var _ StreamDescriber = (*kinesis.Client)(nil)

// retention is the stream's retention period, learned once.
type retention struct {
	mu     sync.Mutex
	hours  int32
	tried  time.Time // last failed attempt; retried after stuckLogEvery
	asking bool      // a DescribeStreamSummary is under way (the lock is not held over it)
}

// agesOutIn returns how long until a record that arrived at arrival leaves
// the stream, when the retention period is known (see learnRetention).
func (m *member) agesOutIn(arrival, now time.Time) (time.Duration, bool) {
	rt := &m.retention
	rt.mu.Lock()
	h := rt.hours
	rt.mu.Unlock()
	if arrival.IsZero() || h <= 0 {
		return 0, false
	}
	return arrival.Add(time.Duration(h) * time.Hour).Sub(now), true
}

// learnRetention asks r's stream for its retention period, once it is
// needed: when a shard first gets stuck. A failure is retried after
// stuckLogEvery.
func (r *leaseRunner) learnRetention() {
	c, m := r.c, r.m
	d := m.describer
	if d == nil {
		return
	}
	rt := &m.retention
	rt.mu.Lock()
	if rt.asking || rt.hours > 0 || !rt.tried.IsZero() && time.Since(rt.tried) < stuckLogEvery {
		rt.mu.Unlock()
		return
	}
	rt.asking = true
	rt.mu.Unlock()
	ctx, cancel := context.WithTimeout(bg, c.cfg.renewInterval)
	defer cancel()
	name, arn := kinesisread.Ref(m.ref)
	out, err := d.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: name, StreamARN: arn})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.asking = false
	if err != nil || out.StreamDescriptionSummary == nil {
		rt.tried = time.Now()
		r.log.Warn("DescribeStreamSummary failed; stuck shards report no time until their records age out", "err", err)
		return
	}
	rt.hours = aws.ToInt32(out.StreamDescriptionSummary.RetentionPeriodHours)
}
