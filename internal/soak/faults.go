package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamotypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/shardlease/shardlease"
)

// Fault kinds, as counted in the result table.
const (
	FaultThrottle  = "throttling"
	Fault500       = "500 internal error"
	FaultTimeout   = "timeout"
	FaultReset     = "connection reset"
	FaultLostReply = "lost reply (write landed)"
)

var faultKinds = []string{FaultThrottle, Fault500, FaultTimeout, FaultReset, FaultLostReply}

// errCrashed is what every call of a crashed worker gets: nothing it sends
// reaches a server any more.
var errCrashed = errors.New("soak: worker crashed")

// injector decides, reproducibly from its seed, which calls of one worker
// incarnation fail and how; it also crashes and freezes the worker.
type injector struct {
	service string // "dynamodb" or "kinesis" in the counts
	rate    func() float64
	counts  *counter

	mu  sync.Mutex
	rng *rand.Rand

	crashed *atomic.Bool
	freeze  *freezer
	// scansFail makes every Scan fail (throttled) while set.
	scansFail *atomic.Bool
}

// scanThrottled is the error of a Scan while the worker's listings fail.
func (in *injector) scanThrottled(op string) error {
	if op != "Scan" || in.scansFail == nil || !in.scansFail.Load() {
		return nil
	}
	err, _ := dynamoFault(FaultThrottle, op)
	return err
}

// freezer stops every call of a worker while it is paused.
type freezer struct {
	mu     sync.Mutex
	thaw   chan struct{} // nil unless frozen
	pauses int           // freezes so far
}

// count returns how many freezes began so far.
func (f *freezer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pauses
}

func (f *freezer) frozen() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thaw
}

// pause freezes the worker for d, then thaws it. It blocks for d.
func (f *freezer) pause(d time.Duration) {
	f.mu.Lock()
	ch := make(chan struct{})
	f.thaw = ch
	f.pauses++
	f.mu.Unlock()
	t := time.NewTimer(d) // the freeze itself: the process does nothing for d
	<-t.C
	f.mu.Lock()
	f.thaw = nil
	f.mu.Unlock()
	close(ch)
}

// wait blocks while the worker is frozen.
func (f *freezer) wait() {
	if ch := f.frozen(); ch != nil {
		<-ch
	}
}

// pick returns the fault for the next call ("" for none). write reports
// whether the call changes state, so that its reply can be lost.
func (in *injector) pick(write bool) string {
	in.freeze.wait()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.rng.Float64() >= in.rate() {
		return ""
	}
	kinds := faultKinds
	if !write {
		kinds = faultKinds[:len(faultKinds)-1]
	}
	k := kinds[in.rng.IntN(len(kinds))]
	in.counts.add(in.service+" "+k, 1)
	return k
}

func (in *injector) down() error {
	if in.crashed.Load() {
		return errCrashed
	}
	return nil
}

// opError wraps err the way the SDK does.
func opError(service, op string, err error) error {
	return &smithy.OperationError{ServiceID: service, OperationName: op, Err: err}
}

// httpError is an error with an HTTP status, as the SDK returns it.
func httpError(status int, err error) error {
	return &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err},
		RequestID:     "soak-injected",
	}
}

var errTimeout = fmt.Errorf("soak: injected request timeout: %w", context.DeadlineExceeded)

// transportError is the error of a request that got no reply.
func transportError(kind string) error {
	if kind == FaultTimeout {
		return errTimeout
	}
	return errors.New("read tcp 127.0.0.1:41000->127.0.0.1:8000: read: connection reset by peer")
}

// dynamoFault returns the error for a fault kind before the call is made
// (lost is true for a lost reply: make the call, then return the error).
func dynamoFault(kind, op string) (err error, lost bool) {
	switch kind {
	case FaultThrottle:
		return opError("DynamoDB", op, httpError(400, &dynamotypes.ProvisionedThroughputExceededException{Message: aws.String("The level of configured provisioned throughput for the table was exceeded")})), false
	case Fault500:
		return opError("DynamoDB", op, httpError(500, &smithy.GenericAPIError{Code: "InternalServerError", Message: "Internal server error"})), false
	case FaultTimeout, FaultReset:
		return opError("DynamoDB", op, transportError(kind)), false
	case FaultLostReply:
		return opError("DynamoDB", op, transportError(FaultReset)), true
	}
	return nil, false
}

