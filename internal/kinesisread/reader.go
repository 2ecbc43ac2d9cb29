package kinesisread

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Client is the part of the Kinesis client a polling reader calls.
// *kinesis.Client satisfies it.
type Client interface {
	ShardLister
	GetShardIterator(ctx context.Context, params *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, params *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

var _ Client = (*kinesis.Client)(nil)

// Sink is what a reader's caller learns as the reader goes. Its methods are
// called on the reader's goroutine.
type Sink interface {
	// Behind is told the MillisBehindLatest of every read that reports it.
	Behind(ms int64)
	// Subscribed is told of every subscription opened (enhanced fan-out).
	Subscribed()
	// CheckpointRejected reports whether err, from a call positioned after
	// or at (seq, sub), is Kinesis refusing the sequence number. If so, the
	// caller has dealt with the refusal, and the reader stops.
	CheckpointRejected(err error, seq string, sub int64) bool
}

// Batch is what a reader hands on: the records of one GetRecords call or
// of one subscription event, as Kinesis sent them.
type Batch struct {
	// Records are the shard's next records, in order.
	Records []types.Record
	// After and AfterSub are the position the records follow. A record
	// whose sequence number is After is an aggregate read again, whose user
	// records up to AfterSub were processed already (AfterSub >= 0).
	After    string
	AfterSub int64
	// MillisBehindLatest is how far the read is behind the tip of the
	// shard; zero when Kinesis did not say.
	MillisBehindLatest int64
	// End reports that the shard was read to its end: nothing follows. The
	// last batch of a shard no longer in the stream has it too.
	End bool
}

// Deliver hands b on to the reader's caller. It reports false when the
// reader must stop.
type Deliver func(b Batch) bool

// Reader reads one shard.
type Reader interface {
	// Read reads the shard from pos and hands on each batch with records,
	// and the last one (End set), to deliver in order. It returns when ctx
	// is done, when deliver reports false, after the last batch, or when
	// Kinesis refused the checkpoint it starts after (see
	// Sink.CheckpointRejected). It holds nothing open once it has returned.
	Read(ctx context.Context, pos Position, deliver Deliver)
}

// Shard is one shard to read and what a reader reads it with.
type Shard struct {
	// Stream and ID name the shard.
	Stream, ID string
	// Client reads the shard when polling; either reader lists the
	// stream's shards with it to tell a shard gone from a stream gone.
	Client Client
	Config Config
	Log    *slog.Logger
	Sink   Sink
}

// end hands on the last batch of a shard with no record in it.
func (s Shard) end(deliver Deliver) {
	deliver(Batch{AfterSub: -1, End: true})
}
