package shardlease

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// KinesisAPI is the part of the Kinesis client the consumer calls.
// *kinesis.Client satisfies it; wrap one to count calls or inject faults.
type KinesisAPI interface {
	ListShards(ctx context.Context, params *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, params *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, params *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

var _ KinesisAPI = (*kinesis.Client)(nil)

// Handler processes one batch of records of one shard. Returning nil marks
// the batch processed (unless WithManualCheckpoints is set); returning an
// error retries the same batch after a backoff, and progress is never
// checkpointed past it. A panic is recovered, logged with its stack and
// treated as an error.
//
// ctx is cancelled when the lease is lost, at the cut-off (no renewal
// succeeded for nine tenths of a lease duration), and when a handoff or
// shutdown has waited its grace period for the batch in hand. A handler must
// return then: another worker will process the shard. A handler that does not
// return within the grace period is abandoned (its goroutine is left behind),
// its lease is left to expire, and Run returns without it. Handlers of different shards run
// concurrently; batches of one shard are handed over one at a time, in order.
type Handler func(ctx context.Context, batch *Batch) error

// Consumer reads a Kinesis stream's shards, sharing them with every other
// Consumer of the same stream and lease store. Create one with NewConsumer
// and call Run.
type Consumer struct {
	store  LeaseStore
	stream string
	cfg    config
	log    *slog.Logger

	// Set by NewConsumer; never written after. caps are the store's
	// optional capabilities.
	caps storeCaps
	ins  *instruments
	// set holds the stream this consumer reads (a Group's, every stream
	// in the group): its Kinesis client, handler and reading mode are its
	// members'. group is the Group this consumer runs for, nil for a
	// Consumer.
	set   *memberSet
	group *Group
	// reader lists the set's rows and the worker rows.
	reader tableReader
	// sess is this worker's session (consumer_session.go); nil without
	// sessions. Set by newConsumer; its own fields say who writes them.
	sess *sessionKeeper

	// mu guards held and stuck. held is written by Run's scheduler (launch
	// and forget); stuck by a runner that abandons its handler and by that
	// handler's goroutine when it returns at last.
	mu    sync.Mutex
	held  map[string]*leaseRunner // by row key: the leases this worker runs
	stuck map[string]*leaseRunner // by row key: abandoned runners whose handler still runs
	// abandoned lists every lease whose handler was abandoned; added to by
	// markStuck, read when Run returns.
	abandoned abandonedShards

	running atomic.Bool   // set by Run: a Consumer runs once
	stats   counters      // counted by every goroutine, through count
	buffers buffered      // what the readers hold, added to by each (consumer_buffer.go)
	notes   chan noteSeen // notes renewals return, sent by runners to the scheduler
	drain   drainer       // Drain's requests to the scheduler (consumer_drain.go)
	view    statusView    // the role and sizing Status reads, written by Run's goroutine (consumer_status.go)
}

// Stats is a snapshot of a consumer's counters since it was created.
type Stats struct {
	// RecordsHandled and BatchesHandled count what handlers returned nil for.
	RecordsHandled, BatchesHandled int64
	// HandlerErrors counts failed handler calls, panics included.
	HandlerErrors int64
	// HandlerPanics counts recovered handler panics.
	HandlerPanics int64
	// CorruptAggregates counts records with the KPL magic prefix that did not
	// decode and were handed over as they are.
	CorruptAggregates int64
	// LeasesTaken counts leases acquired (free, expired or unanswered
	// handoffs); LeasesHandedIn counts leases received by handoff.
	LeasesTaken, LeasesHandedIn int64
	// HandoffsRequested counts handoffs this worker asked other workers for.
	HandoffsRequested int64
	// LeasesLost counts leases lost to another worker or to failed renewals.
	LeasesLost int64
	// LeasesReleased counts leases released at shutdown, handoff or shard end.
	LeasesReleased int64
	// WriteFailures counts lease writes that failed and were retried.
	WriteFailures int64
	// RecordsDeadLettered counts records handed to the WithDeadLetter
	// callback (which returned nil); they are not in RecordsHandled.
	RecordsDeadLettered int64
	// FinishedRowsDeleted counts rows of finished shards this worker
	// deleted once they could no longer matter (see LineageStore).
	FinishedRowsDeleted int64
	// CheckpointsRejected counts checkpoints Kinesis refused to position a
	// reader at (see ErrCheckpointRejected).
	CheckpointsRejected int64
	// Subscriptions counts the SubscribeToShard calls that succeeded (with
	// WithEnhancedFanOut; each lasts up to five minutes).
	Subscriptions int64
	// TableListings counts this worker's listings of the stream's rows (take
	// rounds); with coordination only the coordinator lists steadily.
	TableListings int64
	// Coordinating reports whether this worker coordinates the stream now:
	// it holds the first readable lease (see docs/coordination.md).
	Coordinating bool
	// CoordinationStalls counts the stalls this worker saw and could not
	// end (see docs/coordination.md#stalls), each also logged at Error.
	CoordinationStalls int64
	// CorruptRows counts the rows this worker left alone because they
	// cannot be decoded, once per row and run, each also logged at Error.
	CorruptRows int64
	// SourceFailures counts, in a Group, the calls of its stream source that
	// failed or returned a stream that could not be read yet (see
	// Group.SourceFailures); 0 for a Consumer.
	SourceFailures int64
	// SessionsLost counts the sessions of this worker (WithSessions) that
	// ended while it ran, fenced by another worker or not kept for a lease
	// duration, each also logged at Error: every lease the session kept was
	// lost with it.
	SessionsLost int64
	// SessionsFenced counts the sessions of other workers this worker
	// fenced before taking their leases.
	SessionsFenced int64
	// RecordsBuffered and BytesBuffered are the records and payload bytes
	// the readers hold now: each shard's batch in hand and the one read
	// ahead (see docs/handlers.md#memory).
	RecordsBuffered, BytesBuffered int64
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		RecordsHandled: s.records.Load(), BatchesHandled: s.batches.Load(),
		HandlerErrors: s.handlerErrors.Load(), HandlerPanics: s.panics.Load(),
		CorruptAggregates: s.corruptAggregates.Load(),
		LeasesTaken:       s.taken.Load(), LeasesHandedIn: s.handedIn.Load(),
		HandoffsRequested: s.asked.Load(),
		LeasesLost:        s.lost.Load(), LeasesReleased: s.released.Load(),
		WriteFailures:       s.writeFailures.Load(),
		RecordsDeadLettered: s.deadLettered.Load(),
		FinishedRowsDeleted: s.cleaned.Load(), CheckpointsRejected: s.rejected.Load(),
		Subscriptions: s.subscriptions.Load(),
		TableListings: s.listings.Load(), Coordinating: s.coordinating.Load(),
		CoordinationStalls: s.stalls.Load(), CorruptRows: s.corruptRows.Load(), SourceFailures: s.sourceErrs.Load(),
		SessionsLost: s.sessionsLost.Load(), SessionsFenced: s.sessionsFenced.Load(),
		RecordsBuffered: c.buffers.records.Load(), BytesBuffered: c.buffers.bytes.Load(),
	}
}

// NewConsumer returns a consumer of stream. It starts nothing: call Run.
func NewConsumer(client KinesisAPI, store LeaseStore, stream string, handler Handler, opts ...Option) (*Consumer, error) {
	if err := checkStreamArg(stream); err != nil {
		return nil, err
	}
	switch {
	case isNil(client):
		return nil, errorf("%w: stream %s: the Kinesis client is nil; pass kinesis.NewFromConfig(cfg)", ErrInvalidConfig, stream)
	case isNil(store):
		return nil, errorf("%w: stream %s: the lease store is nil; pass shardlease.NewDynamoStore(...) or shardlease.NewMemoryStore()", ErrInvalidConfig, stream)
	case handler == nil:
		return nil, errorf("%w: stream %s: the handler is nil; pass a func(ctx, *shardlease.Batch) error", ErrInvalidConfig, stream)
	}
	if err := checkRegion(client); err != nil {
		return nil, errorf("stream %s: %w", stream, err)
	}
	cfg, err := buildConfig(stream, opts)
	if err != nil {
		return nil, err
	}
	fo, err := newFanOut(client, stream, cfg)
	if err != nil {
		return nil, err
	}
	m := newMember(stream, stream, client, handler, cfg, fo)
	return newConsumer(store, stream, cfg, newMemberSet(false, m))
}

// checkStreamArg checks NewConsumer's stream: a name, and not an ARN,
// which only a Group's StreamSpec takes.
func checkStreamArg(stream string) error {
	if strings.HasPrefix(stream, "arn:") {
		name := "the stream's name"
		if n, ok := streamNameOfARN(stream); ok {
			name = fmt.Sprintf("%q", n)
		}
		return errorf("%w: NewConsumer: stream %q is an ARN, not a stream name: pass %s, or to read a stream by its ARN (of another account, say) "+
			"use shardlease.NewGroup with shardlease.StreamSpec{ARN: %q}", ErrInvalidName, stream, name, stream)
	}
	if err := ValidateStreamName(stream); err != nil {
		return errorf("shardlease: NewConsumer: %w", err)
	}
	return nil
}

// newConsumer returns a consumer of the streams of set, through store,
// named stream (its stream, or a Group's name, which its worker rows
// carry). NewConsumer and NewGroup both make their engine with it.
func newConsumer(store LeaseStore, stream string, cfg config, set *memberSet) (*Consumer, error) {
	ins, err := newInstruments(cfg.meterProvider, stream, cfg.ownerID)
	if err != nil {
		return nil, errorf("%w: stream %s: creating metric instruments: %w", ErrInvalidConfig, stream, err)
	}
	named := "stream"
	if set.grouped {
		named = "group" // a runner's logs name its stream
	}
	caps := resolveCaps(store)
	if cfg.sessions && caps.sessions == nil {
		if cfg.sessionsSet {
			return nil, errorf("%w: %s %s: WithSessions(true) needs a store that keeps sessions and worker rows (SessionStore and WorkerStore; MemoryStore and DynamoStore do); use one, or turn sessions off", ErrInvalidConfig, named, stream)
		}
		cfg.sessions = false
		cfg.logger.Warn("the lease store keeps no sessions (it is no SessionStore and WorkerStore): each lease is renewed on its own row, "+
			"and this worker can never take a lease another worker's session keeps (it leaves such leases to workers whose store keeps sessions); "+
			"pass the store so that it implements SessionStore and WorkerStore (a wrapper that embeds *DynamoStore, not LeaseStore, does), "+
			"or WithSessions(false) on every worker of the table", named, stream, "owner", cfg.identity)
	}
	c := &Consumer{
		caps: caps, store: store, stream: stream, cfg: cfg, ins: ins,
		reader: tableReader{store: store, caps: caps, set: set, workersOf: stream},
		log:    cfg.logger.With(named, stream, "owner", cfg.identity),
		held:   make(map[string]*leaseRunner), stuck: make(map[string]*leaseRunner),
		notes: make(chan noteSeen, 64), drain: newDrainer(),
		set: set,
	}
	if cfg.sessions {
		c.sess = newSessionKeeper(c)
	}
	return c, nil
}

// OwnerID returns the identity this consumer writes into the rows it holds:
// the owner id given with WithOwnerID (or the default) plus this consumer's
// random incarnation, e.g. "pod-0#a1b2c3d4e5f60718". OwnerName recovers the
// configured id from it.
func (c *Consumer) OwnerID() string { return c.cfg.identity }

// Stream returns the name of the stream.
func (c *Consumer) Stream() string { return c.stream }

// Held returns the shard ids whose leases this consumer holds now, sorted.
func (c *Consumer) Held() []string {
	keys := c.heldKeys()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = c.set.publicID(k.String())
	}
	return out
}

