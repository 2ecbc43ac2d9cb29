package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// The mistakes a new user makes first, each with the error or log line
// that names the cause and the fix. The endpoints here are real SDK
// clients pointed at a closed port or at a server that is not AWS: nothing
// is started but those, so every test runs under -short.

// closedEndpoint returns the URL of a port nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	return url
}

// notAWS returns the URL of a web server that answers every request with
// an HTML 404, as a proxy or another service at the wrong port does.
func notAWS(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprint(w, "<html><body><h1>Not Found</h1></body></html>")
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// runOnce runs c until it returns, at most limit, and returns how long it
// took and its error.
func runOnce(t *testing.T, c interface{ Run(context.Context) error }, limit time.Duration) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	start := time.Now()
	err := c.Run(ctx)
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "Run returned only at the test's limit of %v", limit)
	return took, err
}

// An unreachable Kinesis endpoint fails the start-up in seconds, not after
// 45 s of retries, naming the endpoint and the variable that sets it.
func TestMistakeKinesisEndpointUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, endpoint, cause string
	}{
		{"refused", closedEndpoint(t), "connection refused: nothing listens there"},
		{"not Kinesis", notAWS(t), "it answered HTTP 404 with a body that is not the service's JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := shardlease.NewConsumer(emulator.NewKinesisClient(tc.endpoint), shardlease.NewMemoryStore(), "orders", nopHandler,
				shardlease.WithLogger(slog.New(&logRecords{})))
			require.NoError(t, err)
			took, err := runOnce(t, c, 30*time.Second)
			requireMessage(t, err, shardlease.ErrEndpointUnreachable,
				"stream orders: start-up failed after 1 attempt in",
				"(not retried)",
				"cannot reach Kinesis at "+tc.endpoint+": "+tc.cause,
				"AWS_ENDPOINT_URL_KINESIS")
			assert.Less(t, took, 10*time.Second, "fails fast")
			var snf *shardlease.StreamNotFoundError
			assert.False(t, errors.As(err, &snf), "not taken for a missing stream")
		})
	}
}

// An unreachable DynamoDB endpoint fails Run at once with an error naming
// the table, the endpoint, AWS_ENDPOINT_URL_DYNAMODB and what to do,
// instead of the SDK's text alone.
func TestMistakeDynamoEndpointUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, endpoint, cause string
	}{
		{"refused", closedEndpoint(t), "connection refused: nothing listens there"},
		{"not DynamoDB", notAWS(t), "it answered HTTP 404 with a body that is not the service's JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store, err := shardlease.NewDynamoStore(emulator.NewDynamoClient(tc.endpoint), "orders-leases")
			require.NoError(t, err)
			c, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), store, "orders", nopHandler,
				shardlease.WithLogger(slog.New(&logRecords{})))
			require.NoError(t, err)
			took, err := runOnce(t, c, 30*time.Second)
			requireMessage(t, err, shardlease.ErrEndpointUnreachable,
				"stream orders: table orders-leases: describe: ",
				"cannot reach DynamoDB at "+tc.endpoint+": "+tc.cause,
				"AWS_ENDPOINT_URL_DYNAMODB")
			var te *shardlease.TableError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, "orders-leases", te.Table)
			assert.Less(t, took, 10*time.Second, "fails fast")

			// What the CLI calls says so too.
			_, err = store.List(t.Context(), "orders")
			requireMessage(t, err, shardlease.ErrEndpointUnreachable, "table orders-leases", "cannot reach DynamoDB at "+tc.endpoint, "AWS_ENDPOINT_URL_DYNAMODB")
			_, err = store.Get(t.Context(), shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"})
			requireMessage(t, err, shardlease.ErrEndpointUnreachable, "table orders-leases: orders:shardId-000000000000", "cannot reach DynamoDB at "+tc.endpoint)
		})
	}
}

// A missing stream keeps its own error, and the start-up's tally is what
// happened: one attempt, in the time it took, not "within 45s".
func TestMistakeMissingStreamTallyIsTrue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "ordres", nopHandler,
			shardlease.WithLogger(slog.New(&logRecords{})))
		require.NoError(t, err)
		err = c.Run(t.Context())
		var snf *shardlease.StreamNotFoundError
		require.ErrorAs(t, err, &snf)
		assert.NotErrorIs(t, err, shardlease.ErrEndpointUnreachable)
		assert.Contains(t, err.Error(), "stream ordres: start-up failed after 1 attempt in 0s (not retried): stream ordres not found: create it, or check the stream name")
		assert.NotContains(t, err.Error(), "within")
	})
}

// throttledLister answers every ListShards with LimitExceededException.
type throttledLister struct {
	*shardleasetest.Kinesis
}

func (throttledLister) ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return nil, &types.LimitExceededException{Message: aws.String("Rate exceeded for stream orders")}
}

// The start-up warning names the call in progress and its last error, and
// the error it ends with counts the attempts and the time they took.
func TestMistakeStartupWarningNamesCallAndError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		_, err := fake.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		logs := &logRecords{}
		c, err := shardlease.NewConsumer(throttledLister{fake}, shardlease.NewMemoryStore(), "orders", nopHandler,
			shardlease.WithLogger(slog.New(logs)), shardlease.WithLeaseDuration(10*time.Second))
		require.NoError(t, err)
		err = c.Run(t.Context())
		require.Error(t, err)
		assert.Regexp(t, `^shardlease: stream orders: start-up failed after \d+ attempts? in 45s \(its limit is 45s\), in which \d+ calls failed, the last to Kinesis ListShards: `, err.Error())
		assert.Contains(t, err.Error(), "Rate exceeded for stream orders")

		warns := warnings(logs, "start-up is taking long")
		require.Len(t, warns, 4, "one every lease duration within the 45s limit")
		for _, r := range warns {
			assert.Equal(t, "start-up is taking long; still listing the stream's shards", r.Message)
			assert.Equal(t, "Kinesis ListShards", attr(r, "call").String())
			assert.Contains(t, attr(r, "last_err").String(), "LimitExceededException: Rate exceeded for stream orders")
		}
		assert.Equal(t, "10s", attr(warns[0], "waited").String())
	})
}

