package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardlease/shardlease"
)

// The paths the service serves; deployment.yaml's probe and scrape
// annotations name them, and its test checks that they are these.
const (
	pathMetrics = "/metrics" // Prometheus text format, from the OpenTelemetry exporter
	pathStatus  = "/status"  // Consumer.StatusHandler: this worker's leases, lag and role, as JSON
	pathReady   = "/ready"   // 200 while consuming, 503 while starting, draining or stopped
)

// phase is where the service is in its life, as the readiness probe reports
// it.
type phase int32

const (
	starting  phase = iota // Run checks the table and the stream, and lists the shards
	consuming              // Run logged "started"
	draining               // SIGTERM came: the leases go to the other workers
	stopped                // Run returned
)

var phaseNames = [...]string{"starting", "consuming", "draining", "stopped"}

func (p phase) String() string { return phaseNames[p] }

// readiness is the service's phase. The log handler (startWatch) moves it
// from starting to consuming; run's goroutine moves it to draining and
// stopped. A later phase is never left for an earlier one.
type readiness struct{ p atomic.Int32 }

// advance moves to p unless the service is already past it.
func (r *readiness) advance(p phase) {
	for {
		old := r.p.Load()
		if phase(old) >= p || r.p.CompareAndSwap(old, int32(p)) {
			return
		}
	}
}

func (r *readiness) phase() phase { return phase(r.p.Load()) }

// ServeHTTP answers the readiness probe: ready only while consuming, so
// that a rolling update waits for a new pod whose start-up hangs (an
// unreachable endpoint, a missing table) instead of draining the old ones.
func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p := r.phase()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if p != consuming {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(p.String() + "\n"))
}

// newMux serves the metrics, the consumer's status and the readiness probe.
func newMux(c *shardlease.Consumer, registry *prometheus.Registry, ready *readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET "+pathMetrics, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.Handle(pathStatus, c.StatusHandler())
	mux.Handle("GET "+pathReady, ready)
	return mux
}

// startWatch is the service's log handler: it passes every record to next
// and moves ready to consuming at the consumer's "started" line, which the
// library logs at Info once Run is consuming (docs/operating.md#logs).
type startWatch struct {
	next  slog.Handler
	ready *readiness
}

func (h startWatch) Enabled(ctx context.Context, l slog.Level) bool {
	return l == slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h startWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && r.Message == "started" {
		h.ready.advance(consuming)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h startWatch) WithAttrs(as []slog.Attr) slog.Handler {
	return startWatch{next: h.next.WithAttrs(as), ready: h.ready}
}

func (h startWatch) WithGroup(name string) slog.Handler {
	return startWatch{next: h.next.WithGroup(name), ready: h.ready}
}