// heldKeys returns the keys of the leases this consumer runs now, sorted.
func (c *Consumer) heldKeys() []LeaseKey {
	c.mu.Lock()
	out := make([]LeaseKey, 0, len(c.held))
	for id := range c.held {
		out = append(out, keyOf(id))
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b LeaseKey) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// Run consumes the stream until ctx is cancelled, then shuts down
// gracefully and returns nil: readers finish the batch in hand, final
// checkpoints are written and every lease is released so other workers take
// them at once. It returns early with an error when the stream or the lease
// table is missing or misconfigured, or its endpoint cannot be reached. When
// it had to abandon handlers that did not return after their context was
// cancelled, it returns an *AbandonedHandlersError (matching
// ErrHandlerAbandoned) naming their shards. Run returns only after every
// goroutine it started has exited, abandoned handlers aside. A Consumer runs
// once: a second call returns ErrAlreadyRunning.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return alreadyRunning("stream "+c.stream, "Consumer")
	}
	defer close(c.drain.runDone)
	calls := startupCallsOf(c.caps.tableName, streamsNamed(c.set.grouped, c.stream))
	boot := c.watchStartup("checking the lease table", calls.table)
	defer boot.done(false)
	if tc := c.caps.table; tc != nil {
		if err := tc.CheckTable(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // cancelled during start-up: nothing was started
			}
			return errorf("shardlease: stream %s: %w", c.stream, err)
		}
	}
	reg, err := c.ins.observe(c)
	if err != nil {
		return errorf("shardlease: stream %s: registering metric callbacks: %w", c.stream, err)
	}
	defer func() { _ = reg.Unregister() }()
	sc := &scheduler{
		c:        c,
		obs:      make(map[string]observation),
		wobs:     make(map[string]observation),
		takable:  make(map[string]time.Time),
		exited:   make(chan *leaseRunner),
		wake:     make(chan struct{}, 1),
		resync:   make(chan struct{}, 1),
		pending:  make(map[string]time.Time),
		refused:  make(map[string]time.Time),
		rng:      rand.New(rand.NewPCG(ownerSeed(c.cfg.identity), 1)),
		sessions: newSessionView(c.caps.sessions),
	}
	if c.group != nil {
		sc.removed = c.group.removed
	}
	sc.cd = newCoordination(sc)
	defer sc.cd.lookTimer.Stop()
	defer sc.cd.expiry.Stop()
	// Show this worker to the others before anything else, so that workers
	// starting together count each other in their first take round.
	boot.at("writing this worker's row", calls.row)
	if err := sc.heartbeat(ctx); err != nil {
		return err
	}
	if c.sess != nil {
		end, err := c.sess.begin(ctx)
		if end == nil {
			return err // nil when ctx was cancelled during start-up
		}
		defer end()
	}
	boot.at("listing the stream's shards", calls.sync)
	if err := boot.startup(ctx, sc.syncShards); err != nil || ctx.Err() != nil {
		// Leave no worker row behind: the others would count this worker
		// for a lease duration.
		sc.removeRow(context.WithoutCancel(ctx))
		return err
	}
	boot.at("registering the enhanced fan-out consumer", calls.fanOut)
	// Registered (or found) before any lease is taken.
	if err := c.set.registerFanOut(ctx, c); err != nil {
		sc.removeRow(context.WithoutCancel(ctx))
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	boot.done(true)
	err = sc.loop(ctx)
	sc.shutdown(context.WithoutCancel(ctx))
	if err == nil {
		err = c.abandoned.err(c.cfg.grace())
	}
	return err
}

