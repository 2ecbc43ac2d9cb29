// Command dynamodb is a shardlease consumer against real endpoints: a Kinesis
// stream and a DynamoDB lease table in AWS, or local emulators. It prints one
// line per batch it handles (shard, records, how far behind the tip) and,
// with -print, every record. It runs until Ctrl-C or SIGTERM; then it
// finishes the batch in hand, writes its checkpoints, releases its leases and
// exits, so that another instance takes the shards over at once.
//
// Against AWS, with credentials and region from the usual environment
// variables or shared config files:
//
//	go run ./examples/dynamodb -stream orders -table orders-leases -create-table
//
// Start it twice, in two terminals, to watch the shards being shared; stop
// one and the other takes its shards over.
//
// Against local emulators, start them with "shardlease emulators" (see the
// README's Local development) and set the environment it prints: the SDK's
// default configuration reads AWS_ENDPOINT_URL_DYNAMODB and
// AWS_ENDPOINT_URL_KINESIS itself. Emulators need a region and some
// credentials to sign with, but check neither:
//
//	export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local
//	export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:4567
//	shardlease create-stream -stream demo -shards 2
//	go run ./examples/dynamodb -stream demo -table demo-leases -create-table -produce 20 -print
//
// The stream must exist (this program does not create streams). -produce N
// puts N test records into it before consuming, for trying things out.
//
// Flags:
//
//	-stream name          the Kinesis stream to consume (required)
//	-table name           the DynamoDB lease table (required)
//	-create-table         create the lease table if it is missing
//	-owner id             this instance's owner id (default: host name plus a random suffix)
//	-lease duration       the lease duration (default 10s)
//	-position p           where a shard without checkpoint starts: trim_horizon or latest
//	-produce N            put N test records into the stream first
//	-print                print every record, not only one line per batch
//	-v                    log the library's lease changes to stderr
//
// The wiring, without the flags, is
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	store, err := shardlease.NewDynamoStore(dynamodb.NewFromConfig(cfg), table)
//	consumer, err := shardlease.NewConsumer(kinesis.NewFromConfig(cfg), store, stream, handle)
//	err = consumer.Run(ctx) // until ctx is cancelled
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
)

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "dynamodb:", err)
		os.Exit(1)
	}
}

// settings are the command line's values.
type settings struct {
	stream, table string
	createTable   bool
	owner         string
	lease         time.Duration
	position      shardlease.InitialPosition
	produce       int
	print         bool
	verbose       bool
}

func parseFlags(args []string, stderr io.Writer) (settings, error) {
	var (
		s        settings
		position string
	)
	fs := flag.NewFlagSet("dynamodb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.stream, "stream", "", "the Kinesis `stream` to consume (required)")
	fs.StringVar(&s.table, "table", "", "the DynamoDB lease `table` (required)")
	fs.BoolVar(&s.createTable, "create-table", false, "create the lease table if it is missing")
	fs.StringVar(&s.owner, "owner", "", "this instance's owner `id` (default: host name plus a random suffix)")
	fs.DurationVar(&s.lease, "lease", 10*time.Second, "the lease `duration`")
	fs.StringVar(&position, "position", "trim_horizon", "where a shard without checkpoint starts: trim_horizon or latest")
	fs.IntVar(&s.produce, "produce", 0, "put `N` test records into the stream before consuming")
	fs.BoolVar(&s.print, "print", false, "print every record, not only one line per batch")
	fs.BoolVar(&s.verbose, "v", false, "log the library's lease changes to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	bad := func(format string, args ...any) (settings, error) {
		err := fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
		fmt.Fprintln(stderr, err)
		return s, err
	}
	switch strings.ToLower(position) {
	case "trim_horizon":
		s.position = shardlease.TrimHorizon
	case "latest":
		s.position = shardlease.Latest
	default:
		return bad("-position %q: use trim_horizon or latest", position)
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case s.stream == "":
		return bad("-stream is required")
	case s.table == "":
		return bad("-table is required")
	case s.produce < 0:
		return bad("-produce %d: use 0 or more", s.produce)
	}
	return s, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}

	// The SDK's default configuration: credentials, region and endpoints
	// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_KINESIS)
	// from the environment and the shared config files.
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return errors.New("no AWS region configured: set AWS_REGION or a region in the shared config")
	}
	// Keep the transport the SDK configured (with AWS_CA_BUNDLE's roots, if
	// set) but hold on to it, so that its idle connections are closed when
	// the program is done.
	transport := awshttp.NewBuildableClient().GetTransport()
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		transport = bc.GetTransport()
	}
	cfg.HTTPClient = &http.Client{Transport: transport}
	defer transport.CloseIdleConnections()

	dynamo := dynamodb.NewFromConfig(cfg)
	kin := kinesis.NewFromConfig(cfg)

	if s.createTable {
		// Succeeds at once when the table exists with the right key.
		if err := shardlease.CreateTable(ctx, dynamo, s.table); err != nil {
			return err
		}
	}
	if s.produce > 0 {
		if err := produce(ctx, kin, s.stream, s.produce); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "put %d test records into stream %s\n", s.produce, s.stream)
	}

	store, err := shardlease.NewDynamoStore(dynamo, s.table)
	if err != nil {
		return err
	}
	opts, handle := consumerOptions(s, stdout, stderr)
	consumer, err := shardlease.NewConsumer(kin, store, s.stream, handle, opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "consuming stream %s with lease table %s as owner %s; Ctrl-C to stop\n",
		s.stream, s.table, consumer.OwnerID())
	// Run returns when ctx is cancelled, after the final checkpoints and
	// releases, or at once when the stream or the table is missing.
	if err := consumer.Run(ctx); err != nil {
		return err
	}
	st := consumer.Stats()
	fmt.Fprintf(stderr, "stopped: %d records in %d batches handled; %d leases released\n",
		st.RecordsHandled, st.BatchesHandled, st.LeasesReleased)
	return nil
}

