package shardleasetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"

	"github.com/shardlease/shardlease/internal/eventwire"
)

// Operation names of enhanced fan-out, passed to a [FaultFunc] and accepted
// by [Kinesis.Calls].
const (
	OpRegisterStreamConsumer   = "RegisterStreamConsumer"
	OpDescribeStreamConsumer   = "DescribeStreamConsumer"
	OpListStreamConsumers      = "ListStreamConsumers"
	OpDeregisterStreamConsumer = "DeregisterStreamConsumer"
	OpSubscribeToShard         = "SubscribeToShard"
	// OpSubscriptionEvent is consulted before each event of a subscription
	// is sent, with the subscription's shard: an error ends the
	// subscription with that error (its ErrorCode, for a smithy.APIError,
	// or InternalFailureException) on the client's side, except ErrSilence.
	OpSubscriptionEvent = "SubscriptionEvent"
)

// ErrSilence, returned by a [FaultFunc] for [OpSubscriptionEvent], makes the
// subscription go silent: it sends nothing more, not even an empty event,
// and does not end by itself (as a connection whose peer stopped answering);
// it ends when the client closes it or goes away.
var ErrSilence = errors.New("shardleasetest: the subscription goes silent")

// SubscriptionLifetime is how long a subscription lasts before the fake
// ends it, as the service does; see [WithSubscriptionLifetime].
const SubscriptionLifetime = 5 * time.Minute

// heartbeat is how often an idle subscription sends an empty event.
const heartbeat = time.Second

// WithSubscriptionLifetime sets how long a SubscribeToShard subscription
// delivers events before it ends normally (default [SubscriptionLifetime]).
func WithSubscriptionLifetime(d time.Duration) KinesisOption {
	return func(f *Kinesis) { f.subLifetime = d }
}

// SetSubscriptionLifetime changes the lifetime of the subscriptions made
// from now on; see [WithSubscriptionLifetime].
func (f *Kinesis) SetSubscriptionLifetime(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subLifetime = d
}

// streamConsumer is a registered enhanced fan-out consumer.
type streamConsumer struct {
	name, arn   string
	stream      string
	incarnation uint64
	created     time.Time
	open        map[int]bool // shards with an open subscription
	activeAt    time.Time    // CREATING until then
}

func (c *streamConsumer) describe() *types.Consumer {
	return &types.Consumer{ConsumerName: ptr(c.name), ConsumerARN: ptr(c.arn), ConsumerStatus: c.status(), ConsumerCreationTimestamp: ptr(c.created)}
}

// status is CREATING for the fake's consumer activation time after
// registration, then ACTIVE.
func (c *streamConsumer) status() types.ConsumerStatus {
	if time.Now().Before(c.activeAt) {
		return types.ConsumerStatusCreating
	}
	return types.ConsumerStatusActive
}

// SetConsumerActivation makes consumers registered from now on stay
// CREATING for d before they are ACTIVE (default 0: ACTIVE at once), as the
// service takes a few seconds. A subscription through a consumer that is
// not ACTIVE is a ResourceInUseException.
func (f *Kinesis) SetConsumerActivation(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.activation = d
}

// consumer finds a registered consumer by ARN, or by stream and name. f.mu
// must be held.
func (f *Kinesis) consumer(arn, streamARN, name *string) (*streamConsumer, error) {
	for _, c := range f.consumers {
		st := f.streams[c.stream]
		if st == nil || st.incarnation != c.incarnation {
			continue
		}
		if arn != nil && *arn == c.arn || arn == nil && streamARN != nil && name != nil && *streamARN == st.arn() && *name == c.name {
			return c, nil
		}
	}
	what := deref(arn)
	if arn == nil {
		what = deref(name) + " of " + deref(streamARN)
	}
	return nil, &types.ResourceNotFoundException{Message: ptr(fmt.Sprintf("Consumer %s under account %s not found.", what, Account))}
}

// beginConsumer begins operation op (see begin), then locks f.mu and finds
// a registered consumer as consumer does. On success the caller holds f.mu
// and releases it with unlock; on error f.mu is not held.
func (f *Kinesis) beginConsumer(ctx context.Context, op string, arn, streamARN, name *string) (c *streamConsumer, unlock func(), err error) {
	if err := f.begin(ctx, op, ""); err != nil {
		return nil, nil, err
	}
	return lockedFind(f, func() (*streamConsumer, error) { return f.consumer(arn, streamARN, name) })
}

// lockStreamARN locks f.mu and finds the stream whose ARN is arn (see
// lockStream).
func (f *Kinesis) lockStreamARN(arn *string) (st *stream, unlock func(), err error) {
	name, err := streamName(nil, arn)
	if err != nil {
		return nil, nil, err
	}
	return f.lockStream(name)
}

