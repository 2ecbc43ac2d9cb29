package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/eventwire"
)

// sharedKinesisLocal is the test binary's kinesis-local, behind every
// FanOutShim.
var sharedKinesisLocal = &shared{name: "kinesis-local", start: StartKinesisLocal}

// FanOutShim is a Kinesis endpoint that speaks enhanced fan-out on the wire:
// kinesis-local, with a shim in front that passes every call through and
// completes SubscribeToShard responses. kinesis-local streams events in the
// event-stream encoding, but without the initial-response event the SDK reads
// first (the call fails with "expected initial-response, got
// SubscribeToShardEvent"); the shim writes that event, with the SDK's own
// encoder, and then relays kinesis-local's events as they come.
//
// kinesis-local also never ends the subscription of a closed shard: its
// events go on, empty, with a continuation sequence number. The service's
// last event of a closed shard has the shard's child shards and no
// continuation. The shim asks kinesis-local (GetRecords after the
// continuation) whether an empty event is at the end of a closed shard and
// sends that last event in its place.
//
// The shim also does what tests of a subscription's life need: it ends each
// subscription normally after a lifetime (5 minutes on the service; set it
// with SetSubscriptionLifetime), and SetEventFault makes it end one with an
// exception.
type FanOutShim struct {
	// Endpoint is the shim's base URL; see NewKinesisClient.
	Endpoint string

	upstream string
	kin      *kinesis.Client // kinesis-local's
	srv      *http.Server
	lifetime atomic.Int64 // nanoseconds
	mu       sync.Mutex
	fault    func(shardID string) string
	subs     map[string]int // successful subscriptions by shard
	active   sync.WaitGroup
}

// SubscriptionLifetime is the service's: a subscription ends after 5 minutes.
const SubscriptionLifetime = 5 * time.Minute

