// Command prometheus runs a shardlease consumer whose metrics are exported
// for Prometheus to scrape. The consumer records its metrics through the
// OpenTelemetry metric API (shardlease.WithMeterProvider); here the provider
// is the OpenTelemetry SDK with its Prometheus exporter, served on /metrics.
//
// It needs no AWS account: the stream is an in-process fake, a producer puts
// a trickle of records into it, and the lease store is a
// shardlease.MemoryStore. Only the meter provider matters here; a service
// passes the same option to a consumer over kinesis.NewFromConfig(cfg) and a
// DynamoStore.
//
// This example is a Go module of its own, so that the shardlease module does
// not depend on an exporter:
//
//	cd examples/prometheus
//	go run .
//	curl -s http://127.0.0.1:9464/metrics | grep shardlease
//
// Flags:
//
//	-addr host:port   where /metrics is served; loopback addresses only (default 127.0.0.1:9464)
//	-shards n         shards of the in-process stream (default 4)
//	-rate n           records produced per second (default 20)
//
// The wiring is
//
//	registry := prometheus.NewRegistry()
//	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter),
//		sdkmetric.WithView(secondsBuckets)) // see secondsBuckets
//	consumer, err := shardlease.NewConsumer(kin, store, stream, handle,
//		shardlease.WithMeterProvider(provider))
//	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
//
// The exporter turns the instruments' dotted names into Prometheus names,
// adding unit and _total suffixes: shardlease.records.handled is exported as
// shardlease_records_handled_total, shardlease.lease.renew.duration as the
// histogram shardlease_lease_renew_duration_seconds, and
// shardlease.behind_latest as shardlease_behind_latest_milliseconds.
// Every series carries the stream and owner labels, per-shard ones a shard
// label. It runs until Ctrl-C or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

const (
	streamName = "prometheus-example"
	ownerID    = "prometheus-example-worker"
	// Lease timings shorter than the library's defaults, so that leases are
	// taken and renewed (and the renewal histogram fills) within seconds.
	leaseDuration = 3 * time.Second
	idlePoll      = 200 * time.Millisecond
	// shutdownTimeout bounds the HTTP server's graceful stop.
	shutdownTimeout = 5 * time.Second
)

// secondsBuckets gives the library's duration histograms, which are in
// seconds, bucket boundaries in seconds too: the SDK's default boundaries
// (0, 5, 10, 25, ... 10000) suit milliseconds and would put every renewal
// and every handler call of a healthy consumer into the first bucket.
var secondsBuckets = sdkmetric.NewView(
	sdkmetric.Instrument{Name: "shardlease.*", Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
		Boundaries: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}},
)

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

// settings are the command line's values.
type settings struct {
	addr   string
	shards int
	rate   int
}

func parseFlags(args []string, out io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("prometheus", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.addr, "addr", "127.0.0.1:9464", "`host:port` to serve /metrics on; a loopback address (port 0 picks a free port)")
	fs.IntVar(&s.shards, "shards", 4, "shards of the in-process stream")
	fs.IntVar(&s.rate, "rate", 20, "records produced per second")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	bad := func(format string, args ...any) (settings, error) {
		err := fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
		fmt.Fprintln(out, err)
		return s, err
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case s.shards < 1 || s.shards > 100:
		return bad("-shards %d: use 1 to 100", s.shards)
	case s.rate < 1 || s.rate > 1000:
		return bad("-rate %d: use 1 to 1000 records per second", s.rate)
	}
	if err := checkLoopback(s.addr); err != nil {
		return bad("-addr %s: %v", s.addr, err)
	}
	return s, nil
}

// checkLoopback accepts host:port addresses whose host is localhost or a
// loopback IP: metrics name streams and hosts, and this example serves them
// to this machine only.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errors.New("use a loopback address such as 127.0.0.1:9464 or [::1]:9464")
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	s, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}

	// The meter provider: the OpenTelemetry SDK, read by the Prometheus
	// exporter at every scrape. A registry of its own (rather than
	// Prometheus's global one) keeps the example self-contained.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return fmt.Errorf("create the Prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(secondsBuckets))
	defer func() { _ = provider.Shutdown(context.WithoutCancel(ctx)) }()

	// The stream and the lease store, in process.
	kin := shardleasetest.NewKinesis()
	if _, err := kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(streamName), ShardCount: aws.Int32(int32(s.shards))}); err != nil {
		return err
	}
	store := shardlease.NewMemoryStore()
	consumer, err := shardlease.NewConsumer(kin, store, streamName,
		func(ctx context.Context, b *shardlease.Batch) error { return nil }, // a real handler does its work here
		shardlease.WithMeterProvider(provider),
		shardlease.WithOwnerID(ownerID),
		shardlease.WithLeaseDuration(leaseDuration),
		shardlease.WithIdlePollInterval(idlePoll),
	)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("serve metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "serving metrics on http://%s/metrics\n", ln.Addr())
	fmt.Fprintf(stdout, "consuming stream %s (%d shards, %d records/s) as %s; Ctrl-C to stop\n", streamName, s.shards, s.rate, ownerID)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, kin, s.rate) }()

	runErr := consumer.Run(ctx) // until ctx is cancelled, or an error
	cancel()
	prodErr := <-produced
	shutdown, stop := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer stop()
	shutErr := srv.Shutdown(shutdown)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		shutErr = errors.Join(shutErr, err)
	}
	if errors.Is(prodErr, context.Canceled) {
		prodErr = nil
	}
	st := consumer.Stats()
	fmt.Fprintf(stdout, "stopped: %d records in %d batches handled; %d leases released\n", st.RecordsHandled, st.BatchesHandled, st.LeasesReleased)
	return errors.Join(runErr, prodErr, shutErr)
}

// produce puts rate records a second into the stream until ctx is done.
func produce(ctx context.Context, kin *shardleasetest.Kinesis, rate int) error {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		_, err := kin.PutRecord(ctx, &kinesis.PutRecordInput{
			StreamName:   aws.String(streamName),
			PartitionKey: aws.String(fmt.Sprintf("key-%d", i)),
			Data:         []byte(fmt.Sprintf("record %d", i)),
		})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("put a record: %w", err)
		}
	}
}
