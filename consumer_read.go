package shardlease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/shardlease/shardlease/internal/kinesisread"
	"github.com/shardlease/shardlease/internal/kpl"
)

// shardReader reads one held shard for its lease runner, one batch ahead of
// the handler, with the kinesisread reader of the configured mode: polling
// or enhanced fan-out. It starts where readPosition says, and turns what
// the reader hands on into batches (de-aggregated by Consumer.convert).
// Everything else, checkpoints, handoff and lost leases, is the runner's
// and shared by both modes.
type shardReader struct {
	r  *leaseRunner
	rd kinesisread.Reader
}

// newReader returns the reader of the configured mode for r.
func (c *Consumer) newReader(r *leaseRunner) shardReader {
	m := r.m
	sh := kinesisread.Shard{Stream: m.ref, ID: r.shard, Client: m.kin, Config: c.cfg.readConfig(), Log: r.log, Sink: readSink{r}}
	if m.fanOut != nil {
		return shardReader{r, kinesisread.FanOutReader{Shard: sh, FanOut: m.fanOut.kin, ConsumerARN: m.fanOut.arn}}
	}
	return shardReader{r, &kinesisread.PollingReader{Shard: sh}}
}

// start sends the shard's batches on out in order (the last batch of a
// closed shard has end set), on goroutines of its own, until ctx is done or
// the shard has ended; out is closed then, and done called once the reader
// holds nothing open: the runner releases the lease only after that. A
// polling reader holds no goroutine while it waits out an idle shard's
// poll (kinesisread.Starter). What it holds meanwhile is counted in Stats
// (see consumer_buffer.go).
func (sr shardReader) start(ctx context.Context, out chan<- *Batch, done func()) {
	r := sr.r
	held := r.c.buffers.reader()
	finish := func() {
		held.close()
		close(out)
		r.proc.ensure() // a resting processor sees the end
		done()
	}
	deliver := func(kb kinesisread.Batch) bool { return sr.hand(ctx, out, held, kb) }
	if st, ok := sr.rd.(kinesisread.Starter); ok {
		st.Start(ctx, r.readPosition(), deliver, finish)
		return
	}
	go func() {
		sr.rd.Read(ctx, r.readPosition(), deliver)
		finish()
	}()
}

// hand hands one batch the reader read on to out, de-aggregated, counting
// what the reader holds in held. It reports false when the reader must
// stop.
func (sr shardReader) hand(ctx context.Context, out chan<- *Batch, held *readAhead, kb kinesisread.Batch) bool {
	r := sr.r
	recs := r.c.convert(kb.Records, kb.After, kb.AfterSub, r.log)
	if len(recs) == 0 && !kb.End {
		return true
	}
	b := &Batch{Stream: r.key.Stream, ShardID: r.shard, Records: recs, MillisBehindLatest: kb.MillisBehindLatest, r: r, end: kb.End}
	if len(recs) > 0 {
		r.lag.read(positionOf(recs[len(recs)-1]))
	}
	held.handing(len(recs), payloadBytes(kb.Records))
	r.proc.sendingNow(true)
	defer r.proc.sendingNow(false)
	select {
	case out <- b:
		held.handed()
		return true
	case <-ctx.Done():
		return false
	}
}

// readSink tells a runner what its reader learns.
type readSink struct{ r *leaseRunner }

// Behind keeps the MillisBehindLatest of the last read, for the metric.
func (s readSink) Behind(ms int64) { s.r.lag.reportBehind(ms) }

// Subscribed counts a subscription opened.
func (s readSink) Subscribed() { s.r.count(evSubscribed, 1) }

// CheckpointRejected handles a GetShardIterator or SubscribeToShard error
// for a reader positioned at the checkpoint (seq, sub): if Kinesis refused the sequence
// number, it logs and counts the refusal, marks the runner so that its
// shard is not taken again until the next shard sync interval, and reports
// true (the reader stops and the lease is released with its checkpoint).
func (s readSink) CheckpointRejected(err error, seq string, sub int64) bool {
	r := s.r
	var inv *types.InvalidArgumentException
	if seq == "" || seq == ShardEnd || !errors.As(err, &inv) {
		return false
	}
	r.rejected.Store(true)
	r.count(evCheckpointRejected, 1, r.shardAttrs()...)
	err = errorf("%w: stream %s shard %s: Kinesis refused to read after checkpoint %s (sub-sequence %d): %w",
		ErrCheckpointRejected, r.key.Stream, r.shard, seq, sub, err)
	r.log.Error("checkpoint rejected; the shard is not read until an operator acts: if the stream was re-created, stop the consumers and run 'shardlease adopt-stream'; if the row was edited, move its checkpoint with 'shardlease reset'. Retried after a shard sync interval", "err", err)
	return true
}