// consumerOptions returns the consumer's options and its handler, which
// prints each batch (and each record with -print) to stdout.
func consumerOptions(s settings, stdout, stderr io.Writer) ([]shardlease.Option, shardlease.Handler) {
	opts := []shardlease.Option{
		shardlease.WithLeaseDuration(s.lease),
		shardlease.WithInitialPosition(s.position),
	}
	if s.owner != "" {
		opts = append(opts, shardlease.WithOwnerID(s.owner))
	}
	out := &lockedWriter{w: stdout} // handlers of different shards run concurrently
	if s.verbose {
		opts = append(opts, shardlease.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	} else {
		opts = append(opts, shardlease.WithLogger(slog.New(slog.DiscardHandler))) // not slog.Default(): -v asks for the log
	}
	handle := func(ctx context.Context, b *shardlease.Batch) error {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s: %d records, %d ms behind latest\n", b.ShardID, len(b.Records), b.MillisBehindLatest)
		if s.print {
			for _, r := range b.Records {
				fmt.Fprintf(&sb, "  %s %s key=%s data=%q\n", b.ShardID, r.SequenceNumber, r.PartitionKey, r.Data)
			}
		}
		out.write(sb.String())
		return nil // processed: checkpoint it
	}
	return opts, handle
}

// produce puts n test records into stream, "record 1" to "record n", with
// partition keys spreading them over the shards.
func produce(ctx context.Context, kin *kinesis.Client, stream string, n int) error {
	const perCall = 500 // the most PutRecords takes
	for first := 1; first <= n; first += perCall {
		var entries []types.PutRecordsRequestEntry
		for i := first; i <= n && i < first+perCall; i++ {
			entries = append(entries, types.PutRecordsRequestEntry{
				PartitionKey: aws.String(fmt.Sprintf("key-%d", i)),
				Data:         []byte(fmt.Sprintf("record %d", i)),
			})
		}
		// Retry the entries Kinesis refused (throttled) a few times.
		for attempt := 0; len(entries) > 0; attempt++ {
			res, err := kin.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
			if err != nil {
				return fmt.Errorf("put test records into stream %s: %w", stream, err)
			}
			if aws.ToInt32(res.FailedRecordCount) == 0 {
				break
			}
			if attempt == 5 {
				return fmt.Errorf("put test records into stream %s: %d refused after %d attempts", stream, aws.ToInt32(res.FailedRecordCount), attempt+1)
			}
			var retry []types.PutRecordsRequestEntry
			for i, r := range res.Records {
				if r.ErrorCode != nil {
					retry = append(retry, entries[i])
				}
			}
			entries = retry
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
			}
		}
	}
	return nil
}

// lockedWriter writes whole strings to w one at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) write(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, s)
}
