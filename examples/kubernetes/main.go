package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/shardlease/shardlease"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// The first signal drains; a second one stops the process at once.
	go func() { <-ctx.Done(); stop() }()
	if err := run(ctx, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "orders-consumer:", err)
		os.Exit(1)
	}
}

// handle is the service's work on a batch of records. It returns nil once
// the batch is done; an error makes the library hand the batch again.
func handle(ctx context.Context, b *shardlease.Batch) error {
	return nil
}

// run is the service: it consumes until ctx ends, then drains and stops.
// Logs go to stderr, one JSON object a line.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	s, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	ready := &readiness{}
	log := slog.New(startWatch{next: slog.NewJSONHandler(stderr, nil), ready: ready})
	if s.owner == "" {
		log.Warn(envPodName + " is not set: this worker is named after its host name plus a random suffix, which `shardlease drain -owner` cannot name; set " + envPodName + " from the downward API (fieldRef metadata.name)")
	}
	registry := prometheus.NewRegistry()
	provider, err := newMeterProvider(registry)
	if err != nil {
		return err
	}
	defer func() { _ = provider.Shutdown(context.WithoutCancel(ctx)) }()
	consumer, err := newConsumer(ctx, s, log, provider)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("serve HTTP on %s=%s: %w; set %s to a free host:port", envAddr, s.addr, err, envAddr)
	}
	srv := &http.Server{Handler: newMux(consumer, registry, ready), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "paths", []string{pathMetrics, pathStatus, pathReady})

	runErr := consume(ctx, s, consumer, ready, log)
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdown)
	defer cancel()
	srvErr := srv.Shutdown(shutdown)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		srvErr = errors.Join(srvErr, err)
	}
	if runErr == nil && srvErr == nil {
		st := consumer.Stats()
		log.Info("exiting", "records_handled", st.RecordsHandled, "leases_released", st.LeasesReleased)
	}
	return errors.Join(runErr, srvErr)
}

// newConsumer makes the consumer of s.stream over the SDK's default
// configuration: region, credentials and endpoints from the environment.
func newConsumer(ctx context.Context, s settings, log *slog.Logger, mp *sdkmetric.MeterProvider) (*shardlease.Consumer, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: set AWS_REGION to the region of the stream and the table, such as eu-west-1")
	}
	store, err := shardlease.NewDynamoStore(dynamodb.NewFromConfig(cfg), s.table)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envTable, err)
	}
	opts := append(s.consumerOptions(), shardlease.WithLogger(log), shardlease.WithMeterProvider(mp))
	c, err := shardlease.NewConsumer(kinesis.NewFromConfig(cfg), store, s.stream, handle, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w (the timings come from %s and %s)", err, envLease, envShutdown)
	}
	return c, nil
}

// consume runs the consumer until ctx ends, then drains it: every lease
// goes to the other workers, each with its final checkpoint, before Run is
// told to stop. It returns Run's error.
func consume(ctx context.Context, s settings, c *shardlease.Consumer, ready *readiness, log *slog.Logger) error {
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	select {
	case err := <-done: // Run gave up (a missing table or stream, a bad configuration)
		ready.advance(stopped)
		return err
	case <-ctx.Done():
	}
	if ready.phase() == starting {
		// Nothing is held before Run has started; its shutdown is enough.
		ready.advance(stopped)
		stopRun()
		return <-done
	}
	ready.advance(draining)
	log.Info("draining before stop", "wait", s.drainWait().String())
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.drainWait())
	err := c.Drain(drainCtx)
	cancel()
	if err != nil {
		// Run's shutdown still releases every lease with its checkpoint.
		log.Warn("drain did not finish; stopping anyway", "err", err)
	}
	stopRun()
	err = <-done
	ready.advance(stopped)
	return err
}

// newMeterProvider records the library's instruments for registry, in
// Prometheus names (see doc.go).
func newMeterProvider(registry *prometheus.Registry) (*sdkmetric.MeterProvider, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("create the Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(secondsBuckets)), nil
}

// secondsBuckets gives the library's duration histograms, which are in
// seconds, bucket boundaries in seconds too (the SDK's defaults suit
// milliseconds).
var secondsBuckets = sdkmetric.NewView(
	sdkmetric.Instrument{Name: "shardlease.*", Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
		Boundaries: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}},
)
