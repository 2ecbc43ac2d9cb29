package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The names the exporter gives the library's instruments.
const (
	recordsHandled = "shardlease_records_handled_total"
	leasesHeld     = "shardlease_leases_held"
	behindLatest   = "shardlease_behind_latest_milliseconds"
	renewDuration  = "shardlease_lease_renew_duration_seconds"
)

// output is run's stdout; it reports the address /metrics is served on.
type output struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string // receives the address once
	sent bool
}

var servingLine = regexp.MustCompile(`serving metrics on http://(\S+)/metrics\n`)

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if m := servingLine.FindStringSubmatch(o.buf.String()); m != nil && !o.sent {
		o.sent = true
		o.addr <- m[1]
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// scrape gets and parses /metrics.
func scrape(t *testing.T, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := client.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return families
}

// labels returns a series' labels as a map.
func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string)
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// The library's metrics reach Prometheus: records handled, leases held,
// per-shard lag and renewal durations, with the stream, owner and shard
// labels.
func TestMetricsEndToEnd(t *testing.T) {
	const shards = 3
	out := &output{addr: make(chan string, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-shards", "3", "-rate", "50"}, out) }()

	var url string
	select {
	case addr := <-out.addr:
		url = "http://" + addr + "/metrics"
	case err := <-done:
		t.Fatalf("run returned before serving: %v\n%s", err, out)
	case <-time.After(10 * time.Second):
		t.Fatalf("no address printed within 10s:\n%s", out)
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	// Scrape until every shard was read, every lease renewed and records
	// handled; the lease timings make that a matter of seconds.
	var families map[string]*dto.MetricFamily
	ready := func() bool {
		families = scrape(t, client, url)
		return families[recordsHandled] != nil && families[renewDuration] != nil &&
			families[behindLatest] != nil && len(families[behindLatest].GetMetric()) == shards
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !ready() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the metrics did not all appear within 30s; last scrape had %d families", len(families))
		case err := <-done:
			t.Fatalf("run returned: %v\n%s", err, out)
		}
	}

	base := map[string]string{"stream": streamName, "owner": ownerID}
	hasBase := func(name string, m *dto.Metric) {
		t.Helper()
		l := labels(m)
		for k, v := range base {
			assert.Equal(t, v, l[k], "%s label %s", name, k)
		}
	}

	rh := families[recordsHandled]
	assert.Equal(t, dto.MetricType_COUNTER, rh.GetType())
	require.Len(t, rh.GetMetric(), 1)
	hasBase(recordsHandled, rh.GetMetric()[0])
	assert.Greater(t, rh.GetMetric()[0].GetCounter().GetValue(), 0.0)

	lh := families[leasesHeld]
	require.NotNil(t, lh, leasesHeld)
	assert.Equal(t, dto.MetricType_GAUGE, lh.GetType())
	require.Len(t, lh.GetMetric(), 1)
	hasBase(leasesHeld, lh.GetMetric()[0])
	assert.Equal(t, float64(shards), lh.GetMetric()[0].GetGauge().GetValue(), "one worker holds every lease")

	bl := families[behindLatest]
	assert.Equal(t, dto.MetricType_GAUGE, bl.GetType())
	seen := make(map[string]bool)
	for _, m := range bl.GetMetric() {
		hasBase(behindLatest, m)
		seen[labels(m)["shard"]] = true
		assert.GreaterOrEqual(t, m.GetGauge().GetValue(), 0.0)
	}
	assert.Equal(t, map[string]bool{"shardId-000000000000": true, "shardId-000000000001": true, "shardId-000000000002": true}, seen)

	rd := families[renewDuration]
	assert.Equal(t, dto.MetricType_HISTOGRAM, rd.GetType())
	var renewals uint64
	for _, m := range rd.GetMetric() {
		hasBase(renewDuration, m)
		assert.Contains(t, []string{"true", "false"}, labels(m)["checkpoint"])
		h := m.GetHistogram()
		renewals += h.GetSampleCount()
		// The example's view gives the histogram buckets in seconds.
		require.NotEmpty(t, h.GetBucket())
		assert.Equal(t, 0.0005, h.GetBucket()[0].GetUpperBound())
	}
	assert.Greater(t, renewals, uint64(0))

	for _, name := range []string{"shardlease_batches_handled_total", "shardlease_leases_taken_total", "shardlease_handler_duration_seconds"} {
		assert.Contains(t, families, name)
	}

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, out.String())
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return within 20s of the cancellation")
	}
	assert.Regexp(t, `stopped: \d+ records in \d+ batches handled; 3 leases released`, out.String())
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-addr", "0.0.0.0:9464"},
		{"-addr", ":9464"},
		{"-addr", "example.com:9464"},
		{"-addr", "nonsense"},
		{"-shards", "0"},
		{"-rate", "0"},
		{"extra"},
		{"-nope"},
	} {
		var out bytes.Buffer
		err := run(t.Context(), args, &out)
		assert.True(t, errors.Is(err, errUsage), "%v: %v", args, err)
		assert.NotEmpty(t, out.String(), args)
	}
}
