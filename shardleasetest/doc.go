// Package shardleasetest is test tooling for code built on shardlease, as
// net/http/httptest is for net/http: an in-process Kinesis stream, helpers
// that run a Consumer against it and wait for what a handler processed, and
// the conformance suite every [shardlease.LeaseStore] must pass.
//
// Import it from tests. The stream alone needs no testing.T, so a demo may
// use it too, as the quickstart example does.
//
// # Testing a handler
//
// A handler is a function: a test may call it on a batch made with
// [NewBatch], with no stream, store or consumer.
//
// End to end, make a stream with [NewKinesis] and [Kinesis.AddStream], and
// put records with [Kinesis.Put] or [Kinesis.PutBatch]. Wrap the handler
// under test with [Collect], and run a Consumer over the stream and a
// [shardlease.MemoryStore] with [Run], its log sent to the test's by
// [Logger]. [Collector.WaitFor] returns the records once the handler has
// processed them; Run stops the consumer when the test ends:
//
//	k := shardleasetest.NewKinesis()
//	if err := k.AddStream("orders", 2); err != nil {
//		t.Fatal(err)
//	}
//	// ... k.Put("orders", key, data) for each record ...
//	got := shardleasetest.Collect(handleOrder)
//	c, err := shardlease.NewConsumer(k, shardlease.NewMemoryStore(), "orders", got.Handle,
//		shardlease.WithLogger(shardleasetest.Logger(t)))
//	if err != nil {
//		t.Fatal(err)
//	}
//	shardleasetest.Run(t, c)
//	records := got.WaitFor(t, 3, 10*time.Second)
//
// The repository's docs/testing.md walks through each kind of test.
//
// Reshard while the consumer runs with [Kinesis.Split] and [Kinesis.Merge],
// make calls fail with [Kinesis.SetFaults], count them with [Kinesis.Calls],
// and read back a shard with [Kinesis.Records]. Inside a testing/synctest
// bubble the stream reads only the bubble's clock, so a test of lease
// expiry or a read rate limit takes no real time.
//
// # Testing a lease store
//
// A LeaseStore of your own passes [RunStoreConformance], the suite that
// MemoryStore and DynamoStore pass: leases, the fencing counter,
// checkpoints, handoffs and, for a store that has them, the optional
// capabilities.
//
// # The in-process stream
//
// A [Kinesis] implements the Kinesis calls a consumer and its tests make,
// with the SDK's exact signatures, input and output types and typed
// exceptions, so errors.As behaves as it does with *kinesis.Client. It
// satisfies [shardlease.KinesisAPI], [shardlease.FanOutAPI] and
// [shardlease.StreamDescriber]. It starts no goroutine and never blocks,
// except that a SubscribeToShard subscription is served by a goroutine of its
// own. It reads time only through time.Now, so inside a testing/synctest
// bubble the bubble's fake clock drives iterator expiry, arrival timestamps
// and the read rate limit.
//
// Behaviour a consumer can rely on:
//
//   - Sequence numbers are 56-digit decimal strings that increase with every
//     record put to a stream (across all its shards), so they compare the same
//     as big integers and as strings. A sequence number also names the shard it
//     came from: handing it to GetShardIterator for another shard is an
//     InvalidArgumentException, as with the real service.
//   - GetRecords on an open shard always returns a NextShardIterator, also when
//     it returns no records. On a closed shard, the call that reaches the end
//     returns the last records (possibly none) together with ChildShards and a
//     nil NextShardIterator.
//   - GetRecords is limited to 5 calls per shard in any one-second window
//     (ProvisionedThroughputExceededException); a refused call does not count
//     towards the window. [WithReadLimit] changes or disables the limit.
//   - Shard iterators expire 5 minutes after they were issued
//     (ExpiredIteratorException); ListShards tokens after 300 seconds
//     (ExpiredNextTokenException).
//   - Streams are ACTIVE as soon as CreateStream returns, and resharding takes
//     effect at once. Records are kept for the stream's life; with
//     [WithRetention], closed shards age out (see there).
//   - A stream takes records of up to 1 MiB ([MaxRecordSize]), or up to
//     10 MiB once [Kinesis.AllowLargeRecords] or UpdateMaxRecordSize raised
//     its limit, as with the service's large records. A GetRecords call or
//     a subscription event carries at most 10 MiB but always at least one
//     record, so a 10 MiB record is handed whole.
//   - DescribeStreamSummary reports the stream's ARN and creation time; a
//     stream deleted and created again has a later creation time, as with the
//     real service.
package shardleasetest
