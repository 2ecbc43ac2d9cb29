package kinesisread

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/backoff"
)

// PollingReader reads a shard with GetShardIterator and GetRecords.
type PollingReader struct{ Shard }

var _ Reader = PollingReader{}

// Read reads the shard one batch ahead of deliver (see Reader).
func (r PollingReader) Read(ctx context.Context, pos Position, deliver Deliver) {
	if pos.Ended {
		r.end(deliver)
		return
	}
	p := r.poller(pos, deliver)
	for ctx.Err() == nil && p.step(ctx) {
		if p.idle {
			p.idle = false
			if !backoff.Wait(ctx, p.Config.IdlePoll) {
				return
			}
		}
	}
}

// poller returns the state of a read from pos, which shares r.
func (r *PollingReader) poller(pos Position, deliver Deliver) *poller {
	return &poller{PollingReader: r, deliver: deliver, pos: pos, gap: readGapBehind,
		bo: backoff.Backoff{Min: r.Config.RetryMin, Max: r.Config.RetryMax}}
}

// poller is the state of one Read, on its goroutine.
// arn is the StreamARN a GetRecords carries: set when the stream is named by
// its ARN (a stream of another account needs it on every call).
func (p *poller) arn() *string {
	_, arn := Ref(p.Stream)
	return arn
}

type poller struct {
	*PollingReader
	deliver  Deliver
	pos      Position // where the records read so far end
	iter     string   // the shard iterator in hand; empty for none
	lastCall time.Time
	gap      time.Duration // see readGap
	bo       backoff.Backoff
	idle     bool // the last call returned no record: pause IdlePoll
}

// step makes one call: GetShardIterator when no iterator is in hand, else
// GetRecords. It reports false when the reader must stop.
func (p *poller) step(ctx context.Context) bool {
	if p.iter == "" {
		return p.position(ctx)
	}
	res, err := p.getRecords(ctx)
	if err != nil {
		return p.failed(ctx, err)
	}
	p.bo.Reset()
	return p.hand(res)
}

// position gets an iterator at p.pos, and waits out a failure. It reports
// false when the reader must stop: ctx is done, Kinesis refused the
// checkpoint, or the shard is gone (its last batch handed on).
func (p *poller) position(ctx context.Context) bool {
	it, gone, err := p.iterator(ctx, p.pos)
	switch {
	case gone:
		p.Log.Error("shard is no longer in the stream (its records expired before they were read); marking it finished")
		p.end(p.deliver)
		return false
	case err != nil:
		if ctx.Err() != nil || p.Sink.CheckpointRejected(err, p.pos.Checkpoint, p.pos.SubSequence) {
			return false
		}
		p.Log.Warn("GetShardIterator failed; retrying", "err", err)
		p.bo.Sleep(ctx)
		return true
	}
	p.iter = it
	return true
}

// getRecords makes one GetRecords call with the iterator in hand, no sooner
// than the read gap after the last one: at most 5 calls per second per
// shard while behind, 4 once caught up (see readGap).
func (p *poller) getRecords(ctx context.Context) (*kinesis.GetRecordsOutput, error) {
	if wait := p.gap - time.Since(p.lastCall); !p.lastCall.IsZero() && wait > 0 {
		if !backoff.Wait(ctx, wait) {
			return nil, ctx.Err()
		}
	}
	p.lastCall = time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.Config.ReadTimeout)
	defer cancel()
	return p.Client.GetRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(p.iter), Limit: aws.Int32(p.Config.BatchSize), StreamARN: p.arn()})
}

// failed waits out a failed GetRecords call: an expired iterator is made
// again at once, other failures after a backoff (the iterator too unless
// the failure is transient). It reports false when ctx is done.
func (p *poller) failed(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var expired *types.ExpiredIteratorException
	if errors.As(err, &expired) {
		p.Log.Debug("iterator expired; getting a new one", "after", p.pos.Checkpoint)
		p.iter = ""
		return true
	}
	p.Log.Warn("GetRecords failed; backing off", "err", err)
	if !Retryable(err) {
		p.iter = ""
	}
	p.bo.Sleep(ctx)
	return true
}

// hand hands on the records of one GetRecords call, or the shard's end,
// and asks for the idle poll's pause after a call that returned none. It
// reports false when the reader must stop.
func (p *poller) hand(res *kinesis.GetRecordsOutput) bool {
	if res.MillisBehindLatest != nil {
		p.Sink.Behind(*res.MillisBehindLatest)
	}
	p.gap = readGap(len(res.Records), p.Config.BatchSize, res.MillisBehindLatest)
	b := Batch{Records: res.Records, After: p.pos.Checkpoint, AfterSub: p.pos.SubSequence, MillisBehindLatest: aws.ToInt64(res.MillisBehindLatest)}
	b.End = res.NextShardIterator == nil || *res.NextShardIterator == ""
	if n := len(res.Records); n > 0 {
		p.pos = p.pos.After(aws.ToString(res.Records[n-1].SequenceNumber))
	}
	if len(res.Records) > 0 || b.End {
		if !p.deliver(b) || b.End {
			return false
		}
	}
	p.iter = *res.NextShardIterator
	p.idle = len(res.Records) == 0
	return true
}

// Kinesis allows 5 GetRecords calls per second per shard, shared by every
// reader of the shard: a worker taking a shard over is refused while the
// previous holder's last five calls are less than a second old.
const (
	readGapBehind   = 200 * time.Millisecond // 5 calls a second
	readGapCaughtUp = 250 * time.Millisecond // 4 calls a second
)

// readGap is the pause between two GetRecords calls of one reader. A reader
// that is behind uses the shard's whole allowance. A caught-up reader (a short
// batch at the tip of the shard) leaves one call a second unused, so that a
// worker the shard is handed to is not throttled on its first read, at the
// cost of up to 50ms more latency for records that arrive while it waits.
func readGap(records int, limit int32, millisBehind *int64) time.Duration {
	if records >= int(limit) || aws.ToInt64(millisBehind) > 0 {
		return readGapBehind
	}
	return readGapCaughtUp
}

// iterator returns a shard iterator positioned at pos. gone reports that
// the shard no longer exists in the stream.
func (r PollingReader) iterator(ctx context.Context, pos Position) (string, bool, error) {
	in := pos.Iterator(r.Stream, r.ID)
	cctx, cancel := context.WithTimeout(ctx, r.Config.ReadTimeout)
	out, err := r.Client.GetShardIterator(cctx, in)
	cancel()
	if err != nil {
		// Is the stream there, and only the shard gone?
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) && ShardGone(ctx, r.Client, r.Stream, r.ID, r.Config) {
			return "", true, nil
		}
		return "", false, err
	}
	return aws.ToString(out.ShardIterator), false, nil
}
