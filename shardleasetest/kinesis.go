package shardleasetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
)

// Operation names passed to a [FaultFunc] and accepted by [Kinesis.Calls]. They
// are the SDK method names.
const (
	OpCreateStream     = "CreateStream"
	OpDeleteStream     = "DeleteStream"
	OpPutRecord        = "PutRecord"
	OpPutRecords       = "PutRecords"
	OpListShards       = "ListShards"
	OpGetShardIterator = "GetShardIterator"
	OpGetRecords       = "GetRecords"
	OpSplitShard       = "SplitShard"
	OpMergeShards      = "MergeShards"
	// OpUpdateMaxRecordSize is the operation name of UpdateMaxRecordSize.
	OpUpdateMaxRecordSize = "UpdateMaxRecordSize"
)

const (
	// Account is the account id the fake puts in stream ARNs and messages.
	Account = "000000000000"
	// Region is the region the fake puts in stream ARNs.
	Region = "us-east-1"

	// IteratorTTL is how long a shard iterator stays valid after it is issued.
	IteratorTTL = 5 * time.Minute
	// NextTokenTTL is how long a ListShards NextToken stays valid.
	NextTokenTTL = 300 * time.Second
	// DefaultReadLimit is the number of GetRecords calls allowed per shard in
	// any one-second window, as with the real service.
	DefaultReadLimit = 5
	// MaxGetRecordsLimit is the default and largest GetRecords Limit.
	MaxGetRecordsLimit = 10000
	// MaxListShardsResults is the default and largest ListShards MaxResults.
	MaxListShardsResults = 1000
	// MaxPutRecordsEntries is the most records one PutRecords call may carry.
	MaxPutRecordsEntries = 500
	// MaxRecordSize is the largest record payload (data plus partition key)
	// a stream takes by default, as with the service: 1 MiB. CreateStream's
	// MaxRecordSizeInKiB and UpdateMaxRecordSize raise a stream's limit up to
	// [MaxLargeRecordSize].
	MaxRecordSize = 1 << 20
	// MaxLargeRecordSize is the most a stream's maximum record size may be
	// set to: 10 MiB, the service's large records.
	MaxLargeRecordSize = 10 << 20
	// MaxPutRecordsSize is the most data and partition keys one PutRecords
	// call may carry: 10 MiB.
	MaxPutRecordsSize = 10 << 20
	// MaxReadSize is the most record data (data plus partition keys) one
	// GetRecords call returns, or one SubscribeToShard event carries: 10 MiB.
	// Either carries at least one record, so a record as large as
	// [MaxLargeRecordSize] is always handed whole.
	MaxReadSize = 10 << 20
)

// FaultFunc is consulted before each call, after the call is counted. If it
// returns an error, the call fails with exactly that error and changes
// nothing. op is one of the Op constants; shardID is the shard the call names
// (GetShardIterator, GetRecords, SplitShard's ShardToSplit, MergeShards'
// ShardToMerge) and "" for calls on a whole stream (CreateStream,
// DeleteStream, ListShards, PutRecord, PutRecords). It is called without the
// fake's lock held, so it may call the fake itself.
type FaultFunc func(op, shardID string) error

// KinesisOption configures a [Kinesis].
type KinesisOption func(*Kinesis)

// WithReadLimit sets how many GetRecords calls one shard accepts in any
// one-second window before it answers ProvisionedThroughputExceededException.
// The default is [DefaultReadLimit]; n <= 0 turns the limit off.
func WithReadLimit(n int) KinesisOption {
	return func(f *Kinesis) { f.readLimit = n }
}

// WithFaults installs a fault hook from the start; see [Kinesis.SetFaults].
func WithFaults(fn FaultFunc) KinesisOption {
	return func(f *Kinesis) { f.faults = fn }
}

var fakeIDs atomic.Uint64

// Kinesis is an in-process Kinesis service holding any number of streams;
// pass it to [shardlease.NewConsumer] where a service passes a
// *kinesis.Client. The zero value is not usable; call [NewKinesis]. A
// Kinesis is safe for concurrent use. The package doc says how it behaves.
type Kinesis struct {
	id        uint64 // tells this fake's iterators and tokens from another's
	readLimit int
	retention time.Duration // closed shards age out after it; 0: never

	mu          sync.Mutex
	faults      FaultFunc
	calls       map[string]int
	streams     map[string]*stream
	incarnation uint64 // distinguishes a re-created stream from the deleted one

	consumers   []*streamConsumer // registered enhanced fan-out consumers
	subLifetime time.Duration
	activation  time.Duration   // how long a new consumer is CREATING
	wire        *kinesis.Client // decodes SubscribeToShard responses; see fanout.go
}

var (
	_ shardlease.KinesisAPI      = (*Kinesis)(nil)
	_ shardlease.FanOutAPI       = (*Kinesis)(nil)
	_ shardlease.StreamDescriber = (*Kinesis)(nil)
)

// NewKinesis returns an empty Kinesis: no streams, the read limit on, no faults.
func NewKinesis(opts ...KinesisOption) *Kinesis {
	f := &Kinesis{
		id:        fakeIDs.Add(1),
		readLimit: DefaultReadLimit,
		calls:     make(map[string]int),
		streams:   make(map[string]*stream),
	}
	for _, o := range opts {
		o(f)
	}
	return f
}

// SetFaults replaces the fault hook; nil removes it.
func (f *Kinesis) SetFaults(fn FaultFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = fn
}

// Calls returns how many times op (an Op constant) has been called, failed
// calls included.
func (f *Kinesis) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// CallCounts returns a copy of the per-operation call counters.
func (f *Kinesis) CallCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		m[k] = v
	}
	return m
}

// ResetCalls sets every call counter back to zero.
func (f *Kinesis) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.calls)
}

// begin counts a call, honours a cancelled context and consults the fault
// hook. It must be called without f.mu held.
func (f *Kinesis) begin(ctx context.Context, op, shardID string) error {
	f.mu.Lock()
	f.calls[op]++
	hook := f.faults
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("operation error Kinesis: %s: %w", op, err)
	}
	if hook != nil {
		if err := hook(op, shardID); err != nil {
			return err
		}
	}
	return nil
}

func invalidArgument(format string, args ...any) error {
	return &types.InvalidArgumentException{Message: ptr(fmt.Sprintf(format, args...))}
}

func streamNotFound(name string) error {
	return &types.ResourceNotFoundException{Message: ptr(fmt.Sprintf("Stream %s under account %s not found.", name, Account))}
}

func shardNotFound(stream, shard string) error {
	return &types.ResourceNotFoundException{Message: ptr(fmt.Sprintf("Shard %s in stream %s under account %s does not exist", shard, stream, Account))}
}

func ptr[T any](v T) *T { return &v }