func kinesisFault(kind, op string) (err error, lost bool) {
	switch kind {
	case FaultThrottle:
		if op == "ListShards" {
			return opError("Kinesis", op, httpError(400, &kinesistypes.LimitExceededException{Message: aws.String("Rate exceeded")})), false
		}
		return opError("Kinesis", op, httpError(400, &kinesistypes.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for shard")})), false
	case Fault500:
		return opError("Kinesis", op, httpError(500, &smithy.GenericAPIError{Code: "InternalFailure", Message: "Internal service failure"})), false
	case FaultTimeout, FaultReset:
		return opError("Kinesis", op, transportError(kind)), false
	case FaultLostReply:
		return opError("Kinesis", op, transportError(FaultTimeout)), true
	}
	return nil, false
}

// faultDynamo injects faults into one worker's DynamoDB calls.
type faultDynamo struct {
	next shardlease.DynamoDBAPI
	in   *injector
}

func dynamoCall[O any](in *injector, op string, write bool, call func() (*O, error)) (*O, error) {
	if err := in.down(); err != nil {
		return nil, err
	}
	kind := in.pick(write)
	if err := in.down(); err != nil { // crashed while frozen
		return nil, err
	}
	if err := in.scanThrottled(op); err != nil {
		return nil, err
	}
	ferr, lost := dynamoFault(kind, op)
	if ferr != nil && !lost {
		return nil, ferr
	}
	out, err := call()
	if lost && err == nil {
		return nil, ferr
	}
	return out, err
}

func (f *faultDynamo) GetItem(ctx context.Context, p *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return dynamoCall(f.in, "GetItem", false, func() (*dynamodb.GetItemOutput, error) { return f.next.GetItem(ctx, p, o...) })
}

func (f *faultDynamo) PutItem(ctx context.Context, p *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return dynamoCall(f.in, "PutItem", true, func() (*dynamodb.PutItemOutput, error) { return f.next.PutItem(ctx, p, o...) })
}

func (f *faultDynamo) UpdateItem(ctx context.Context, p *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return dynamoCall(f.in, "UpdateItem", true, func() (*dynamodb.UpdateItemOutput, error) { return f.next.UpdateItem(ctx, p, o...) })
}

func (f *faultDynamo) DeleteItem(ctx context.Context, p *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return dynamoCall(f.in, "DeleteItem", true, func() (*dynamodb.DeleteItemOutput, error) { return f.next.DeleteItem(ctx, p, o...) })
}

func (f *faultDynamo) Scan(ctx context.Context, p *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return dynamoCall(f.in, "Scan", false, func() (*dynamodb.ScanOutput, error) { return f.next.Scan(ctx, p, o...) })
}

// DescribeTable and CreateTable are not faulted: the consumer calls
// DescribeTable once at start, and a worker that cannot start is restarted
// by its supervisor, which tells the soak nothing.
func (f *faultDynamo) DescribeTable(ctx context.Context, p *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	if err := f.in.down(); err != nil {
		return nil, err
	}
	return f.next.DescribeTable(ctx, p, o...)
}

// faultKinesis injects faults into one worker's Kinesis calls.
type faultKinesis struct {
	next shardlease.KinesisAPI
	in   *injector
}

func kinesisCall[O any](in *injector, op string, call func() (*O, error)) (*O, error) {
	if err := in.down(); err != nil {
		return nil, err
	}
	kind := in.pick(op == "GetRecords") // a GetRecords reply can be lost too
	if err := in.down(); err != nil {
		return nil, err
	}
	ferr, lost := kinesisFault(kind, op)
	if ferr != nil && !lost {
		return nil, ferr
	}
	out, err := call()
	if lost && err == nil {
		return nil, ferr
	}
	return out, err
}

func (f *faultKinesis) ListShards(ctx context.Context, p *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return kinesisCall(f.in, "ListShards", func() (*kinesis.ListShardsOutput, error) { return f.next.ListShards(ctx, p, o...) })
}

func (f *faultKinesis) GetShardIterator(ctx context.Context, p *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return kinesisCall(f.in, "GetShardIterator", func() (*kinesis.GetShardIteratorOutput, error) { return f.next.GetShardIterator(ctx, p, o...) })
}

func (f *faultKinesis) GetRecords(ctx context.Context, p *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	return kinesisCall(f.in, "GetRecords", func() (*kinesis.GetRecordsOutput, error) { return f.next.GetRecords(ctx, p, o...) })
}

// faultFanOut adds the enhanced fan-out calls to faultKinesis, with the
// same faults. A subscription's reply is never lost (the stream would be
// left open); a subscription open when its worker crashes is closed by the
// worker's shutdown, as a dead process's connection would be.
type faultFanOut struct {
	*faultKinesis
	fo shardlease.FanOutAPI
}

func (f *faultFanOut) DescribeStreamSummary(ctx context.Context, p *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return kinesisCall(f.in, "DescribeStreamSummary", func() (*kinesis.DescribeStreamSummaryOutput, error) { return f.fo.DescribeStreamSummary(ctx, p, o...) })
}

func (f *faultFanOut) RegisterStreamConsumer(ctx context.Context, p *kinesis.RegisterStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	return kinesisCall(f.in, "RegisterStreamConsumer", func() (*kinesis.RegisterStreamConsumerOutput, error) {
		return f.fo.RegisterStreamConsumer(ctx, p, o...)
	})
}

func (f *faultFanOut) DescribeStreamConsumer(ctx context.Context, p *kinesis.DescribeStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	return kinesisCall(f.in, "DescribeStreamConsumer", func() (*kinesis.DescribeStreamConsumerOutput, error) {
		return f.fo.DescribeStreamConsumer(ctx, p, o...)
	})
}

func (f *faultFanOut) SubscribeToShard(ctx context.Context, p *kinesis.SubscribeToShardInput, o ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	return kinesisCall(f.in, "SubscribeToShard", func() (*kinesis.SubscribeToShardOutput, error) { return f.fo.SubscribeToShard(ctx, p, o...) })
}

// faultStore injects the same faults into a LeaseStore, for the in-process
// world, which has no DynamoDB client to wrap.
type faultStore struct {
	next shardlease.LeaseStore
	in   *injector
}

func storeCall[O any](in *injector, op string, write bool, zero O, call func() (O, error)) (O, error) {
	if err := in.down(); err != nil {
		return zero, err
	}
	kind := in.pick(write)
	if err := in.down(); err != nil {
		return zero, err
	}
	if err := in.scanThrottled(op); err != nil {
		return zero, err
	}
	ferr, lost := dynamoFault(kind, op)
	if ferr != nil && !lost {
		return zero, ferr
	}
	out, err := call()
	if lost && err == nil {
		return zero, ferr
	}
	return out, err
}

func (s *faultStore) Create(ctx context.Context, k shardlease.LeaseKey, p []string) (bool, error) {
	return storeCall(s.in, "PutItem", true, false, func() (bool, error) { return s.next.Create(ctx, k, p) })
}

func (s *faultStore) Get(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	return storeCall(s.in, "GetItem", false, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.next.Get(ctx, k) })
}

func (s *faultStore) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	return storeCall(s.in, "Scan", false, nil, func() ([]shardlease.Lease, error) { return s.next.List(ctx, stream) })
}