// listShards pages through ListShards (see kinesisread.ListShards), with
// errors that name the stream.
func listShards(ctx context.Context, kin KinesisAPI, stream string, cfg config) ([]types.Shard, error) {
	return listShardsFiltered(ctx, kin, stream, nil, cfg)
}

// toolListing is the configuration of the listings made outside a consumer
// (Rewind, the imports): their retries' backoff.
var toolListing = config{retryMin: 100 * time.Millisecond, retryMax: 10 * time.Second}

// listShardsFiltered is listShards with a ShardFilter (nil for none).
func listShardsFiltered(ctx context.Context, kin KinesisAPI, stream string, filter *types.ShardFilter, cfg config) ([]types.Shard, error) {
	shards, err := kinesisread.ListShardsFiltered(ctx, kin, stream, filter, cfg.readConfig())
	var nf *kinesisread.StreamNotFoundError
	switch {
	case errors.As(err, &nf):
		return nil, &StreamNotFoundError{Stream: stream, Err: nf.Err}
	case err != nil:
		return nil, errorf("shardlease: stream %s: list shards: %w", stream, credentialsHint(err))
	}
	return shards, nil
}

// readConfig is the timing of the calls to Kinesis.
func (c config) readConfig() kinesisread.Config {
	return kinesisread.Config{
		BatchSize: c.batchSize, IdlePoll: c.idlePoll,
		ReadTimeout: c.readTimeout(), SilenceTimeout: c.silenceTimeout(),
		RetryMin: c.retryMin, RetryMax: c.retryMax,
	}
}

// retryable reports whether a Kinesis error is worth retrying after a
// backoff (see kinesisread.Retryable).
func retryable(err error) bool { return kinesisread.Retryable(err) }

// convert turns Kinesis records into handler records: KPL aggregates are
// de-aggregated (unless raw aggregates were asked for), and user records up
// to a checkpoint inside an aggregate (after, afterSub) are skipped.
func (c *Consumer) convert(in []types.Record, after string, afterSub int64, log *slog.Logger) []Record {
	out := make([]Record, 0, len(in))
	var scratch []kpl.UserRecord
	for _, kr := range in {
		seq := aws.ToString(kr.SequenceNumber)
		skip := int64(-1)
		if afterSub >= 0 && seq == after {
			skip = afterSub
		}
		rec := Record{
			SequenceNumber:              seq,
			SubSequenceNumber:           -1,
			PartitionKey:                aws.ToString(kr.PartitionKey),
			Data:                        kr.Data,
			ApproximateArrivalTimestamp: aws.ToTime(kr.ApproximateArrivalTimestamp),
		}
		if c.cfg.rawAggregates || !kpl.IsAggregated(kr.Data) {
			// In raw mode an aggregate checkpointed inside (by a consumer
			// that de-aggregated) is handed over again whole: its user
			// records cannot be handed over in part.
			if skip < 0 || c.cfg.rawAggregates {
				out = append(out, rec)
			}
			continue
		}
		var err error
		scratch, err = kpl.DeaggregateInto(scratch[:0], kr.Data)
		if err != nil {
			// Handed over as it is, the way the KPL's own consumers do.
			c.count(evCorruptAggregate, 1)
			log.Warn("aggregated record does not decode; handing it over as it is", "sequence", seq, "err", err)
			if skip < 0 {
				out = append(out, rec)
			}
			continue
		}
		for _, u := range scratch {
			if int64(u.SubSequence) <= skip {
				continue
			}
			out = append(out, Record{
				SequenceNumber:              seq,
				SubSequenceNumber:           int64(u.SubSequence),
				PartitionKey:                u.PartitionKey,
				ExplicitHashKey:             u.ExplicitHashKey,
				Data:                        u.Data,
				ApproximateArrivalTimestamp: rec.ApproximateArrivalTimestamp,
			})
		}
	}
	return out
}

// readPosition is where r's reader starts: the lease as taken (checkpoint,
// sub-sequence, the row's recorded start), whether the shard is read from its
// start, and the configured initial position.
func (r *leaseRunner) readPosition() kinesisread.Position {
	seq, sub, start := r.startsFrom()
	pos := kinesisread.Position{
		SubSequence: sub, Recorded: readStart(start), FromStart: r.fromStart,
		Initial: readStart(Start{Position: r.m.cfg.position, Timestamp: r.m.cfg.startTimestamp}),
	}
	if seq == ShardEnd {
		pos.Ended = true
	} else {
		pos.Checkpoint = seq
	}
	return pos
}

// initialPosition is where r's reader starts when the lease holds no
// checkpoint, as the start hook names it (see kinesisread.Position.Start).
func (r *leaseRunner) initialPosition() InitialPosition {
	return InitialPosition(r.readPosition().Start().Type)
}

// readStart is s for kinesisread.
func readStart(s Start) kinesisread.Start {
	return kinesisread.Start{Type: types.ShardIteratorType(s.Position), Timestamp: s.Timestamp}
}
