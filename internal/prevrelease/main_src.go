package prevrelease

// workerMain is the main package of the worker Build builds against the
// exported release. It uses only API that release and this one share
// (NewDynamoStore, NewConsumer and the timing options), so that Build can
// build a worker of any commit since them.
const workerMain = `// Command prevworker runs one Consumer of this release on a DynamoStore
// and appends a line per handled record to a file:
// "<owner> <shard> <sequence number> <start unix nanos> <end unix nanos>",
// the start and end of the handler call that handled it. SIGTERM or an
// interrupt stops it gracefully: its leases are released.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
)

type config struct {
	dynamo, kinesis, region, table, stream, owner, out string
	lease, renew, take, idle, work                       time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.dynamo, "dynamo", "", "DynamoDB endpoint URL")
	flag.StringVar(&c.kinesis, "kinesis", "", "Kinesis endpoint URL")
	flag.StringVar(&c.region, "region", "us-east-1", "region the requests are signed for")
	flag.StringVar(&c.table, "table", "", "lease table")
	flag.StringVar(&c.stream, "stream", "", "stream to consume")
	flag.StringVar(&c.owner, "owner", "", "owner id")
	flag.StringVar(&c.out, "out", "", "file the handled records are appended to")
	flag.DurationVar(&c.lease, "lease", 10*time.Second, "lease duration")
	flag.DurationVar(&c.renew, "renew", 0, "renew interval (0: a third of the lease duration)")
	flag.DurationVar(&c.take, "take", 0, "take interval (0: the release's default)")
	flag.DurationVar(&c.idle, "idle", 0, "idle poll interval (0: the release's default)")
	flag.DurationVar(&c.work, "work", 0, "how long each handler call works")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "prevworker:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKIDEMULATOR", SecretAccessKey: "emulator-secret", Source: "prevworker"}, nil
	})
	conf := func(endpoint string) aws.Config {
		return aws.Config{Region: c.region, Credentials: creds, BaseEndpoint: aws.String(endpoint),
			AccountIDEndpointMode: aws.AccountIDEndpointModeDisabled}
	}
	store, err := shardlease.NewDynamoStore(dynamodb.NewFromConfig(conf(c.dynamo)), c.table)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(c.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var mu sync.Mutex
	handler := func(ctx context.Context, b *shardlease.Batch) error {
		start := time.Now()
		time.Sleep(c.work) // the handler's work
		end := time.Now()
		var buf bytes.Buffer
		for _, r := range b.Records {
			fmt.Fprintf(&buf, "%s %s %s %d %d\n", c.owner, b.ShardID, r.SequenceNumber, start.UnixNano(), end.UnixNano())
		}
		mu.Lock()
		defer mu.Unlock()
		_, err := f.Write(buf.Bytes())
		return err
	}
	opts := []shardlease.Option{
		shardlease.WithOwnerID(c.owner),
		shardlease.WithLeaseDuration(c.lease),
		shardlease.WithShutdownTimeout(c.lease),
		shardlease.WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}
	if c.renew > 0 {
		opts = append(opts, shardlease.WithRenewInterval(c.renew))
	}
	if c.take > 0 {
		opts = append(opts, shardlease.WithTakeInterval(c.take), shardlease.WithShardSyncInterval(5*c.take),
			shardlease.WithRetryBackoff(c.take/10, c.take))
	}
	if c.idle > 0 {
		opts = append(opts, shardlease.WithIdlePollInterval(c.idle))
	}
	consumer, err := shardlease.NewConsumer(kinesis.NewFromConfig(conf(c.kinesis)), store, c.stream, handler, opts...)
	if err != nil {
		return err
	}
	return consumer.Run(ctx)
}
`
