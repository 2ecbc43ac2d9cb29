package shardlease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/shardlease/shardlease"
)

// recorder is a MeterProvider that keeps what the metrics record: counter
// sums and, on collect, the gauges observed (int and float, as floats), by
// instrument name and shard ("" for a worker's own).
type recorder struct {
	noop.MeterProvider
	mu        sync.Mutex
	callbacks []metric.Callback
	sums      map[string]map[string]int64 // counter → shard → sum
	byStream  map[string]map[string]int64 // counter → stream attribute → sum
}

func newRecorder() *recorder {
	return &recorder{sums: map[string]map[string]int64{}, byStream: map[string]map[string]int64{}}
}

func (r *recorder) Meter(string, ...metric.MeterOption) metric.Meter { return &recMeter{r: r} }

type recMeter struct {
	noop.Meter
	r *recorder
}

func (m *recMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return &recCounter{name: name, r: m.r}, nil
}

func (m *recMeter) Int64ObservableGauge(name string, _ ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	return &recIntGauge{name: name}, nil
}

func (m *recMeter) Float64ObservableGauge(name string, _ ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	return &recGauge{name: name}, nil
}

func (m *recMeter) RegisterCallback(f metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.callbacks = append(m.r.callbacks, f)
	return noop.Registration{}, nil
}

type recCounter struct {
	noop.Int64Counter
	name string
	r    *recorder
}

func (c *recCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	attrs := metric.NewAddConfig(opts).Attributes()
	shard, _ := attrs.Value("shard")
	stream, _ := attrs.Value("stream")
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.r.sums[c.name] == nil {
		c.r.sums[c.name] = map[string]int64{}
		c.r.byStream[c.name] = map[string]int64{}
	}
	c.r.sums[c.name][shard.AsString()] += n
	c.r.byStream[c.name][stream.AsString()] += n
}

type recGauge struct {
	noop.Float64ObservableGauge
	name string
}

type recIntGauge struct {
	noop.Int64ObservableGauge
	name string
}

type recObserver struct {
	embedded.Observer
	got map[string]map[string]float64 // gauge → shard → value
}

func (o *recObserver) put(name string, v float64, opts []metric.ObserveOption) {
	attrs := metric.NewObserveConfig(opts).Attributes()
	shard, _ := attrs.Value(attribute.Key("shard"))
	if o.got[name] == nil {
		o.got[name] = map[string]float64{}
	}
	o.got[name][shard.AsString()] = v
}

func (o *recObserver) ObserveFloat64(inst metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	if g, ok := inst.(*recGauge); ok {
		o.put(g.name, v, opts)
	}
}

func (o *recObserver) ObserveInt64(inst metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	if g, ok := inst.(*recIntGauge); ok {
		o.put(g.name, float64(v), opts)
	}
}

// collect runs the registered callbacks and returns the gauges.
func (r *recorder) collect(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	r.mu.Lock()
	cbs := append([]metric.Callback(nil), r.callbacks...)
	r.mu.Unlock()
	o := &recObserver{got: map[string]map[string]float64{}}
	for _, cb := range cbs {
		require.NoError(t, cb(context.Background(), o))
	}
	return o.got
}

func (r *recorder) sum(counter, shard string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sums[counter][shard]
}

// While a shard is stuck, shardlease.retry.stuck says for how long and
// shardlease.retry.ages_out_in how long its oldest record has left in the
// stream; they disappear once it moves. A dead-lettered record is counted
// in shardlease.records.deadlettered, per shard.
func TestPoisonMetrics(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 5)
		shard := onlyShard(t, p)
		h := newPoisonHandler(p.ids[3])
		rec := newRecorder()
		a := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithMeterProvider(rec))...)
		waitFor(t, 60*w.lease, "three failed attempts", func() bool { _, _, calls, _ := h.snapshot(); return calls >= 3 })
		got := rec.collect(t)
		require.Contains(t, got["shardlease.retry.stuck"], shard, "%v", got)
		assert.Greater(t, got["shardlease.retry.stuck"][shard], 0.0)
		left := time.Duration(got["shardlease.retry.ages_out_in"][shard] * float64(time.Second))
		assert.Greater(t, left, 23*time.Hour, "the stream keeps records 24h")
		assert.LessOrEqual(t, left, 24*time.Hour)
		require.NoError(t, a.stop(t))

		rec = newRecorder()
		b := startWorker(t, w, w.kin, w.store, h.handle, w.opts("b", shardlease.WithMeterProvider(rec),
			shardlease.WithMaxAttempts(2), shardlease.WithDeadLetter(h.deadLetter))...)
		waitFor(t, 60*w.lease, "the poison record dead-lettered and the rest handled", func() bool {
			got, dead, _, _ := h.snapshot()
			return len(dead) == 1 && len(got) == 9
		})
		waitFor(t, 10*w.lease, "counted", func() bool { return rec.sum("shardlease.records.deadlettered", shard) == 1 })
		got = rec.collect(t)
		assert.NotContains(t, got["shardlease.retry.stuck"], shard, "the shard moves again")
		require.NoError(t, b.stop(t))
	})
}