// RegisterStreamConsumer registers a consumer of a stream, ACTIVE at once
// unless SetConsumerActivation says otherwise.
// A consumer of that name registered already is a ResourceInUseException.
func (f *Kinesis) RegisterStreamConsumer(ctx context.Context, params *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	if err := f.begin(ctx, OpRegisterStreamConsumer, ""); err != nil {
		return nil, err
	}
	if params == nil || params.StreamARN == nil || params.ConsumerName == nil || *params.ConsumerName == "" {
		return nil, invalidArgument("StreamARN and ConsumerName are required.")
	}
	st, unlock, err := f.lockStreamARN(params.StreamARN)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := f.consumer(nil, params.StreamARN, params.ConsumerName); err == nil {
		return nil, &types.ResourceInUseException{Message: ptr(fmt.Sprintf("Consumer %s of stream %s under account %s is already registered.", *params.ConsumerName, st.name, Account))}
	}
	now := time.Now().UTC()
	c := &streamConsumer{
		name: *params.ConsumerName, stream: st.name, incarnation: st.incarnation, created: now,
		arn:  fmt.Sprintf("%s/consumer/%s:%d", st.arn(), *params.ConsumerName, now.Unix()),
		open: make(map[int]bool), activeAt: now.Add(f.activation),
	}
	f.consumers = append(f.consumers, c)
	return &kinesis.RegisterStreamConsumerOutput{Consumer: c.describe()}, nil
}

// DescribeStreamConsumer describes a consumer given its ARN, or its stream's
// ARN and its name. An unknown one is a ResourceNotFoundException.
func (f *Kinesis) DescribeStreamConsumer(ctx context.Context, params *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	if params == nil {
		params = &kinesis.DescribeStreamConsumerInput{}
	}
	c, unlock, err := f.beginConsumer(ctx, OpDescribeStreamConsumer, params.ConsumerARN, params.StreamARN, params.ConsumerName)
	if err != nil {
		return nil, err
	}
	defer unlock()
	d := c.describe()
	return &kinesis.DescribeStreamConsumerOutput{ConsumerDescription: &types.ConsumerDescription{
		ConsumerName: d.ConsumerName, ConsumerARN: d.ConsumerARN, ConsumerStatus: d.ConsumerStatus,
		ConsumerCreationTimestamp: d.ConsumerCreationTimestamp, StreamARN: ptr(f.streams[c.stream].arn()),
	}}, nil
}

// ListStreamConsumers lists a stream's consumers in one page.
func (f *Kinesis) ListStreamConsumers(ctx context.Context, params *kinesis.ListStreamConsumersInput, optFns ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error) {
	if err := f.begin(ctx, OpListStreamConsumers, ""); err != nil {
		return nil, err
	}
	if params == nil || params.StreamARN == nil {
		return nil, invalidArgument("StreamARN is required.")
	}
	st, unlock, err := f.lockStreamARN(params.StreamARN)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := &kinesis.ListStreamConsumersOutput{Consumers: []types.Consumer{}}
	for _, c := range f.consumers {
		if c.stream == st.name && c.incarnation == st.incarnation {
			out.Consumers = append(out.Consumers, *c.describe())
		}
	}
	return out, nil
}

// DeregisterStreamConsumer removes a consumer at once; its open
// subscriptions end with ResourceNotFoundException.
func (f *Kinesis) DeregisterStreamConsumer(ctx context.Context, params *kinesis.DeregisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error) {
	if params == nil {
		params = &kinesis.DeregisterStreamConsumerInput{}
	}
	c, unlock, err := f.beginConsumer(ctx, OpDeregisterStreamConsumer, params.ConsumerARN, params.StreamARN, params.ConsumerName)
	if err != nil {
		return nil, err
	}
	defer unlock()
	f.consumers = slices.DeleteFunc(f.consumers, func(x *streamConsumer) bool { return x == c })
	if st := f.streams[c.stream]; st != nil {
		st.poke()
	}
	return &kinesis.DeregisterStreamConsumerOutput{}, nil
}

// SubscribeToShard subscribes a registered consumer to a shard. The events
// are served in the service's event-stream wire encoding and decoded by a
// real *kinesis.Client, so the output's stream behaves as the service's:
// records are pushed as they are put (an empty event every second while
// idle), ContinuationSequenceNumber resumes after the last event, the last
// event of a closed shard carries its ChildShards and no continuation, and
// the subscription ends normally after [SubscriptionLifetime]. One
// subscription per consumer and shard may be open at a time: another is a
// ResourceInUseException until the first is closed (Close on the stream)
// or ends. Each subscription is served by a goroutine that exits when the
// subscription ends or is closed.
func (f *Kinesis) SubscribeToShard(ctx context.Context, params *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	if params == nil {
		params = &kinesis.SubscribeToShardInput{}
	}
	if err := f.begin(ctx, OpSubscribeToShard, deref(params.ShardId)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.wire == nil {
		f.wire = kinesis.NewFromConfig(aws.Config{
			Region:       Region,
			BaseEndpoint: aws.String("http://shardleasetest.invalid"),
			HTTPClient:   wireClient{f},
			Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "AKIDFAKE", SecretAccessKey: "fake"}, nil
			}),
		})
	}
	wire := f.wire
	f.mu.Unlock()
	// A protocol of its own per call: the SDK's client shares one event-stream
	// codec between its open subscriptions (aws/smithy-go issue 714).
	own := func(o *kinesis.Options) { o.Protocol = awsjson.New11(schemas.Kinesis_20131202) }
	return wire.SubscribeToShard(ctx, params, append(slices.Clip(optFns), own)...)
}

