package kinesisread_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shardlease/shardlease/internal/kinesisread"
	"github.com/shardlease/shardlease/shardleasetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const shard0 = "shardId-000000000000"

// sink records what a reader tells its caller.
type sink struct {
	mu       sync.Mutex
	behind   []int64
	subs     int
	rejected []string // the checkpoints refused
}

func (s *sink) Behind(ms int64) { s.mu.Lock(); s.behind = append(s.behind, ms); s.mu.Unlock() }
func (s *sink) Subscribed()     { s.mu.Lock(); s.subs++; s.mu.Unlock() }
func (s *sink) CheckpointRejected(err error, seq string, _ int64) bool {
	if !errors.As(err, new(*types.InvalidArgumentException)) {
		return false
	}
	s.mu.Lock()
	s.rejected = append(s.rejected, seq)
	s.mu.Unlock()
	return true
}

// closedStream makes a stream "orders" whose one shard holds records a, b
// and c and is closed by a split, so that a reader reads it to its end.
func closedStream(t *testing.T) *shardleasetest.Kinesis {
	t.Helper()
	ctx, f, stream := t.Context(), shardleasetest.NewKinesis(), aws.String("orders")
	_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: stream, ShardCount: aws.Int32(1)})
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c"} {
		_, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: stream, PartitionKey: aws.String(key), Data: []byte(key)})
		require.NoError(t, err)
	}
	_, err = f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: stream,
		ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")})
	require.NoError(t, err)
	return f
}

func shardOf(f *shardleasetest.Kinesis, s *sink) kinesisread.Shard {
	return kinesisread.Shard{
		Stream: "orders", ID: shard0, Client: f, Sink: s, Log: slog.New(slog.DiscardHandler),
		Config: kinesisread.Config{BatchSize: 100, IdlePoll: 10 * time.Millisecond, ReadTimeout: time.Second,
			SilenceTimeout: 10 * time.Second, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond},
	}
}

// readAll reads with rd from pos until it returns, and returns the batches.
func readAll(t *testing.T, rd kinesisread.Reader, pos kinesisread.Position) []kinesisread.Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []kinesisread.Batch
	rd.Read(ctx, pos, func(b kinesisread.Batch) bool { got = append(got, b); return true })
	require.NoError(t, ctx.Err(), "the reader returned at the shard's end")
	return got
}

func data(batches []kinesisread.Batch) []string {
	var out []string
	for _, b := range batches {
		for _, r := range b.Records {
			out = append(out, string(r.Data))
		}
	}
	return out
}

var trimHorizon = kinesisread.Start{Type: types.ShardIteratorTypeTrimHorizon}

// Both readers hand on the shard's records in order, each batch with the
// position it follows, and end with a batch that says so.
func TestReadersReadAClosedShardToItsEnd(t *testing.T) {
	for name, reader := range map[string]func(*shardleasetest.Kinesis, *sink) kinesisread.Reader{
		"polling": func(f *shardleasetest.Kinesis, s *sink) kinesisread.Reader {
			return kinesisread.PollingReader{Shard: shardOf(f, s)}
		},
		"fan-out": func(f *shardleasetest.Kinesis, s *sink) kinesisread.Reader {
			arn, err := kinesisread.Register(t.Context(), f, "orders", "", "reader", shardOf(f, s).Config, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			return kinesisread.FanOutReader{Shard: shardOf(f, s), FanOut: f, ConsumerARN: arn}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f, s := closedStream(t), &sink{}
			rd := reader(f, s)
			all := readAll(t, rd, kinesisread.Position{SubSequence: -1, Initial: trimHorizon})
			require.NotEmpty(t, all)
			assert.Equal(t, []string{"a", "b", "c"}, data(all))
			assert.True(t, all[len(all)-1].End, "the last batch ends the shard")
			assert.Equal(t, "", all[0].After, "the first batch follows the start")
			assert.NotEmpty(t, s.behind, "MillisBehindLatest is told")
			if _, fanOut := rd.(kinesisread.FanOutReader); fanOut {
				assert.Positive(t, s.subs, "subscriptions are told")
			}

			// From a checkpoint: after it, and the batch follows it.
			first := aws.ToString(all[0].Records[0].SequenceNumber)
			rest := readAll(t, rd, kinesisread.Position{Checkpoint: first, SubSequence: -1, Initial: trimHorizon})
			assert.Equal(t, []string{"b", "c"}, data(rest))
			assert.Equal(t, first, rest[0].After)

			// A finished shard: only the end.
			assert.Equal(t, []kinesisread.Batch{{AfterSub: -1, End: true}}, readAll(t, rd, kinesisread.Position{Ended: true}))
		})
	}
}

// A checkpoint Kinesis refuses is told to the sink, and the reader stops.
func TestPollingReaderStopsAtARejectedCheckpoint(t *testing.T) {
	f, s := closedStream(t), &sink{}
	got := readAll(t, kinesisread.PollingReader{Shard: shardOf(f, s)}, kinesisread.Position{Checkpoint: "1", SubSequence: -1})
	assert.Empty(t, got)
	assert.Equal(t, []string{"1"}, s.rejected)
}

// A missing stream is a StreamNotFoundError around the SDK's error, for
// listing and for registering alike.
func TestMissingStream(t *testing.T) {
	f := shardleasetest.NewKinesis()
	cfg := kinesisread.Config{ReadTimeout: time.Second, RetryMin: time.Millisecond, RetryMax: time.Millisecond}
	_, err := kinesisread.ListShards(t.Context(), f, "absent", cfg)
	var nf *kinesisread.StreamNotFoundError
	require.ErrorAs(t, err, &nf)
	assert.Equal(t, "absent", nf.Stream)
	assert.ErrorAs(t, err, new(*types.ResourceNotFoundException))

	_, err = kinesisread.Register(t.Context(), f, "absent", "", "reader", cfg, slog.New(slog.DiscardHandler))
	require.ErrorAs(t, err, &nf)
	assert.ErrorAs(t, err, new(*types.ResourceNotFoundException))
}

// A registration given the stream's ARN does not describe the stream
// again; without it, it describes it once.
func TestRegisterDescribesTheStreamOnlyWithoutItsARN(t *testing.T) {
	f := closedStream(t)
	cfg := kinesisread.Config{ReadTimeout: time.Second, RetryMin: time.Millisecond, RetryMax: time.Millisecond}
	log := slog.New(slog.DiscardHandler)
	arn, err := kinesisread.Register(t.Context(), f, "orders", "", "first", cfg, log)
	require.NoError(t, err)
	require.NotEmpty(t, arn)
	assert.Equal(t, 1, f.Calls(shardleasetest.OpDescribeStreamSummary))
	sum, err := f.DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	require.NoError(t, err)
	f.ResetCalls()
	second, err := kinesisread.Register(t.Context(), f, "orders", aws.ToString(sum.StreamDescriptionSummary.StreamARN), "second", cfg, log)
	require.NoError(t, err)
	assert.NotEqual(t, arn, second, "another consumer")
	assert.Zero(t, f.Calls(shardleasetest.OpDescribeStreamSummary), "the known ARN is used")
}
