package shardlease

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/kinesisread"
)

// pollingReader reads a shard with GetShardIterator and GetRecords.
type pollingReader struct{ *leaseRunner }

// read reads the shard one batch ahead of the handler.
func (r pollingReader) read(ctx context.Context, out chan<- *Batch) {
	defer close(out)
	cfg := r.c.cfg
	bo := backoff.Backoff{Min: cfg.retryMin, Max: cfg.retryMax}
	pos := r.readPosition()
	if pos.Ended {
		select {
		case out <- &Batch{Stream: r.key.Stream, ShardID: r.shard, r: r.leaseRunner, end: true}:
		case <-ctx.Done():
		}
		return
	}
	iter := ""
	var lastCall time.Time
	gap := readGapBehind
	for ctx.Err() == nil {
		if iter == "" {
			it, gone, err := r.iterator(ctx, pos)
			if gone {
				r.log.Error("shard is no longer in the stream (its records expired before they were read); marking it finished")
				select {
				case out <- &Batch{Stream: r.key.Stream, ShardID: r.shard, r: r.leaseRunner, end: true}:
				case <-ctx.Done():
				}
				return
			}
			if err != nil {
				if ctx.Err() != nil || r.checkpointRejected(err, pos.Checkpoint, pos.SubSequence) {
					return
				}
				r.log.Warn("GetShardIterator failed; retrying", "err", err)
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
		cctx, cancel := context.WithTimeout(ctx, cfg.readTimeout())
		res, err := r.c.kin.GetRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(cfg.batchSize)})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var expired *types.ExpiredIteratorException
			if errors.As(err, &expired) {
				r.log.Debug("iterator expired; getting a new one", "after", pos.Checkpoint)
				iter = ""
				continue
			}
			r.log.Warn("GetRecords failed; backing off", "err", err)
			if !retryable(err) {
				iter = ""
			}
			bo.Sleep(ctx)
			continue
		}
		bo.Reset()
		if res.MillisBehindLatest != nil {
			r.behind.Store(*res.MillisBehindLatest)
		}
		gap = readGap(len(res.Records), cfg.batchSize, res.MillisBehindLatest)
		recs := r.c.convert(res.Records, pos.Checkpoint, pos.SubSequence, r.log)
		end := res.NextShardIterator == nil || *res.NextShardIterator == ""
		if len(res.Records) > 0 {
			pos = pos.After(aws.ToString(res.Records[len(res.Records)-1].SequenceNumber))
		}
		if len(recs) > 0 || end {
			b := &Batch{Stream: r.key.Stream, ShardID: r.shard, Records: recs, MillisBehindLatest: aws.ToInt64(res.MillisBehindLatest), r: r.leaseRunner, end: end}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
		}
		if end {
			return
		}
		iter = *res.NextShardIterator
		if len(res.Records) == 0 {
			if !backoff.Wait(ctx, cfg.idlePoll) {
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
func (r *leaseRunner) iterator(ctx context.Context, pos kinesisread.Position) (string, bool, error) {
	in := pos.Iterator(r.key.Stream, r.shard)
	cctx, cancel := context.WithTimeout(ctx, r.c.cfg.readTimeout())
	out, err := r.c.kin.GetShardIterator(cctx, in)
	cancel()
	if err != nil {
		// Is the stream there, and only the shard gone?
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) && r.shardGone(ctx) {
			return "", true, nil
		}
		return "", false, err
	}
	return aws.ToString(out.ShardIterator), false, nil
}