// wireClient serves the SubscribeToShard requests of the fake's own SDK
// client.
type wireClient struct{ f *Kinesis }

// subscribeRequest is the JSON body of a SubscribeToShard request.
type subscribeRequest struct {
	ConsumerARN      *string
	ShardId          *string
	StartingPosition *struct {
		Type           string
		SequenceNumber *string
		Timestamp      *float64
	}
}

func errorResponse(req *http.Request, err error) *http.Response {
	code, msg := "InternalFailureException", err.Error()
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code, msg = ae.ErrorCode(), ae.ErrorMessage()
	}
	b, _ := json.Marshal(map[string]string{"__type": code, "message": msg})
	status := http.StatusBadRequest
	if code == "InternalFailureException" {
		status = http.StatusInternalServerError
	}
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.1"}, "X-Amzn-Errortype": {code}},
		Body:    io.NopCloser(strings.NewReader(string(b))),
		Request: req, ContentLength: int64(len(b)),
	}
}

// Do serves one SubscribeToShard request: an error response, or an event
// stream whose events a goroutine of its own writes (see subscription).
func (w wireClient) Do(req *http.Request) (*http.Response, error) {
	f := w.f
	var in subscribeRequest
	body, err := io.ReadAll(req.Body)
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil || in.ConsumerARN == nil || in.ShardId == nil || in.StartingPosition == nil {
		return errorResponse(req, invalidArgument("ConsumerARN, ShardId and StartingPosition are required.")), nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.consumer(in.ConsumerARN, nil, nil)
	if err != nil {
		return errorResponse(req, err), nil
	}
	st := f.streams[c.stream]
	s := st.shard(*in.ShardId)
	if s == nil {
		return errorResponse(req, shardNotFound(st.name, *in.ShardId)), nil
	}
	if c.status() != types.ConsumerStatusActive {
		return errorResponse(req, &types.ResourceInUseException{Message: ptr(fmt.Sprintf("Consumer %s is not ACTIVE.", c.arn))}), nil
	}
	if c.open[s.num] {
		return errorResponse(req, &types.ResourceInUseException{Message: ptr(fmt.Sprintf("Another active subscription exists for consumer %s on shard %s.", c.arn, s.id))}), nil
	}
	p := in.StartingPosition
	var pos int
	switch types.ShardIteratorType(p.Type) {
	case types.ShardIteratorTypeTrimHorizon:
	case types.ShardIteratorTypeLatest:
		pos = len(s.records)
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		if p.SequenceNumber == nil {
			return errorResponse(req, invalidArgument("SequenceNumber is required for StartingPosition %s.", p.Type)), nil
		}
		if n, ok := parseSeq(*p.SequenceNumber); !ok || n != s.num {
			return errorResponse(req, invalidArgument("Invalid StartingSequenceNumber %s for shard %s.", *p.SequenceNumber, s.id)), nil
		}
		seq, after := *p.SequenceNumber, p.Type == string(types.ShardIteratorTypeAfterSequenceNumber)
		pos = sort.Search(len(s.records), func(i int) bool {
			r := *s.records[i].SequenceNumber
			return after && r > seq || !after && r >= seq
		})
	case types.ShardIteratorTypeAtTimestamp:
		if p.Timestamp == nil {
			return errorResponse(req, invalidArgument("Timestamp is required for StartingPosition AT_TIMESTAMP.")), nil
		}
		sec, frac := math.Modf(*p.Timestamp)
		ts := time.Unix(int64(sec), int64(frac*1e9))
		pos = sort.Search(len(s.records), func(i int) bool { return !s.records[i].ApproximateArrivalTimestamp.Before(ts) })
	default:
		return errorResponse(req, invalidArgument("StartingPosition type %q is not valid.", p.Type)), nil
	}
	c.open[s.num] = true
	pr, pw := io.Pipe()
	done := make(chan struct{})
	sub := &subscription{f: f, c: c, stream: st.name, incarnation: st.incarnation, shard: s.num, pos: pos, w: pw, done: done}
	go sub.serve(req.Context())
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {eventwire.ContentType}},
		Body:    &subscriptionBody{PipeReader: pr, done: done},
		Request: req, ContentLength: -1,
	}, nil
}