func (s *faultStore) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.next.Acquire(ctx, k, owner, observed) })
}

func (s *faultStore) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.next.Renew(ctx, l, e) })
}

func (s *faultStore) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.next.Checkpoint(ctx, l, cp, sub, e) })
}

func (s *faultStore) Release(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.next.Release(ctx, l) })
}

func (s *faultStore) RequestHandoff(ctx context.Context, l shardlease.Lease, taker string) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) { return s.next.RequestHandoff(ctx, l, taker) })
}

// Note and GetEventually carry the coordinator's notes; next keeps them in
// the soak (a MemoryStore or a DynamoStore).
func (s *faultStore) Note(ctx context.Context, l shardlease.Lease, note string) (shardlease.Lease, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Lease{}, func() (shardlease.Lease, error) {
		return s.next.(shardlease.NoteStore).Note(ctx, l, note)
	})
}

func (s *faultStore) GetEventually(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	return storeCall(s.in, "GetItem", false, shardlease.Lease{}, func() (shardlease.Lease, error) {
		return s.next.(shardlease.NoteStore).GetEventually(ctx, k)
	})
}

// The worker-row calls: next keeps worker rows in the soak (a MemoryStore).

func (s *faultStore) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	type both struct {
		l []shardlease.Lease
		w []shardlease.Worker
	}
	got, err := storeCall(s.in, "Scan", false, both{}, func() (both, error) {
		l, w, err := s.next.(shardlease.WorkerStore).ListWithWorkers(ctx, stream)
		return both{l, w}, err
	})
	return got.l, got.w, err
}

func (s *faultStore) ListWithWorkersEventually(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	type both struct {
		l []shardlease.Lease
		w []shardlease.Worker
	}
	got, err := storeCall(s.in, "Scan", false, both{}, func() (both, error) {
		var l []shardlease.Lease
		var w []shardlease.Worker
		var err error
		if el, ok := s.next.(shardlease.EventualLister); ok {
			l, w, err = el.ListWithWorkersEventually(ctx, stream)
		} else {
			l, w, err = s.next.(shardlease.WorkerStore).ListWithWorkers(ctx, stream)
		}
		return both{l, w}, err
	})
	return got.l, got.w, err
}

func (s *faultStore) Heartbeat(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return storeCall(s.in, "UpdateItem", true, shardlease.Worker{}, func() (shardlease.Worker, error) {
		return s.next.(shardlease.WorkerStore).Heartbeat(ctx, stream, owner)
	})
}

func (s *faultStore) RemoveWorker(ctx context.Context, w shardlease.Worker) (bool, error) {
	return storeCall(s.in, "DeleteItem", true, false, func() (bool, error) {
		return s.next.(shardlease.WorkerStore).RemoveWorker(ctx, w)
	})
}
