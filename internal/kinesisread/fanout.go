package kinesisread

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"

	"github.com/shardlease/shardlease/internal/backoff"
)

// ownCodec gives one SubscribeToShard call a protocol of its own. The SDK's
// client shares one event-stream codec (with its scratch state) between all
// its subscriptions, a data race once several are open at once
// (aws/smithy-go issue 714).
func ownCodec(o *kinesis.Options) {
	if _, ok := o.Protocol.(*awsjson.Protocol); ok {
		o.Protocol = awsjson.New11(schemas.Kinesis_20131202)
	}
}

// inUseMaxWait caps the backoff of a subscription refused because another
// is still open (ResourceInUseException): after a handoff the previous
// holder's subscription is gone within moments.
const inUseMaxWait = time.Second

// FanOutReader reads a shard with SubscribeToShard (enhanced fan-out)
// through the registered stream consumer ConsumerARN (see Register). A
// subscription delivers events for up to five minutes and then ends; the
// reader subscribes again after the last event's continuation sequence
// number, at once after a normal end and with backoff after an error.
type FanOutReader struct {
	Shard
	FanOut      FanOutClient
	ConsumerARN string
}

var _ Reader = FanOutReader{}

// Read reads the shard one batch (one event's records) ahead of deliver
// (see Reader). The subscription in hand is closed before Read returns.
func (r FanOutReader) Read(ctx context.Context, pos Position, deliver Deliver) {
	if pos.Ended {
		r.end(deliver)
		return
	}
	s := &subscriber{FanOutReader: r, deliver: deliver, pos: pos,
		bo:    backoff.Backoff{Min: r.Config.RetryMin, Max: r.Config.RetryMax},
		inUse: backoff.Backoff{Min: r.Config.RetryMin, Max: min(r.Config.RetryMax, inUseMaxWait)},
	}
	for ctx.Err() == nil && s.once(ctx) {
	}
}

// subscriber is the state of one Read, on its goroutine.
type subscriber struct {
	FanOutReader
	deliver Deliver
	pos     Position // where the records read so far end
	// cont is the continuation sequence number of the last event: the next
	// subscription starts after it.
	cont      string
	bo, inUse backoff.Backoff
}

// once makes one subscription and hands its events on until it ends. It
// reports false when the reader must stop.
func (s *subscriber) once(ctx context.Context) bool {
	in := &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(s.ConsumerARN), ShardId: aws.String(s.ID), StartingPosition: s.pos.StartingPosition(s.cont)}
	// The subscription lives in sctx, cancelled once it is done with.
	sctx, cancelSub := context.WithCancel(ctx)
	defer cancelSub()
	sub, err := s.subscribe(sctx, cancelSub, in)
	if err == nil {
		s.Sink.Subscribed()
		var ok, end bool
		ok, end, err = s.consume(ctx, sub.GetStream())
		if !ok || end {
			return false
		}
	}
	cancelSub()
	if err != nil {
		return s.failed(ctx, err)
	}
	s.inUse.Reset()
	// The service ends every subscription after five minutes.
	s.Log.Debug("subscription ended; subscribing again", "after", s.cont)
	s.bo.Reset()
	return true
}

// consume drains the subscription stream (see drain) and closes it; err is
// also the stream's own error.
func (s *subscriber) consume(ctx context.Context, stream *kinesis.SubscribeToShardEventStream) (ok, end bool, err error) {
	ok, end, err = s.drain(ctx, stream)
	_ = stream.Close()
	if err == nil {
		err = stream.Err()
	}
	return ok, end, err
}

