package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// A record the handler can never process (here: one that does not parse)
// goes to the dead-letter callback after two attempts, at its place in the
// shard's order; the records around it are handled once, and the checkpoint
// moves past it.
func ExampleWithDeadLetter() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	for _, order := range []string{"order-1", "order-2", "garbage", "order-4", "order-5"} {
		_, _ = stream.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("k"), Data: []byte(order)})
	}

	errUnparsable := errors.New("not an order")
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		for _, r := range batch.Records {
			if string(r.Data) == "garbage" {
				return fmt.Errorf("record %s: %w", r.SequenceNumber, errUnparsable)
			}
		}
		for _, r := range batch.Records {
			fmt.Println("handled", string(r.Data))
			if string(r.Data) == "order-5" {
				cancel() // stop: Run checkpoints, releases and returns
			}
		}
		return nil
	}
	deadLetter := func(ctx context.Context, shard string, records []shardlease.Record, err error) error {
		for _, r := range records {
			// In a service: send it to a queue or table to look at later.
			fmt.Printf("dead-lettered %s from %s: %v\n", r.Data, shard, errors.Is(err, errUnparsable))
		}
		return nil // the checkpoint may move past the records
	}
	consumer, err := shardlease.NewConsumer(stream, shardlease.NewMemoryStore(), "orders", handle,
		shardlease.WithMaxAttempts(2), shardlease.WithDeadLetter(deadLetter),
		shardlease.WithRetryBackoff(time.Millisecond, 10*time.Millisecond),
		shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	st := consumer.Stats()
	fmt.Println("handled:", st.RecordsHandled, "dead-lettered:", st.RecordsDeadLettered)
	// Output:
	// handled order-1
	// handled order-2
	// dead-lettered garbage from shardId-000000000000: true
	// handled order-4
	// handled order-5
	// handled: 4 dead-lettered: 1
}

// A handler that buffers records flushes them from the stop hook, which runs
// before the final checkpoint of a shutdown or handoff: what it checkpoints
// there is never handed to another worker again.
func ExampleWithShardHooks() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	var last string
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		out, _ := stream.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)})
		last = aws.ToString(out.SequenceNumber)
	}

	// Per-shard buffers; the hooks and the handler of one shard never run
	// at the same time, but different shards' do.
	buffers := map[string][]shardlease.Record{}
	var mu sync.Mutex
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		buffers[batch.ShardID] = append(buffers[batch.ShardID], batch.Records...)
		if len(buffers[batch.ShardID]) == 3 {
			cancel() // shut down: the stop hook flushes the buffer
		}
		return nil // no checkpoint: the records are only buffered
	}
	hooks := shardlease.ShardHooks{
		OnStart: func(ctx context.Context, s shardlease.ShardStart) {
			fmt.Printf("start %s: checkpoint %q, from %s\n", s.ShardID, s.Checkpoint, s.Position)
		},
		OnStop: func(ctx context.Context, s *shardlease.ShardStop) {
			mu.Lock()
			defer mu.Unlock()
			buf := buffers[s.ShardID]
			delete(buffers, s.ShardID)
			fmt.Printf("stop %s (%s): flushing %d records\n", s.ShardID, s.Reason, len(buf))
			if s.Reason == shardlease.StopLost || len(buf) == 0 {
				return // another worker reads them again
			}
			// ... write buf to its destination, then:
			_ = s.Checkpoint(buf[len(buf)-1])
		},
	}
	store := shardlease.NewMemoryStore()
	consumer, err := shardlease.NewConsumer(stream, store, "orders", handle,
		shardlease.WithManualCheckpoints(), shardlease.WithShardHooks(hooks),
		shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	row, _ := store.Get(context.Background(), shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"})
	fmt.Println("checkpointed at the last flushed record:", row.Checkpoint == last)
	// Output:
	// start shardId-000000000000: checkpoint "", from TRIM_HORIZON
	// stop shardId-000000000000 (shutting down): flushing 3 records
	// checkpointed at the last flushed record: true
}