// warnings returns the Warn records whose message starts with prefix.
func warnings(logs *logRecords, prefix string) []slog.Record {
	var out []slog.Record
	for _, r := range logs.at(slog.LevelWarn) {
		if strings.HasPrefix(r.Message, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// A handler deaf to its context is abandoned with one log line naming its
// shard, and Run says so in its error instead of returning nil.
func TestMistakeDeafHandlerMakesRunFail(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 1)
		w.put(t, &produced{}, 3, 1)
		block := make(chan struct{})
		defer close(block) // lets the abandoned handler return before the bubble ends
		entered := make(chan string, 1)
		var once sync.Once
		deaf := func(ctx context.Context, b *shardlease.Batch) error {
			once.Do(func() { entered <- b.ShardID })
			<-block // ignores ctx
			return nil
		}
		logs := &textLog{}
		c, err := shardlease.NewConsumer(w.kin, w.store, w.stream, deaf, w.opts("a", shardlease.WithLogger(logs.logger()))...)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		shard := <-entered
		cancel()
		err = <-done

		require.ErrorIs(t, err, shardlease.ErrHandlerAbandoned)
		var ae *shardlease.AbandonedHandlersError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, []shardlease.LeaseKey{{Stream: "orders", Shard: shard}}, ae.Shards)
		assert.Contains(t, err.Error(), "the handler of orders:"+shard+" did not return within")
		assert.Contains(t, err.Error(), "a handler must return when ctx.Done() closes")

		lines := logs.matching("abandon", "timeout")
		require.Len(t, lines, 1, "one line for one abandoned handler: %q", lines)
		assert.Contains(t, lines[0], `level=ERROR msg="handler abandoned: `)
		assert.Contains(t, lines[0], " stream=orders ")
		assert.Contains(t, lines[0], " shard="+shard+" ")
	})
}

// textLog keeps a logger's lines as text, attributes given to With
// included.
type textLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *textLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *textLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// matching returns the lines holding any of words.
func (l *textLog) matching(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// Run called twice says so, for a Consumer and a Group, and still matches
// ErrInvalidConfig as it did.
func TestMistakeRunCalledTwice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 1)
		quiet := shardlease.WithLogger(slog.New(&logRecords{}))
		c, err := shardlease.NewConsumer(w.kin, w.store, w.stream, nopHandler, w.opts("a", quiet)...)
		require.NoError(t, err)
		g, err := shardlease.NewGroup(w.kin, w.store, shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{Name: w.stream}}}, nopHandler, w.opts("b", quiet)...)
		require.NoError(t, err)
		for _, tc := range []struct {
			name string
			r    interface{ Run(context.Context) error }
			want string
		}{
			{"Consumer", c, "shardlease: Run was already called: stream orders: Run was already called on this Consumer, and a Consumer runs once: make a new Consumer with NewConsumer for another run"},
			{"Group", g, "shardlease: Run was already called: group g: Run was already called on this Group, and a Group runs once: make a new Group with NewGroup for another run"},
		} {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- tc.r.Run(ctx) }()
			synctest.Wait()
			err := tc.r.Run(ctx)
			require.ErrorIs(t, err, shardlease.ErrAlreadyRunning, tc.name)
			assert.ErrorIs(t, err, shardlease.ErrInvalidConfig, tc.name)
			assert.Equal(t, tc.want, err.Error())
			cancel()
			require.NoError(t, <-done, tc.name)
		}
	})
}

// A stream ARN where a stream name goes points to StreamSpec.ARN.
func TestMistakeStreamARNAsName(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:kinesis:us-east-1:111122223333:stream/orders"
	_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), arn, nopHandler)
	requireMessage(t, err, shardlease.ErrInvalidName,
		`NewConsumer: stream "`+arn+`" is an ARN, not a stream name: pass "orders"`,
		`use shardlease.NewGroup with shardlease.StreamSpec{ARN: "`+arn+`"}`)

	_, err = shardlease.NewGroup(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(),
		shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{Name: arn}}}, nopHandler)
	requireMessage(t, err, shardlease.ErrInvalidName,
		`group g: stream 0: Name "`+arn+`" is an ARN, not a stream name: move it to the spec's ARN field, shardlease.StreamSpec{ARN: "`+arn+`"}`)
}

// stalledList is a store whose List waits until its context ends, as a
// Scan against a table that does not answer does.
type stalledList struct{ shardlease.LeaseStore }

func (stalledList) List(ctx context.Context, _ string) ([]shardlease.Lease, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Once Kinesis has listed the shards, the warning no longer blames
// ListShards: it names the calls of the step still in progress.
func TestMistakeStartupWarningAfterTheListing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		_, err := fake.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		logs := &logRecords{}
		c, err := shardlease.NewConsumer(fake, stalledList{shardlease.NewMemoryStore()}, "orders", nopHandler,
			shardlease.WithLogger(slog.New(logs)), shardlease.WithLeaseDuration(10*time.Second))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(15 * time.Second) // fake time: one warning
		synctest.Wait()
		warns := warnings(logs, "start-up is taking long")
		require.Len(t, warns, 1)
		assert.Equal(t, "Kinesis ListShards and DescribeStreamSummary on stream orders; the store's List", attr(warns[0], "call").String())
		assert.Equal(t, "none yet: the call has not answered", attr(warns[0], "last_err").String())
		cancel()
		require.NoError(t, <-done)
	})
}
