package shardlease

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// meterName is the instrumentation scope of the library's metrics.
const meterName = "github.com/shardlease/shardlease"

// WithMeterProvider sets the OpenTelemetry meter provider the consumer
// records its metrics with. Default: a no-op provider, so nothing is
// recorded and no exporter is pulled in. The instruments are:
//
//	shardlease.leases.held                gauge      leases this worker holds (observed)
//	shardlease.leases.taken               counter    leases acquired; attribute how=free|expired|handoff
//	shardlease.leases.stolen              counter    handoffs this worker asked live holders for
//	shardlease.leases.lost                counter    leases lost to another worker or to failed renewals
//	shardlease.lease.renew.duration       histogram  seconds per renewal write (checkpoint=true when one rode on it); with sessions, per keep of the session row (session=true, no shard; checkpoint=true when it carried packed ones)
//	shardlease.lease.write.failures       counter    lease writes that failed and were retried
//	shardlease.records.handled            counter    records the handler returned nil for
//	shardlease.batches.handled            counter    batches the handler returned nil for
//	shardlease.handler.errors             counter    failed handler calls, panics included
//	shardlease.handler.duration           histogram  seconds per handler call
//	shardlease.behind_latest              gauge      ms, per held shard, MillisBehindLatest as Kinesis reported it (observed)
//	shardlease.aggregates.corrupt         counter    KPL aggregates handed over undecoded
//	shardlease.records.deadlettered       counter    records handed to the dead-letter callback, per shard
//	shardlease.retry.stuck                gauge      s, per shard whose handler keeps failing on a batch, how long (observed)
//	shardlease.retry.ages_out_in          gauge      s, per stuck shard, until its oldest unhandled record ages out (observed)
//	shardlease.leases.cleaned             counter    rows of finished shards deleted (see LineageStore)
//	shardlease.checkpoints.rejected       counter    checkpoints Kinesis refused to read after, per shard (see ErrCheckpointRejected)
//	shardlease.table.listings             counter    listings of the stream's rows (take rounds)
//	shardlease.coordinating               gauge      1 while this worker coordinates the stream, else 0 (observed)
//	shardlease.checkpoint.age             gauge      s, per held shard, how long its checkpoint has waited while records were behind it (observed)
//	shardlease.behind_latest.max          gauge      ms, the largest behind_latest of this worker's held shards (observed)
//	shardlease.workers.wanted             gauge      workers the stream needs, by the coordinator only (observed; see docs/operating.md)
//	shardlease.coordination.stalls        counter    stalls this worker could not end; attribute why=listing|untaken
//	shardlease.rows.corrupt               counter    rows left alone because they cannot be decoded, once per row and run; attribute row
//	shardlease.source.failures            counter    a Group's stream source calls that failed, or returned a stream not yet readable
//
// Every instrument carries the stream and owner attributes; per-shard ones
// carry the shard too.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

type instruments struct {
	base           attribute.Set
	held           metric.Int64ObservableGauge
	taken          metric.Int64Counter
	stolen         metric.Int64Counter
	lost           metric.Int64Counter
	renewDuration  metric.Float64Histogram
	writeFailures  metric.Int64Counter
	records        metric.Int64Counter
	batches        metric.Int64Counter
	handlerErrors  metric.Int64Counter
	handlerTime    metric.Float64Histogram
	behind         metric.Int64ObservableGauge
	listings       metric.Int64Counter
	coordinating   metric.Int64ObservableGauge
	stalls         metric.Int64Counter
	meter          metric.Meter
	corrupt        metric.Int64Counter
	corruptRows    metric.Int64Counter
	sourceErrs     metric.Int64Counter
	sessionsLost   metric.Int64Counter
	sessionsFenced metric.Int64Counter
	retryInstruments
	lineageInstruments
	lagInstruments
}