// answerHandoff tells the runner of shard to finish its batch and release
// the lease to taker.
func (c *Consumer) answerHandoff(shard, taker string) {
	c.mu.Lock()
	r := c.held[shard]
	c.mu.Unlock()
	if r != nil {
		r.handOff(taker)
	}
}

func (c *Consumer) heldSet() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.held))
	for id := range c.held {
		out[id] = true
	}
	return out
}

// storeCtx returns ctx bounded by the store call timeout.
func (c *Consumer) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.callTimeout())
}

// markStuck records that r's handler runs on after r was abandoned: the
// shard is neither counted nor taken by this worker until it returns.
func (c *Consumer) markStuck(r *leaseRunner) {
	c.mu.Lock()
	c.stuck[r.id] = r
	c.mu.Unlock()
	c.abandoned.add(r.key)
}

func (c *Consumer) unstick(r *leaseRunner) {
	c.mu.Lock()
	if c.stuck[r.id] == r {
		delete(c.stuck, r.id)
	}
	c.mu.Unlock()
	r.log.Info("the abandoned handler returned")
}

// stuckSet returns the shards whose abandoned handlers still run.
func (c *Consumer) stuckSet() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.stuck))
	for id := range c.stuck {
		out[id] = true
	}
	return out
}

// StreamDescriber is the optional part of a Kinesis client the consumer
// uses to learn the stream's retention period, so that a shard stuck on a
// failing batch reports how long until the record ages out.
// *kinesis.Client satisfies it; a KinesisAPI without it reports no such
// time.
type StreamDescriber interface {
	DescribeStreamSummary(ctx context.Context, params *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// FanOutAPI is the part of the Kinesis client that enhanced fan-out (see
// WithEnhancedFanOut) calls besides KinesisAPI. *kinesis.Client satisfies it.
// A client passed to NewConsumer needs these methods only when the option is
// set: the consumer finds them by type assertion.
type FanOutAPI interface {
	DescribeStreamSummary(ctx context.Context, params *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	RegisterStreamConsumer(ctx context.Context, params *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error)
	DescribeStreamConsumer(ctx context.Context, params *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error)
	SubscribeToShard(ctx context.Context, params *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error)
}
