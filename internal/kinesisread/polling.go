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
	cfg := r.Config
	bo := backoff.Backoff{Min: cfg.RetryMin, Max: cfg.RetryMax}
	if pos.Ended {
		r.end(deliver)
		return
	}
	iter := ""
	var lastCall time.Time
	gap := readGapBehind
	for ctx.Err() == nil {
		if iter == "" {
			it, gone, err := r.iterator(ctx, pos)
			if gone {
				r.Log.Error("shard is no longer in the stream (its records expired before they were read); marking it finished")
				r.end(deliver)
				return
			}
			if err != nil {
				if ctx.Err() != nil || r.Sink.CheckpointRejected(err, pos.Checkpoint, pos.SubSequence) {
					return
				}
				r.Log.Warn("GetShardIterator failed; retrying", "err", err)
				bo.Sleep(ctx)
				continue
			}
			iter = it
		}
		// At most 5 GetRecords calls per second per shard while behind; 4
		// once caught up (see readGap).
		if wait := gap - time.Since(lastCall); !lastCall.IsZero() && wait > 0 {
			if !backoff.Wait(ctx, wait) {
				return
			}
		}
		lastCall = time.Now()
		cctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
		res, err := r.Client.GetRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(cfg.BatchSize)})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var expired *types.ExpiredIteratorException
			if errors.As(err, &expired) {
				r.Log.Debug("iterator expired; getting a new one", "after", pos.Checkpoint)
				iter = ""
				continue
			}
			r.Log.Warn("GetRecords failed; backing off", "err", err)
			if !Retryable(err) {
				iter = ""
			}
			bo.Sleep(ctx)
			continue
		}
		bo.Reset()
		if res.MillisBehindLatest != nil {
			r.Sink.Behind(*res.MillisBehindLatest)
		}
		gap = readGap(len(res.Records), cfg.BatchSize, res.MillisBehindLatest)
		b := Batch{Records: res.Records, After: pos.Checkpoint, AfterSub: pos.SubSequence, MillisBehindLatest: aws.ToInt64(res.MillisBehindLatest)}
		b.End = res.NextShardIterator == nil || *res.NextShardIterator == ""
		if len(res.Records) > 0 {
			pos = pos.After(aws.ToString(res.Records[len(res.Records)-1].SequenceNumber))
		}
		if len(res.Records) > 0 || b.End {
			if !deliver(b) {
				return
			}
		}
		if b.End {
			return
		}
		iter = *res.NextShardIterator
		if len(res.Records) == 0 {
			if !backoff.Wait(ctx, cfg.IdlePoll) {
				return
			}
		}
	}
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