func newInstruments(mp metric.MeterProvider, stream, owner string) (*instruments, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter(meterName)
	in := &instruments{base: attribute.NewSet(attribute.String("stream", stream), attribute.String("owner", owner))}
	var errs [19]error
	in.meter = m
	in.held, errs[0] = m.Int64ObservableGauge("shardlease.leases.held", metric.WithDescription("Leases this worker holds."))
	in.taken, errs[1] = m.Int64Counter("shardlease.leases.taken", metric.WithDescription("Leases acquired."))
	in.stolen, errs[2] = m.Int64Counter("shardlease.leases.stolen", metric.WithDescription("Handoffs asked of live holders."))
	in.lost, errs[3] = m.Int64Counter("shardlease.leases.lost", metric.WithDescription("Leases lost."))
	in.renewDuration, errs[4] = m.Float64Histogram("shardlease.lease.renew.duration", metric.WithUnit("s"), metric.WithDescription("Lease renewal writes."),
		metric.WithExplicitBucketBoundaries(secondBuckets...))
	in.writeFailures, errs[5] = m.Int64Counter("shardlease.lease.write.failures", metric.WithDescription("Failed lease writes."))
	in.records, errs[6] = m.Int64Counter("shardlease.records.handled", metric.WithDescription("Records handled."))
	in.batches, errs[7] = m.Int64Counter("shardlease.batches.handled", metric.WithDescription("Batches handled."))
	in.handlerErrors, errs[8] = m.Int64Counter("shardlease.handler.errors", metric.WithDescription("Failed handler calls."))
	in.handlerTime, errs[9] = m.Float64Histogram("shardlease.handler.duration", metric.WithUnit("s"), metric.WithDescription("Handler calls."),
		metric.WithExplicitBucketBoundaries(secondBuckets...))
	in.behind, errs[10] = m.Int64ObservableGauge("shardlease.behind_latest", metric.WithUnit("ms"), metric.WithDescription("How far each held shard's reader is behind the tip of the stream."))
	in.corrupt, errs[11] = m.Int64Counter("shardlease.aggregates.corrupt", metric.WithDescription("KPL aggregates handed over undecoded."))
	in.listings, errs[12] = m.Int64Counter("shardlease.table.listings", metric.WithDescription("Listings of the stream's lease rows."))
	in.coordinating, errs[13] = m.Int64ObservableGauge("shardlease.coordinating", metric.WithDescription("1 while this worker coordinates the stream's leases."))
	in.stalls, errs[14] = m.Int64Counter("shardlease.coordination.stalls", metric.WithDescription("Coordination stalls this worker could not end."))
	in.corruptRows, errs[15] = m.Int64Counter("shardlease.rows.corrupt", metric.WithDescription("Rows left alone because they cannot be decoded, counted once per row and run."))
	in.sourceErrs, errs[16] = m.Int64Counter("shardlease.source.failures", metric.WithDescription("Calls of a Group's stream source that failed, or returned a stream not yet readable."))
	in.sessionsLost, errs[17] = m.Int64Counter("shardlease.sessions.lost", metric.WithDescription("Sessions of this worker that ended while it ran: fenced by another worker, or not kept for a lease duration."))
	in.sessionsFenced, errs[18] = m.Int64Counter("shardlease.sessions.fenced", metric.WithDescription("Sessions of other workers this worker fenced before taking their leases."))
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	ri, err := newRetryInstruments(m)
	if err != nil {
		return nil, err
	}
	in.retryInstruments = ri
	if in.lineageInstruments, err = newLineageInstruments(m); err != nil {
		return nil, err
	}
	if in.lagInstruments, err = newLagInstruments(m); err != nil {
		return nil, err
	}
	return in, nil
}