// FanOut starts a shim in front of the test binary's shared kinesis-local
// (starting that, and installing it once per machine, on first use) and
// stops the shim when the test ends. Under go test -short it skips the test.
func FanOut(t testing.TB) *FanOutShim {
	t.Helper()
	up := sharedKinesisLocal.endpoint(t)
	s, err := StartFanOutShim(up)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartFanOutShim starts a shim on an ephemeral port of 127.0.0.1 in front of
// the kinesis-local at upstream (a Server's Endpoint).
func StartFanOutShim(upstream string) (*FanOutShim, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &FanOutShim{Endpoint: "http://" + ln.Addr().String(), upstream: upstream, subs: map[string]int{}, kin: NewKinesisClient(upstream)}
	s.lifetime.Store(int64(SubscriptionLifetime))
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Client returns a Kinesis client for the shim.
func (s *FanOutShim) Client(optFns ...func(*kinesis.Options)) *kinesis.Client {
	return NewKinesisClient(s.Endpoint, optFns...)
}

// Close stops the shim and ends its open subscriptions.
func (s *FanOutShim) Close() {
	_ = s.srv.Close()
	s.active.Wait()
}

// SetSubscriptionLifetime sets after how long the shim ends a subscription
// normally (the client's stream then ends without an error), as the service
// does after 5 minutes.
func (s *FanOutShim) SetSubscriptionLifetime(d time.Duration) { s.lifetime.Store(int64(d)) }

// SetEventFault installs fn, consulted before each SubscribeToShardEvent is
// relayed with the subscription's shard: a non-empty result is an exception
// type (such as "InternalFailureException") that ends the subscription in
// its place. nil removes the fault.
func (s *FanOutShim) SetEventFault(fn func(shardID string) string) {
	s.mu.Lock()
	s.fault = fn
	s.mu.Unlock()
}

// Subscriptions returns how many SubscribeToShard calls on shardID got an
// event stream.
func (s *FanOutShim) Subscriptions(shardID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs[shardID]
}

const subscribeTarget = "Kinesis_20131202.SubscribeToShard"

// ServeHTTP passes a request on to kinesis-local and its response back,
// completing SubscribeToShard responses (see FanOutShim).
func (s *FanOutShim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Done()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	up, err := http.NewRequestWithContext(ctx, r.Method, s.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range r.Header {
		up.Header[k] = v
	}
	resp, err := httpClient.Do(up)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if r.Header.Get("X-Amz-Target") != subscribeTarget || resp.StatusCode != http.StatusOK {
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	s.subscribe(ctx, cancel, w, resp, body)
}

// subscribe relays one subscription: the initial-response event first, then
// kinesis-local's events, until the lifetime ends, a fault ends it, or either
// side goes away.
func (s *FanOutShim) subscribe(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, resp *http.Response, body []byte) {
	shard := shardOf(body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", eventwire.ContentType)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	if eventwire.WriteInitialResponse(w) != nil {
		return
	}
	flush()
	var ended atomic.Bool
	timer := time.AfterFunc(time.Duration(s.lifetime.Load()), func() {
		ended.Store(true)
		cancel()
	})
	defer timer.Stop()
	dec := eventstream.NewDecoder()
	enc := eventstream.NewEncoder()
	counted := false
	for {
		msg, err := dec.Decode(resp.Body, nil)
		if err != nil {
			// The lifetime ended (a normal end for the client), or
			// kinesis-local or the client went away.
			return
		}
		if ended.Load() || ctx.Err() != nil {
			return
		}
		if header(msg, ":event-type") == "SubscribeToShardEvent" {
			if last, done := s.shardEnd(ctx, body, msg.Payload); done {
				if eventwire.WriteEvent(w, last) == nil {
					flush()
				}
				return
			}
			if !counted {
				counted = true
				s.mu.Lock()
				s.subs[shard]++
				s.mu.Unlock()
			}
			s.mu.Lock()
			fault := s.fault
			s.mu.Unlock()
			if fault != nil {
				if exc := fault(shard); exc != "" {
					_ = eventwire.WriteException(w, exc, "injected by the test shim")
					flush()
					return
				}
			}
		}
		if err := enc.Encode(w, msg); err != nil {
			return
		}
		flush()
	}
}

func header(m eventstream.Message, name string) string {
	if v := m.Headers.Get(name); v != nil {
		return v.String()
	}
	return ""
}

// shardOf returns the ShardId of a SubscribeToShard request body.
func shardOf(body []byte) string {
	_, after, ok := bytes.Cut(body, []byte(`"ShardId":"`))
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(string(after), `"`)
	return id
}

// shardEnd reports whether the event payload (of a subscription made with
// request body req) is empty at the end of a closed shard, and if so returns
// the service's last event in its place: no records, the child shards, no
// continuation sequence number.
func (s *FanOutShim) shardEnd(ctx context.Context, req, payload []byte) ([]byte, bool) {
	var ev struct {
		Records                    []json.RawMessage
		ContinuationSequenceNumber *string
	}
	var in struct{ ConsumerARN, ShardId string }
	if json.Unmarshal(payload, &ev) != nil || len(ev.Records) > 0 || ev.ContinuationSequenceNumber == nil || json.Unmarshal(req, &in) != nil {
		return nil, false
	}
	// arn:aws:kinesis:region:account:stream/NAME/consumer/CONSUMER:TIME
	_, after, _ := strings.Cut(in.ConsumerARN, ":stream/")
	stream, _, _ := strings.Cut(after, "/consumer/")
	it, err := s.kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName: aws.String(stream), ShardId: aws.String(in.ShardId),
		ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: ev.ContinuationSequenceNumber,
	})
	if err != nil {
		return nil, false
	}
	out, err := s.kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil || len(out.Records) > 0 || out.NextShardIterator != nil {
		return nil, false
	}
	return eventwire.EventJSON(types.SubscribeToShardEvent{Records: []types.Record{}, ChildShards: out.ChildShards, MillisBehindLatest: aws.Int64(0)}), true
}