// failed waits out a failed subscription: one refused while another is
// still open soon, others after a backoff. It reports false when the reader
// must stop: ctx is done, Kinesis refused the checkpoint it started after,
// or the shard is gone (its last batch handed on).
func (s *subscriber) failed(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if s.cont == "" && s.Sink.CheckpointRejected(err, s.pos.Checkpoint, s.pos.SubSequence) {
		// Started at the checkpoint, which Kinesis refused.
		return false
	}
	var rnf *types.ResourceNotFoundException
	switch {
	case errors.As(err, new(*types.ResourceInUseException)):
		// The previous holder's subscription (or this reader's own last
		// one) is still open on the service's side: it goes soon, so retry
		// soon.
		s.Log.Debug("SubscribeToShard refused: a subscription is still open; retrying", "err", err)
		s.inUse.Sleep(ctx)
		return true
	case errors.As(err, &rnf) && ShardGone(ctx, s.Client, s.Stream, s.ID, s.Config):
		s.Log.Error("shard is no longer in the stream (its records expired before they were read); marking it finished")
		s.end(s.deliver)
		return false
	}
	s.Log.Warn("subscription failed; subscribing again after a backoff", "err", err)
	s.bo.Sleep(ctx)
	return true
}

// subscribe makes the SubscribeToShard call within the read timeout: a call
// that has not answered by then is cancelled (through sctx, which the
// subscription then lives in) and fails with context.DeadlineExceeded.
func (r FanOutReader) subscribe(sctx context.Context, cancel context.CancelFunc, in *kinesis.SubscribeToShardInput) (*kinesis.SubscribeToShardOutput, error) {
	d := r.Config.ReadTimeout
	var late atomic.Bool
	timer := time.AfterFunc(d, func() { late.Store(true); cancel() })
	sub, err := r.FanOut.SubscribeToShard(sctx, in, ownCodec)
	if !timer.Stop() && late.Load() {
		if err == nil {
			_ = sub.GetStream().Close()
		}
		return nil, fmt.Errorf("SubscribeToShard did not answer within %v (a lease duration): %w", d, context.DeadlineExceeded)
	}
	return sub, err
}

// errSilent ends a subscription that delivered no event, not even an empty
// one, for the silence timeout.
var errSilent = errors.New("the subscription delivered no event, not even an empty one, for too long; it is closed")

// drain hands the events of one subscription on as batches until the
// subscription ends. ok is false when the reader must stop (ctx is done, or
// deliver said so); end reports that the shard was read to its end. A
// subscription silent for the silence timeout (the time waiting for its
// next event; the caller's time is not counted) ends with errSilent.
func (s *subscriber) drain(ctx context.Context, stream *kinesis.SubscribeToShardEventStream) (ok, end bool, err error) {
	quiet := s.Config.SilenceTimeout
	silence := time.NewTimer(quiet)
	defer silence.Stop()
	for {
		var ev types.SubscribeToShardEventStream
		silence.Reset(quiet)
		select {
		case <-ctx.Done():
			return false, false, nil
		case <-silence.C:
			return true, false, fmt.Errorf("%w (%v)", errSilent, quiet)
		case got, open := <-stream.Events():
			if !open {
				return true, false, nil
			}
			ev = got
		}
		e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !isEvent {
			continue
		}
		if ok, end = s.hand(e.Value); !ok || end {
			return ok, end, nil
		}
	}
}

// hand hands on the records of one event, or the shard's end. ok is false
// when deliver said to stop; end reports that the shard was read to its
// end.
func (s *subscriber) hand(v types.SubscribeToShardEvent) (ok, end bool) {
	if v.MillisBehindLatest != nil {
		s.Sink.Behind(*v.MillisBehindLatest)
	}
	b := Batch{Records: v.Records, After: s.pos.Checkpoint, AfterSub: s.pos.SubSequence, MillisBehindLatest: aws.ToInt64(v.MillisBehindLatest)}
	if n := len(v.Records); n > 0 {
		s.pos = s.pos.After(aws.ToString(v.Records[n-1].SequenceNumber))
	}
	// The last event of a closed shard has child shards and no continuation
	// sequence number.
	b.End = v.ContinuationSequenceNumber == nil || *v.ContinuationSequenceNumber == ""
	if !b.End {
		s.cont = *v.ContinuationSequenceNumber
	}
	if (len(v.Records) > 0 || b.End) && !s.deliver(b) {
		return false, false
	}
	return true, b.End
}