// secondBuckets are histogram bounds, in seconds, for DynamoDB writes and
// handler calls: 0.5 ms to 30 s.
var secondBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// observe registers the callback that reports the gauges of c: leases held,
// and how far behind each held shard is. Only held shards are reported, so
// a shard that moved away stops being exported here. Unregister when Run
// ends.
func (in *instruments) observe(c *Consumer) (metric.Registration, error) {
	return in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		o.ObserveInt64(in.held, int64(len(c.held)), in.attrs())
		coordinating := int64(0)
		if c.stats.coordinating.Load() {
			coordinating = 1
		}
		o.ObserveInt64(in.coordinating, coordinating, in.attrs())
		now := time.Now()
		maxBehind := int64(-1)
		for _, r := range c.held {
			l, read := r.lag.lag(now) // zero before the first read
			if read {
				ms := l.BehindLatest.Milliseconds()
				o.ObserveInt64(in.behind, ms, in.attrs(r.shardAttrs()...))
				maxBehind = max(maxBehind, ms)
			}
			in.observeStuck(o, r, now)
			o.ObserveFloat64(in.checkpointAge, l.CheckpointAge.Seconds(), in.attrs(r.shardAttrs()...))
		}
		if maxBehind >= 0 {
			o.ObserveInt64(in.behindMax, maxBehind, in.attrs())
		}
		if n, ok := c.view.sizing.workersWanted(); ok {
			o.ObserveInt64(in.workersWanted, int64(n), in.attrs())
		}
		return nil
	}, in.held, in.behind, in.coordinating, in.stuck, in.agesOut, in.checkpointAge, in.behindMax, in.workersWanted)
}

// lagInstruments are the metrics of lag and stalls (consumer_lag.go).
type lagInstruments struct {
	checkpointAge metric.Float64ObservableGauge
	behindMax     metric.Int64ObservableGauge
	workersWanted metric.Int64ObservableGauge
}

func newLagInstruments(m metric.Meter) (lagInstruments, error) {
	var li lagInstruments
	var errs [3]error
	li.checkpointAge, errs[0] = m.Float64ObservableGauge("shardlease.checkpoint.age", metric.WithUnit("s"),
		metric.WithDescription("How long each held shard's checkpoint has waited while records were behind it; 0 when caught up and idle."))
	li.behindMax, errs[1] = m.Int64ObservableGauge("shardlease.behind_latest.max", metric.WithUnit("ms"),
		metric.WithDescription("The largest behind-latest of this worker's held shards."))
	li.workersWanted, errs[2] = m.Int64ObservableGauge("shardlease.workers.wanted",
		metric.WithDescription("Workers the stream needs to keep up and drain its backlog, as the coordinating worker works it out."))
	return li, errors.Join(errs[:]...)
}

func (in *instruments) attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	if len(kv) == 0 {
		return metric.WithAttributeSet(in.base)
	}
	return metric.WithAttributes(append(in.base.ToSlice(), kv...)...)
}

func shardAttr(shard string) attribute.KeyValue { return attribute.String("shard", shard) }

func seconds(d time.Duration) float64 { return d.Seconds() }

var bg = context.Background()

// retryInstruments are the metrics of failing batches.
type retryInstruments struct {
	deadLettered metric.Int64Counter
	stuck        metric.Float64ObservableGauge
	agesOut      metric.Float64ObservableGauge
}

func newRetryInstruments(m metric.Meter) (retryInstruments, error) {
	var in retryInstruments
	var errs [3]error
	in.deadLettered, errs[0] = m.Int64Counter("shardlease.records.deadlettered", metric.WithDescription("Records handed to the dead-letter callback."))
	in.stuck, errs[1] = m.Float64ObservableGauge("shardlease.retry.stuck", metric.WithUnit("s"),
		metric.WithDescription("How long each shard whose handler keeps failing has been stuck on one batch."))
	in.agesOut, errs[2] = m.Float64ObservableGauge("shardlease.retry.ages_out_in", metric.WithUnit("s"),
		metric.WithDescription("How long until the oldest record of a stuck shard ages out of the stream."))
	return in, errors.Join(errs[:]...)
}

// observeStuck reports the stuck gauges of r.
func (in *instruments) observeStuck(o metric.Observer, r *leaseRunner, now time.Time) {
	stuckFor, left, knowLeft, ok := r.stuck(now)
	if !ok {
		return
	}
	o.ObserveFloat64(in.stuck, stuckFor.Seconds(), in.attrs(r.shardAttrs()...))
	if knowLeft {
		o.ObserveFloat64(in.agesOut, left.Seconds(), in.attrs(r.shardAttrs()...))
	}
}