// subscriptionBody is a subscription's response body; closing it ends the
// subscription.
type subscriptionBody struct {
	*io.PipeReader
	done chan struct{}
	once sync.Once
}

// Close ends the subscription; the client's stream Close calls it.
func (b *subscriptionBody) Close() error {
	b.once.Do(func() { close(b.done) })
	return b.PipeReader.Close()
}

// subscription is one open SubscribeToShard call.
type subscription struct {
	f           *Kinesis
	c           *streamConsumer
	stream      string
	incarnation uint64
	shard       int
	pos         int
	w           *io.PipeWriter
	done        chan struct{}
}

// serve writes the subscription's events until it ends, is closed, or its
// client goes away.
func (s *subscription) serve(ctx context.Context) {
	f := s.f
	defer func() {
		f.mu.Lock()
		delete(s.c.open, s.shard)
		f.mu.Unlock()
		_ = s.w.Close()
	}()
	if eventwire.WriteInitialResponse(s.w) != nil {
		return
	}
	f.mu.Lock()
	lifetime := f.subLifetime
	f.mu.Unlock()
	if lifetime <= 0 {
		lifetime = SubscriptionLifetime
	}
	end := time.NewTimer(lifetime)
	defer end.Stop()
	idle := time.NewTimer(heartbeat)
	defer idle.Stop()
	sent, beat := false, false
	for {
		p, gone := s.next()
		if gone != "" {
			_ = eventwire.WriteException(s.w, "ResourceNotFoundException", gone)
			return
		}
		if len(p.ev.Records) > 0 || p.closed || !sent || beat {
			if p.hook != nil {
				if err := p.hook(OpSubscriptionEvent, p.shardID); err != nil {
					s.fail(ctx, err)
					return
				}
			}
			if eventwire.WriteEvent(s.w, eventwire.EventJSON(p.ev)) != nil {
				return
			}
			sent, beat = true, false
			idle.Reset(heartbeat)
		}
		if p.closed {
			return
		}
		if p.more {
			continue // send the rest at once
		}
		select {
		case <-p.changed:
		case <-idle.C:
			beat = true
		case <-end.C:
			return
		case <-s.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// pending is the next event of a subscription, read under f.mu, and what
// serve needs to send it and wait for the one after.
type pending struct {
	ev      types.SubscribeToShardEvent
	closed  bool            // ev is the shard's last event
	more    bool            // records remain after ev's
	changed <-chan struct{} // closed at the stream's next change
	hook    FaultFunc
	shardID string
}

// next reads the subscription's next event and advances its position past
// the event's records. When the stream or the consumer is gone, it returns
// the message of the ResourceNotFoundException that ends the subscription.
func (s *subscription) next() (p pending, gone string) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[s.stream]
	_, cerr := f.consumer(&s.c.arn, nil, nil)
	if st == nil || st.incarnation != s.incarnation || cerr != nil {
		if cerr != nil {
			return pending{}, cerr.Error()
		}
		return pending{}, fmt.Sprintf("Stream %s under account %s not found.", s.stream, Account)
	}
	sh := st.shards[s.shard]
	from := min(s.pos, len(sh.records))
	to := readEnd(sh.records, from, MaxGetRecordsLimit)
	ev := types.SubscribeToShardEvent{Records: make([]types.Record, 0, to-from), MillisBehindLatest: ptr(int64(0))}
	for _, r := range sh.records[from:to] {
		r.Data = slices.Clone(r.Data)
		ev.Records = append(ev.Records, r)
	}
	if to < len(sh.records) {
		ev.MillisBehindLatest = ptr(max(0, time.Since(*sh.records[to].ApproximateArrivalTimestamp).Milliseconds()))
	}
	s.pos = to
	closed := to == len(sh.records) && !sh.open()
	if closed {
		ev.ChildShards = st.childShards(sh)
	} else if to > 0 {
		ev.ContinuationSequenceNumber = ptr(*sh.records[to-1].SequenceNumber)
	} else {
		ev.ContinuationSequenceNumber = ptr(sh.startSeq)
	}
	return pending{ev: ev, closed: closed, more: to < len(sh.records), changed: st.changes(), hook: f.faults, shardID: sh.id}, ""
}

// fail ends the subscription as the fault hook's err says: silent until
// the client goes away for ErrSilence, else with err as the exception.
func (s *subscription) fail(ctx context.Context, err error) {
	if errors.Is(err, ErrSilence) {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		return
	}
	code, msg := "InternalFailureException", err.Error()
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code, msg = ae.ErrorCode(), ae.ErrorMessage()
	}
	_ = eventwire.WriteException(s.w, code, msg)
}
