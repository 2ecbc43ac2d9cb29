// Package shardlease lets several instances of one Go service share the
// shards of Kinesis streams. Each shard is read by one instance at a time,
// progress is checkpointed in a DynamoDB table, and when an instance dies or
// is deployed away its shards move to the others without losing a record.
//
// # One stream or many
//
// [NewConsumer] reads one stream. [NewGroup] reads many from one lease
// table: a fixed set ([GroupConfig].Streams) or the set a [StreamSource]
// returns as it changes, each stream with its own client, handler and
// reading mode where its [StreamSpec] gives one. A Consumer is the
// one-stream case of the engine a Group runs: leases, handoffs, drains and
// every guarantee below are the same for both, and a fleet moving from
// Consumers to a Group, or back, keeps every checkpoint (docs/streams.md).
// A service wires a Kinesis client, a [LeaseStore], a stream name and a
// [Handler], and calls Run:
//
//	store, err := shardlease.NewDynamoStore(dynamodb.NewFromConfig(cfg), "orders-leases")
//	consumer, err := shardlease.NewConsumer(kinesis.NewFromConfig(cfg), store, "orders", handle)
//	err = consumer.Run(ctx) // until ctx is cancelled; then checkpoints, releases, returns nil
//
// Run returns an error matching ErrHandlerAbandoned when a handler did not
// return within the grace period after its context was cancelled.
//
// # The handler
//
// A Handler gets the records of one shard as a [Batch], one batch at a time
// and in order; handlers of different shards run concurrently. Returning nil
// marks the batch processed; an error retries it after a backoff, and
// progress never moves past it. With [WithManualCheckpoints] the handler
// marks progress itself with [Batch.Checkpoint], from any goroutine, once
// its work is really done. A checkpoint rides on the worker's next session
// keep (or, with WithSessions(false), the lease's next renewal);
// [Batch.Flush] writes it at once. The handler's context ends when the lease
// is lost or its keeps stop succeeding, and when a handoff or shutdown
// has waited its grace period: the handler must return then, since another
// worker will read the shard (docs/handlers.md).
//
// # Drain
//
// [Consumer.Drain] and [Group.Drain] hand every lease a worker holds to the
// other workers while its process keeps running: each handler finishes the
// batch in hand, the final checkpoint is written and the lease released, and
// no record is handed to two handlers. A service calls Drain on SIGTERM,
// before it cancels Run (docs/operating.md).
//
// # Fencing tokens
//
// Delivery is at least once: after a crash, a lost lease or a holder paused
// past its lease, records are handed to a handler again. [Batch.Fence]
// returns the [FenceToken] of the holding the batch comes from, and a later
// holding of the shard carries a greater token, whichever worker holds it
// and whatever it could learn from Kinesis: the order rests on the lease
// table alone.
// A sink that keeps, per shard, the highest token it applied (in the same
// write as its data) and refuses a lower one refuses every write of a holder
// that lost its lease, so each record's effect is applied once.
// docs/handlers.md ("Exactly-once effects") states the ordering rule, what
// it rests on and its one exception (a new lease table), with a DynamoDB
// sink; examples/fencedsink runs one.
//
// # Rewind, export and import
//
// [Rewind] moves every shard of a stream to a time, so that consumers read
// again from it (or skip up to it). It refuses while workers hold the
// leases it would change, unless [WithRewindHandover] takes them. [Export]
// saves a stream's progress as [Checkpoints] (JSON), and [ImportCheckpoints]
// writes it back, with [WithImportOverwrite] even over progress made since;
// [Import] copies progress from the tables of other Kinesis libraries. Every
// write is fenced like a holder's. The shardlease command (cmd/shardlease)
// does the same from a shell (docs/operating.md).
//
// # Stores
//
// A LeaseStore keeps the lease rows. [DynamoStore] keeps them in a DynamoDB
// table ([CreateTable] makes one); [MemoryStore] keeps them in process
// memory, for tests, single-process services and the quickstart. A store of
// your own implements LeaseStore and whichever optional capabilities it can
// ([WorkerStore], [NoteStore], [LineageStore], [IdentityStore], [Rewinder],
// [GroupLister], [StreamRemover] and others): each one's doc says what the
// consumer does without it. [github.com/shardlease/shardlease/shardleasetest.RunStoreConformance]
// holds a store to the contract both built-in stores pass (docs/testing.md).
//
// # The test kit
//
// Package [github.com/shardlease/shardlease/shardleasetest] is test tooling
// for code built on shardlease: an in-process Kinesis stream with faults and
// resharding, helpers that run a Consumer over it and wait for what a
// handler processed, batches to call a handler with no consumer at all, and
// the store conformance suite. docs/testing.md walks through each kind of
// test.
//
// # Lease semantics
//
// Every shard of a stream has one lease row keyed "stream:shard". A row
// carries its holder (owner id), a fencing counter, the checkpoint and the
// shard's parents. Every write is conditional and moves the counter up:
//
//   - acquire succeeds when the row is free, or when its counter still equals
//     the counter the taker observed;
//   - renew, checkpoint and release succeed only while owner and counter are
//     the caller's.
//
// So a holder that was paused past its lease and lost it cannot write a stale
// checkpoint, even if it later holds the lease again: its old handle carries
// an old counter. A refused write is ErrLeaseLost; the shard's reader stops
// before it hands the handler another record and the handler's context is
// cancelled.
//
// Expiry never compares clocks of different machines. A lease is expired for
// a taker when its counter has not moved for a whole lease duration as
// measured by the taker's own monotonic clock. A released lease is taken at
// once. The lease_expiry attribute is written for operators only.
//
// One goroutine per held lease does every write to its row. Without
// sessions (WithSessions(false)) it renews the row, a checkpoint rides on the
// next renewal, and a lease costs one write per renew interval however often
// the handler checkpoints (Batch.Flush writes at once).
//
// With sessions, the default, a worker keeps one session on its worker row
// instead (see SessionStore): one write per renew interval keeps every lease
// it holds, and a lease row is written only when its owner changes and for
// checkpoints. A taker judges a kept lease by its session, fences the session
// (a conditional delete of its row) before it claims any of its leases, and
// the holder stops at its session's cut-off, timed on its own monotonic
// clock from the send of its last successful keep.
//
// After a crash, records after the last written checkpoint are handed over
// again. Workers balance leases to a fair share
// each; a worker that holds no lease keeps a worker row ("stream:@owner",
// see WorkerStore) so that the others count it from its start; a lease taken from a live worker is handed over gracefully (the
// holder finishes its batch, checkpoints and releases to the taker), so no
// record is handed to two workers. A shard born of a split or merge is not
// read until its parents are read to their end, which keeps the order of
// records of one partition key. Where a shard starts is decided when its row
// is made and kept on the row (see LineageStore); the row of a finished shard
// is deleted once Kinesis no longer lists the shard and every child has a
// checkpoint. Each stream has an identity row ("stream:#identity", see
// IdentityStore): a consumer refuses to run on the rows of a stream that was
// deleted and created again (ErrStreamRecreated). Each stream also has a
// fence floor row ("stream:#fence") that no deletion removes: every acquire
// of the stores of this package reserves its counter there, above every
// counter an earlier acquire of the stream wrote, so fencing tokens keep
// growing even across lease rows deleted and made again.
//
// # Reading modes
//
// By default each held shard is polled with GetShardIterator and GetRecords.
// With WithEnhancedFanOut it is read with SubscribeToShard through a
// registered stream consumer instead: records are pushed as they arrive, and
// the consumer has a read allowance of its own. Leases, checkpoints,
// de-aggregation, handoffs and every guarantee above are the same in both
// modes; the client needs the calls of FanOutAPI only in the second.
//
// # Records that keep failing
//
// A handler error retries the batch with backoff, without a limit by
// default, so no record is ever skipped; a stuck shard is logged and
// reported (see WithMaxAttempts). With WithMaxAttempts and WithDeadLetter a
// failing batch is narrowed down by halves to the records that fail alone,
// which go to the dead-letter callback; the rest are handled once.
// WithShardHooks tells handlers that keep per-shard state when a shard
// starts and stops, before the final checkpoint of a handoff or shutdown.
//
// # Table schema
//
// One table can serve every stream of a service. Its only key is the string
// partition key lease_key; CreateTable creates it with on-demand billing.
// The main attributes of a lease row (docs/table.md lists every row and
// attribute):
//
//	lease_key       S   "stream:shard", e.g. "orders:shardId-000000000003"
//	lease_owner     S   the holder's owner id; absent when free
//	lease_counter   N   fencing counter, moved up by every write
//	fence_epoch     N   stream creation time (unix ms) the last acquire read: its token's epoch
//	checkpoint      S   last processed sequence number, or SHARD_END
//	checkpoint_sub  N   sub-sequence inside a KPL aggregate; absent for whole records
//	parent_shards   SS  parents of a shard born of a split or merge
//	lease_expiry    N   unix ms, the holder's estimate; never used for a decision
//	handoff_to      S   owner id a live holder was asked to hand the lease to
//	start_position  S   where a reader starts while there is no checkpoint
//	start_timestamp N   unix ms, with AT_TIMESTAMP
//
// # Upgrading from older rows
//
// Earlier releases kept rows keyed by a bare shard id. Name the stream those
// rows belong to with WithLegacyStream while upgrading, and a shard whose own
// row has no checkpoint resumes from the bare row's. Stop every old instance
// before starting new ones: the two versions lease different rows. The
// upgrade guide, docs/upgrading.md, goes step by step, including importing progress
// from other libraries' tables.
package shardlease