// lineageInstruments are the metrics of cleanup and rejected checkpoints.
type lineageInstruments struct {
	cleaned  metric.Int64Counter
	rejected metric.Int64Counter
}

func newLineageInstruments(m metric.Meter) (lineageInstruments, error) {
	var li lineageInstruments
	var err1, err2 error
	li.cleaned, err1 = m.Int64Counter("shardlease.leases.cleaned", metric.WithDescription("Rows of finished shards deleted."))
	li.rejected, err2 = m.Int64Counter("shardlease.checkpoints.rejected", metric.WithDescription("Checkpoints Kinesis refused to read after."))
	if err1 != nil {
		return li, err1
	}
	return li, err2
}

type counters struct {
	records, batches, handlerErrors, panics, corruptAggregates atomic.Int64
	taken, handedIn, lost, released, writeFailures, asked      atomic.Int64
	deadLettered                                               atomic.Int64
	cleaned, rejected                                          atomic.Int64
	subscriptions                                              atomic.Int64
	listings, stalls, corruptRows, sourceErrs                  atomic.Int64
	sessionsLost, sessionsFenced                               atomic.Int64
	coordinating                                               atomic.Bool
}

// event is something a consumer counts: each is counted in Stats and in its
// metric (if it has one) by count, and nowhere else.
type event uint8

const (
	evRecordsHandled event = iota
	evBatchesHandled
	evHandlerError
	evHandlerPanic
	evCorruptAggregate
	evTaken
	evHandedIn
	evHandoffAsked
	evLost
	evReleased
	evWriteFailure
	evDeadLettered
	evRowCleaned
	evCheckpointRejected
	evSubscribed
	evListed
	evStall
	evRowCorrupt
	evSourceFailure
	evSessionLost
	evSessionFenced
)

// meters returns the Stats counter of e and its metric (nil when it has
// none). A lease taken by handoff is counted as handed in, and in the taken
// metric with how=handoff.
func (c *Consumer) meters(e event) (*atomic.Int64, metric.Int64Counter) {
	s, in := &c.stats, c.ins
	switch e {
	case evRecordsHandled:
		return &s.records, in.records
	case evBatchesHandled:
		return &s.batches, in.batches
	case evHandlerError:
		return &s.handlerErrors, in.handlerErrors
	case evHandlerPanic:
		return &s.panics, nil
	case evCorruptAggregate:
		return &s.corruptAggregates, in.corrupt
	case evTaken:
		return &s.taken, in.taken
	case evHandedIn:
		return &s.handedIn, in.taken
	case evHandoffAsked:
		return &s.asked, in.stolen
	case evLost:
		return &s.lost, in.lost
	case evReleased:
		return &s.released, nil
	case evWriteFailure:
		return &s.writeFailures, in.writeFailures
	case evDeadLettered:
		return &s.deadLettered, in.deadLettered
	case evRowCleaned:
		return &s.cleaned, in.cleaned
	case evCheckpointRejected:
		return &s.rejected, in.rejected
	case evSubscribed:
		return &s.subscriptions, nil
	case evListed:
		return &s.listings, in.listings
	case evStall:
		return &s.stalls, in.stalls
	case evRowCorrupt:
		return &s.corruptRows, in.corruptRows
	case evSourceFailure:
		return &s.sourceErrs, in.sourceErrs
	case evSessionLost:
		return &s.sessionsLost, in.sessionsLost
	case evSessionFenced:
		return &s.sessionsFenced, in.sessionsFenced
	}
	panic("shardlease: unknown event")
}

// count counts n of e in Stats and in e's metric, with the stream and owner
// attributes and kv.
func (c *Consumer) count(e event, n int64, kv ...attribute.KeyValue) {
	stat, m := c.meters(e)
	stat.Add(n)
	if m != nil {
		m.Add(bg, n, c.ins.attrs(kv...))
	}
}
