// Command fencedsink is a shardlease consumer that applies each record's
// effect exactly once to a DynamoDB sink, however often the record is
// handed to it: after a crash, a lost lease, a holder paused past its lease,
// or a replay. Each record is an amount added to a running total per
// partition key, an effect that must not be applied twice.
//
// The sink keeps one item per shard and partition key ("stream:shard/key"):
// the total, how many records it holds, and the fence: the token of the last
// holding that wrote (batch.Fence().Value()) and the position of the last
// record applied (record.FencePosition()). Each record is one conditional
// UpdateItem that refuses a token below the item's and a position at or
// below it; a refused write is read back to tell a newer holder (the batch
// fails: this holder lost its lease) from a record applied already (passed
// over). See docs/handlers.md, "Exactly-once effects".
//
// Against local emulators (see the README's Local development):
//
//	shardlease create-stream -stream demo -shards 2
//	go run ./examples/fencedsink -stream demo -table demo-leases -sink demo-totals -create-tables -produce 20
//
// Flags:
//
//	-stream name     the Kinesis stream to consume (required)
//	-table name      the DynamoDB lease table (required)
//	-sink name       the DynamoDB table of the totals (required)
//	-create-tables   create both tables if they are missing
//	-produce N       put N test records (amounts 1..N over 4 keys) first
//	-lanes n         handler calls per shard at once (WithKeyConcurrency)
//	-lease duration  the lease duration (default 10s)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

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
		fmt.Fprintln(os.Stderr, "fencedsink:", err)
		os.Exit(1)
	}
}

type settings struct {
	stream, table, sink string
	create              bool
	produce, lanes      int
	lease               time.Duration
}

func parseFlags(args []string, stderr io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("fencedsink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.stream, "stream", "", "the Kinesis `stream` to consume (required)")
	fs.StringVar(&s.table, "table", "", "the DynamoDB lease `table` (required)")
	fs.StringVar(&s.sink, "sink", "", "the DynamoDB `table` of the totals (required)")
	fs.BoolVar(&s.create, "create-tables", false, "create both tables if they are missing")
	fs.IntVar(&s.produce, "produce", 0, "put `N` test records into the stream first")
	fs.IntVar(&s.lanes, "lanes", 1, "handler calls per shard at once (WithKeyConcurrency)")
	fs.DurationVar(&s.lease, "lease", 10*time.Second, "the lease `duration`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case s.stream == "" || s.table == "" || s.sink == "":
		fmt.Fprintln(stderr, "-stream, -table and -sink are required")
		return s, errUsage
	case s.produce < 0 || s.lanes < 1 || fs.NArg() > 0:
		fmt.Fprintln(stderr, "-produce must be 0 or more, -lanes 1 or more, and no arguments follow the flags")
		return s, errUsage
	}
	return s, nil
}

// run consumes the stream into the sink until ctx is cancelled.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	db, kin := dynamodb.NewFromConfig(cfg), kinesis.NewFromConfig(cfg)
	if s.create {
		for _, table := range []string{s.table, s.sink} {
			if err := shardlease.CreateTable(ctx, db, table); err != nil {
				return err
			}
		}
	}
	for i := 1; i <= s.produce; i++ {
		if _, err := kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(s.stream),
			PartitionKey: aws.String(fmt.Sprintf("key-%d", i%4)), Data: []byte(strconv.Itoa(i))}); err != nil {
			return fmt.Errorf("put test record %d: %w", i, err)
		}
	}
	store, err := shardlease.NewDynamoStore(db, s.table)
	if err != nil {
		return err
	}
	sk := &sink{db: db, table: s.sink}
	consumer, err := shardlease.NewConsumer(kin, store, s.stream, sk.handle, shardlease.WithKeyConcurrency(s.lanes),
		shardlease.WithLeaseDuration(s.lease))
	if err != nil {
		return err
	}
	if err := consumer.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stopped: %d records applied, %d passed over as applied already, %d writes refused as stale\n",
		sk.applied.Load(), sk.skipped.Load(), sk.stale.Load())
	return nil
}

// errStale is a write refused because a newer holder of the shard wrote.
var errStale = errors.New("fencedsink: a newer holder of the shard wrote; this one lost its lease")

// sink applies records to the totals table, fenced.
type sink struct {
	db                      *dynamodb.Client
	table                   string
	applied, skipped, stale atomic.Int64
}

// handle applies every record of b; an error (a stale holder, a failed
// call) retries the batch, and records applied already are passed over.
func (s *sink) handle(ctx context.Context, b *shardlease.Batch) error {
	tok := b.Fence()
	for _, r := range b.Records {
		amount, err := strconv.ParseInt(string(r.Data), 10, 64)
		if err != nil {
			amount = 0 // not a test record: count it, add nothing
		}
		if err := s.apply(ctx, tok, r, amount); err != nil {
			return err
		}
	}
	return nil
}

// apply adds amount to the total of r's shard and key, unless a newer
// holder wrote the item (errStale) or r is in already.
func (s *sink) apply(ctx context.Context, tok shardlease.FenceToken, r shardlease.Record, amount int64) error {
	key := map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: tok.Scope() + "/" + r.PartitionKey}}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.table),
		Key:                 key,
		ConditionExpression: aws.String("(attribute_not_exists(tok) OR tok <= :t) AND (attribute_not_exists(pos) OR pos < :p)"),
		UpdateExpression:    aws.String("SET tok = :t, pos = :p ADD #total :a, #records :one"),
		// total and records are reserved words of DynamoDB's expressions.
		ExpressionAttributeNames: map[string]string{"#total": "total", "#records": "records"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":t": &types.AttributeValueMemberS{Value: tok.Value()}, ":p": &types.AttributeValueMemberS{Value: r.FencePosition()},
			":a": &types.AttributeValueMemberN{Value: strconv.FormatInt(amount, 10)}, ":one": &types.AttributeValueMemberN{Value: "1"},
		},
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		s.applied.Add(1)
		return nil
	case !errors.As(err, &failed):
		return err
	}
	got, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return err
	}
	if have, ok := got.Item["tok"].(*types.AttributeValueMemberS); ok && have.Value > tok.Value() {
		s.stale.Add(1)
		return fmt.Errorf("%s below %s: %w", tok, have.Value, errStale)
	}
	s.skipped.Add(1) // at or below the last position applied: in already
	return nil
}
