package shardlease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// InitialPosition is where a consumer starts reading a shard that has no
// checkpoint, for the shards of a stream it syncs for the first time (a
// table without rows of the stream). A shard that appears later (a child of
// a split or merge) starts at TrimHorizon, so nothing written after the
// reshard is skipped. The start is recorded on the row when it is made.
type InitialPosition string

// Initial positions.
const (
	// TrimHorizon starts at the oldest record still in the shard.
	TrimHorizon InitialPosition = "TRIM_HORIZON"
	// Latest starts after the newest record: only records written after the
	// consumer first reads the shard are handled.
	Latest InitialPosition = "LATEST"
	// AtTimestamp starts at the first record written at or after the
	// timestamp given with WithStartTimestamp.
	AtTimestamp InitialPosition = "AT_TIMESTAMP"
)

// Option configures a Consumer. A bad value makes NewConsumer fail.
type Option func(*config)

type config struct {
	ownerID          string
	identity         string // ownerID plus this run's incarnation: what rows name
	leaseDuration    time.Duration
	renewInterval    time.Duration
	takeInterval     time.Duration
	shardSync        time.Duration
	maxLeases        int
	maxStealsPerTake int
	position         InitialPosition
	startTimestamp   time.Time
	batchSize        int32
	idlePoll         time.Duration
	checkpointFlush  time.Duration
	shutdownTimeout  time.Duration
	manualCheckpoint bool
	rawAggregates    bool
	logger           *slog.Logger
	wallClock        func() time.Time
	retryMin         time.Duration
	retryMax         time.Duration
	meterProvider    metric.MeterProvider
	maxAttempts      int            // WithMaxAttempts
	deadLetter       DeadLetterFunc // WithDeadLetter
	hooks            ShardHooks     // WithShardHooks
	fanOutName       string         // WithEnhancedFanOut
	fanOutSet        bool
	keyConcurrency   int           // WithKeyConcurrency
	maxInFlight      int           // WithMaxInFlight
	windowRecords    int           // WithBatchWindow
	windowWait       time.Duration // WithBatchWindow
	sessions         bool          // WithSessions
	unpacked         bool          // WithPackedCheckpoints(false)

	// set explicitly, to tell defaults from choices
	renewSet, takeSet, flushSet, ownerSet, sessionsSet bool
}

// WithOwnerID sets the owner id that names this consumer in logs, metrics
// and the leases it holds; an empty id makes NewConsumer fail. Each run adds
// a random 64-bit incarnation to it in the rows it writes
// ("pod-0#a1b2c3d4e5f60718"), so an id reused by two processes at once (a
// restarted pod whose predecessor still runs) never makes them share a
// lease. Default: the host name plus a random suffix.
func WithOwnerID(id string) Option { return func(c *config) { c.ownerID, c.ownerSet = id, true } }

// WithLeaseDuration sets how long a lease whose counter has not moved stays
// with its holder before another worker may take it, as measured on the
// taker's own monotonic clock. Default 10s.
func WithLeaseDuration(d time.Duration) Option { return func(c *config) { c.leaseDuration = d } }

// WithRenewInterval sets how often this worker's session is kept (with
// sessions, the default), or each held lease renewed and its pending
// checkpoint written (WithSessions(false)). It must be shorter than the
// lease duration. Default: a third of the lease duration.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) { c.renewInterval, c.renewSet = d, true }
}

// WithTakeInterval sets how often a worker that lists the stream's leases
// (the coordinator, and workers finding their share; see
// docs/coordination.md) lists them to take free, expired and surplus ones. A lease
// released by a worker that shuts down is taken again within it; one whose
// holder crashed within a lease duration and a take interval. The first
// round runs a quarter of it after Run writes the worker's row, so that
// workers started together count each other; while handoffs it asked for
// are pending, a worker also lists half an interval after each round.
// Default: two fifths of the lease duration.
func WithTakeInterval(d time.Duration) Option {
	return func(c *config) { c.takeInterval, c.takeSet = d, true }
}

// WithShardSyncInterval sets how often the consumer lists the stream's
// shards to create rows for new ones. A shard reaching its end triggers a
// sync too. Default 1 minute.
func WithShardSyncInterval(d time.Duration) Option { return func(c *config) { c.shardSync = d } }

// WithSessions turns sessions on or off (see SessionStore): with them, one
// write per renew interval to this worker's row keeps every lease it holds,
// whatever their number, and a lease row is written only when its owner
// changes and for checkpoints. Default: on. WithSessions(false) keeps the
// per-lease renewals of releases from before sessions. Workers with
// sessions on and off, and workers of a release from before sessions, can
// share a table: rows a session keeps are judged by their session, and a
// release from before sessions reads them as corrupt and never takes them
// (see docs/coordination.md#sessions). Sessions need a store that
// implements SessionStore and WorkerStore (MemoryStore and DynamoStore do):
// by default a store without them falls back to per-lease renewals with one
// Warn line, and such a worker never takes a lease another worker's session
// keeps (a wrapper of DynamoStore should embed *DynamoStore, which keeps
// every capability, rather than LeaseStore); WithSessions(true) on such a
// store makes NewConsumer fail.
func WithSessions(on bool) Option {
	return func(c *config) { c.sessions, c.sessionsSet = on, true }
}

// WithPackedCheckpoints turns packed checkpoints on or off (see
// PackedCheckpointStore): with sessions on and a store that has them, the
// checkpoints of the leases a session keeps ride its keeps, one write a
// renew interval for all of them, instead of a write of each lease row.
// Default: on; without sessions, with a store that has none, or with a
// WithCheckpointInterval shorter than the renew interval, it changes
// nothing. Turn it off while workers of a release from before packed
// checkpoints share the table (a rolling upgrade): their fences and
// removals delete a session row with its checkpoints, so their takers start
// from the lease rows' older ones (more records handed again, none lost).
func WithPackedCheckpoints(on bool) Option { return func(c *config) { c.unpacked = !on } }

// WithMaxLeases caps how many leases this consumer holds. Default: no cap.
func WithMaxLeases(n int) Option { return func(c *config) { c.maxLeases = n } }

// WithMaxStealsPerTake caps how many leases one take round may ask other
// live workers to hand over. Default 32.
func WithMaxStealsPerTake(n int) Option { return func(c *config) { c.maxStealsPerTake = n } }

// WithInitialPosition sets where shards without a checkpoint are first read.
// Default TrimHorizon. AtTimestamp needs WithStartTimestamp.
func WithInitialPosition(p InitialPosition) Option { return func(c *config) { c.position = p } }

// WithStartTimestamp sets the timestamp for AtTimestamp; it also selects
// AtTimestamp.
func WithStartTimestamp(t time.Time) Option {
	return func(c *config) { c.startTimestamp, c.position = t, AtTimestamp }
}

// WithBatchSize sets the records asked for per GetRecords call, 1 to 10,000.
// Default 10,000.
func WithBatchSize(n int) Option {
	return func(c *config) { c.batchSize = int32(min(max(n, -1), 1<<30)) }
}

// WithIdlePollInterval sets how long a reader waits before polling a shard
// again after an empty GetRecords. Default 1s. Reads never exceed 5 calls per
// second per shard whatever this is.
func WithIdlePollInterval(d time.Duration) Option { return func(c *config) { c.idlePoll = d } }

// WithCheckpointInterval sets how soon a new checkpoint is written. By
// default it equals the renew interval, so checkpoints ride on the session's
// keeps (packed checkpoints) or on renewals. A shorter interval writes
// progress sooner at the price of more writes: each checkpoint then goes to
// its lease row (packing is off), at most once per interval.
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpointFlush, c.flushSet = d, true }
}

// WithShutdownTimeout bounds Run's shutdown, whatever handlers do: they get
// the grace period (the timeout less the smaller of the renew interval and a
// quarter of the timeout) to finish the batch in hand, after which their
// context is cancelled and they are abandoned; final checkpoints and
// releases fit in the grace period; the rest withdraws handoff requests and
// removes the worker row. A handoff waits the same grace period for the
// batch in hand. Default 10s.
func WithShutdownTimeout(d time.Duration) Option { return func(c *config) { c.shutdownTimeout = d } }

// WithManualCheckpoints stops the consumer from checkpointing when a handler
// returns nil; the handler checkpoints with Batch.Checkpoint when its work is
// really done (for handlers that finish asynchronously).
func WithManualCheckpoints() Option { return func(c *config) { c.manualCheckpoint = true } }

// WithRawAggregates hands KPL aggregated records to the handler as they are
// instead of de-aggregating them.
func WithRawAggregates() Option { return func(c *config) { c.rawAggregates = true } }

// WithLogger sets the logger. Default: slog.Default() at the time
// NewConsumer is called. Lease changes are logged at Info (a fleet that is
// not deploying or failing logs nothing), take rounds and checkpoints at
// Debug, retried failures at Warn, and what needs a person at Error (a
// handler panic: once per panic site and batch, with its stack). Pass
// slog.New(slog.DiscardHandler) to silence the consumer.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithWallClock is a test hook: services do not need it. It replaces the
// wall clock used only for the lease_expiry attribute that operators read,
// which is never used for a decision; tests and the soak skew it to prove
// that. Default time.Now.
func WithWallClock(now func() time.Time) Option { return func(c *config) { c.wallClock = now } }

// WithRetryBackoff sets the shortest and longest delay between retries of a
// failed handler call or a throttled read. Default 100ms to 10s.
func WithRetryBackoff(minDelay, maxDelay time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = minDelay, maxDelay }
}

// minLeaseDuration is the shortest lease duration that leaves room for the
// renewals, take rounds and the cut-off margin carved out of it.
const minLeaseDuration = 100 * time.Millisecond

// maxOwnerID is the longest owner id: with its incarnation it stays within
// 256 bytes.
const maxOwnerID = 256 - len(incarnationMark) - 2*incarnationBytes

func defaultOwnerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// defaultConfig is the configuration before any option.
func defaultConfig() config {
	return config{
		leaseDuration:    10 * time.Second,
		shardSync:        time.Minute,
		maxStealsPerTake: 32,
		position:         TrimHorizon,
		batchSize:        10000,
		idlePoll:         time.Second,
		shutdownTimeout:  10 * time.Second,
		retryMin:         100 * time.Millisecond,
		retryMax:         10 * time.Second,
		wallClock:        time.Now,
		sessions:         true,
	}
}

// buildConfig applies opts to the defaults, derives the timings left unset
// from the lease duration, and validates the result. A bad value is an
// ErrInvalidConfig naming the stream and the option.
func buildConfig(stream string, opts []Option) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.leaseDuration > 0 && c.leaseDuration < minLeaseDuration {
		return c, errorf("%w: stream %s: WithLeaseDuration(%v): a lease duration must be at least %v (10s is usual): renewals, take rounds and the cut-off margin are fractions of it", ErrInvalidConfig, stream, c.leaseDuration, minLeaseDuration)
	}
	c.derive()
	bad := func(format string, args ...any) error {
		return errorf("%w: stream %s: %s", ErrInvalidConfig, stream, fmt.Sprintf(format, args...))
	}
	for _, check := range []func(bad func(string, ...any) error) error{c.checkTimings, c.checkLimits, c.checkPosition} {
		if err := check(bad); err != nil {
			return c, err
		}
	}
	if err := checkRetry(&c, bad); err != nil {
		return c, err
	}
	if err := checkLanes(&c, bad); err != nil {
		return c, err
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// derive fills in the timings and the owner id left unset, and this run's
// identity.
func (c *config) derive() {
	if !c.renewSet {
		c.renewInterval = c.leaseDuration / 3
	}
	if !c.takeSet {
		c.takeInterval = c.leaseDuration * 2 / 5
	}
	if !c.flushSet {
		c.checkpointFlush = c.renewInterval
	}
	if c.ownerID == "" && !c.ownerSet {
		c.ownerID = defaultOwnerID()
	}
	c.identity = newIncarnation(c.ownerID)
}

// checkTimings checks that every duration is positive and that renewals
// and checkpoints fit in a lease duration.
func (c *config) checkTimings(bad func(format string, args ...any) error) error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"WithLeaseDuration", c.leaseDuration},
		{"WithRenewInterval", c.renewInterval},
		{"WithTakeInterval", c.takeInterval},
		{"WithShardSyncInterval", c.shardSync},
		{"WithIdlePollInterval", c.idlePoll},
		{"WithCheckpointInterval", c.checkpointFlush},
		{"WithShutdownTimeout", c.shutdownTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return bad("%s(%v): the duration must be positive", p.name, p.d)
		}
	}
	switch {
	case c.renewInterval >= c.leaseDuration:
		return bad("WithRenewInterval(%v) must be shorter than the lease duration %v (a third of it is usual), or the lease runs out between renewals", c.renewInterval, c.leaseDuration)
	case c.checkpointFlush > c.renewInterval:
		return bad("WithCheckpointInterval(%v) must not exceed the renew interval %v: checkpoints ride on renewals at the latest", c.checkpointFlush, c.renewInterval)
	}
	return nil
}

// checkLimits checks the caps, sizes, backoff, clock and owner id.
func (c *config) checkLimits(bad func(format string, args ...any) error) error {
	switch {
	case c.maxLeases < 0:
		return bad("WithMaxLeases(%d): use a positive cap, or 0 for none", c.maxLeases)
	case c.maxStealsPerTake < 0:
		return bad("WithMaxStealsPerTake(%d): use 0 (never steal) or more", c.maxStealsPerTake)
	case c.batchSize < 1 || c.batchSize > 10000:
		return bad("WithBatchSize(%d): Kinesis returns 1 to 10000 records per GetRecords call", c.batchSize)
	case c.retryMin <= 0 || c.retryMax < c.retryMin:
		return bad("WithRetryBackoff(%v, %v): both must be positive and the first not above the second", c.retryMin, c.retryMax)
	case c.wallClock == nil:
		return bad("WithWallClock(nil): pass a clock such as time.Now")
	case c.ownerID == "":
		return bad("WithOwnerID(\"\"): the owner id is empty; pass one unique per process, or leave the option out for the host name plus a random suffix")
	case len(c.ownerID) > maxOwnerID:
		return bad("WithOwnerID: the owner id is %d bytes long; use at most %d (the rows carry it with a 17-byte incarnation)", len(c.ownerID), maxOwnerID)
	}
	return nil
}

// checkPosition checks the initial position (and its timestamp).
func (c *config) checkPosition(bad func(format string, args ...any) error) error {
	switch c.position {
	case TrimHorizon, Latest:
	case AtTimestamp:
		if c.startTimestamp.IsZero() {
			return bad("the initial position AT_TIMESTAMP needs a timestamp: use WithStartTimestamp(t)")
		}
	default:
		return bad("initial position %q is not one of TRIM_HORIZON, LATEST, AT_TIMESTAMP", c.position)
	}
	return nil
}

// startupTimeout bounds the start-up's shard sync, retries included, so
// that an endpoint with nothing listening fails Run within a minute: five
// lease durations, at most 45 seconds.
func (c config) startupTimeout() time.Duration { return min(45*time.Second, 5*c.leaseDuration) }

// A held lease's life is bounded on every path, whatever the handler or the
// network does:
//
//   - cut-off: the holder stops handing batches, and cancels the handler's
//     context, a margin before a lease duration has passed since its last
//     successful write was sent (cutoffMargin);
//   - grace: once the lease's context is cancelled or the runner is asked to
//     stop (handoff, shutdown), the handler has the grace period to return;
//     after it the runner abandons the handler (its goroutine is left
//     behind), stops renewing and writes nothing more, so the lease expires
//     for the others and Run can return;
//   - calls: every call on the network has a deadline (callTimeout,
//     readTimeout).

// cutoffDivisor sets the cut-off margin: a holder stops a tenth of a lease
// duration before the lease could expire for a taker, which covers monotonic
// clocks running at slightly different rates and the time a handler takes to
// notice its cancelled context.
const cutoffDivisor = 10

// cutoff returns when a lease whose last successful write was sent at sent
// stops being handed batches.
func (c config) cutoff(sent time.Time) time.Time {
	return sent.Add(c.leaseDuration - c.leaseDuration/cutoffDivisor)
}

// tidyReserve is the part of the shutdown timeout kept for withdrawing
// handoff requests, releasing rows handed over late and removing the worker
// row, after the runners had the rest.
func (c config) tidyReserve() time.Duration {
	return min(c.renewInterval, c.shutdownTimeout/4)
}

// grace is how long a stopping runner (handoff, shutdown, lost lease) waits
// for its handler and its final writes.
func (c config) grace() time.Duration { return c.shutdownTimeout - c.tidyReserve() }

// callTimeout bounds each call of the coordinator to the lease store
// (listings, acquires, handoff requests, worker rows): half a lease
// duration, so that a slow but working table still answers while a hung
// call cannot stall take rounds for long. The keeper's writes have the renew
// interval.
func (c config) callTimeout() time.Duration { return max(c.renewInterval, c.leaseDuration/2) }

// readTimeout bounds each call to Kinesis: a hung GetRecords must not keep a
// lease renewed while its shard reads nothing. Enhanced fan-out's calls have
// it too (registration, and SubscribeToShard until it answers).
func (c config) readTimeout() time.Duration { return c.leaseDuration }

// subscriptionHeartbeat is the longest Kinesis stays silent on an open
// SubscribeToShard subscription: it sends an event, empty if need be, at
// least every five seconds.
const subscriptionHeartbeat = 5 * time.Second

// silenceTimeout is how long an open subscription may deliver no event at
// all (not even an empty one) before the reader closes it and subscribes
// again: a lease duration, and at least two of the service's heartbeats, so
// that a quiet shard is not resubscribed over and over.
func (c config) silenceTimeout() time.Duration {
	return max(c.leaseDuration, 2*subscriptionHeartbeat)
}

// WithShardHooks sets hooks called as this worker starts and stops reading
// each shard. Default: none.
func WithShardHooks(h ShardHooks) Option { return func(c *config) { c.hooks = h } }

// WithMaxAttempts bounds how often a failing batch is handed to the handler.
// After n failed calls the batch is narrowed down by halves, in order: each
// half is handed over once, a half that succeeds is checkpointed, a half that
// fails is halved again, and a single record is tried alone until it has
// failed n times. Such a record goes to the WithDeadLetter callback before
// the records after it are handed over, and the checkpoint moves past it
// once the callback returns nil. One failing record in a batch of b costs
// about 2n + 2·log2(b) handler calls; every other record is handled once.
// Each dead-lettered record is logged at Error level with its shard and
// sequence number and counted in Stats.RecordsDeadLettered and the
// shardlease.records.deadlettered metric.
//
// Default 0: retry without a limit, so that no record is ever skipped; the
// shardlease.retry.stuck and shardlease.retry.ages_out_in gauges and an
// Error log line (from the third failure in a row, then once a minute) then
// tell how long a shard has been stuck, on which sequence number, and how
// long until that record leaves the stream. n > 0 needs
// WithDeadLetter, and cannot be combined with WithManualCheckpoints.
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithDeadLetter sets the callback that receives the records the handler
// failed on WithMaxAttempts times. It needs WithMaxAttempts.
func WithDeadLetter(fn DeadLetterFunc) Option { return func(c *config) { c.deadLetter = fn } }

// checkRetry validates the retry options; bad formats an ErrInvalidConfig.
func checkRetry(c *config, bad func(format string, args ...any) error) error {
	switch {
	case c.maxAttempts < 0:
		return bad("WithMaxAttempts(%d): use a positive number of attempts, or 0 to retry without a limit", c.maxAttempts)
	case c.maxAttempts > 0 && c.deadLetter == nil:
		return bad("WithMaxAttempts(%d) needs WithDeadLetter(fn): records that fail every attempt must go somewhere, they are never dropped", c.maxAttempts)
	case c.maxAttempts == 0 && c.deadLetter != nil:
		return bad("WithDeadLetter needs WithMaxAttempts(n): without a limit a failing batch is retried forever and nothing reaches the callback")
	case c.maxAttempts > 0 && c.manualCheckpoint:
		return bad("WithMaxAttempts cannot be combined with WithManualCheckpoints: the consumer cannot move a checkpoint past a dead-lettered record that the handler checkpoints itself; retry inside the handler instead")
	}
	return nil
}

// WithEnhancedFanOut reads each held shard with SubscribeToShard through the
// registered stream consumer consumerName instead of polling with
// GetRecords. Run registers the consumer if it is not registered yet and
// waits until it is ACTIVE; workers starting together share one registration.
// Records are pushed as they arrive, and the consumer has a read allowance of
// its own (2 MB/s per shard) instead of sharing 5 GetRecords calls a second
// with every other reader of the stream. Leases, checkpoints, handoffs and
// every guarantee are the same as with polling. The client must implement
// FanOutAPI (*kinesis.Client does). A registered consumer is billed by the
// hour for each shard, whether read or not: deregister it (see the
// shardlease CLI) when no longer used.
func WithEnhancedFanOut(consumerName string) Option {
	return func(c *config) { c.fanOutName, c.fanOutSet = consumerName, true }
}

// consumerNamePattern is what Kinesis accepts as a stream consumer name.
var consumerNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// WithKeyConcurrency hands each shard's records to n handler calls at once,
// one lane per call: records of one partition key always go to the same
// lane, in order, so per-key order holds (across splits and merges too);
// records of different keys are handled out of order. The checkpoint is the
// watermark, the last record below which every record is done; retries,
// narrowing and dead letters hold up only their lane, and at most
// WithMaxInFlight records wait beyond the watermark. A handoff or shutdown
// finishes the records the lanes hold within the grace period. Records
// handled above the watermark when a worker crashes or a lane is still
// failing at a stop are handed again (at most the records in flight). The
// lanes share the stop hook: one OnStart and one OnStop per shard. Default
// 1 (one call at a time); at most 256. Not with WithManualCheckpoints.
func WithKeyConcurrency(n int) Option { return func(c *config) { c.keyConcurrency = n } }

// WithMaxInFlight bounds the records of a shard dealt to lanes
// (WithKeyConcurrency) and not yet passed by the watermark: a lane stuck on
// a record holds the shard's reading once n records wait. Default 1,000.
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// defaultMaxInFlight is WithMaxInFlight's default.
const defaultMaxInFlight = 1000

// inFlight returns the bound on records in flight per shard.
func (c config) inFlight() int {
	if c.maxInFlight > 0 {
		return c.maxInFlight
	}
	return defaultMaxInFlight
}

// WithBatchWindow holds a shard's records back until at least records of
// them are held or the oldest has waited wait (since it was read), then
// hands all of them to the handler as one batch: fewer calls for sinks
// that pay per call. A handoff, a shutdown or a lost lease never waits for
// the window: records held back are dropped, never handed and never
// checkpointed, and the next holder reads them again. Renewals are not
// held back. The last batch of a closed shard is handed at once. Default:
// no window.
func WithBatchWindow(records int, wait time.Duration) Option {
	return func(c *config) { c.windowRecords, c.windowWait = records, wait }
}

// checkLanes validates WithKeyConcurrency, WithMaxInFlight and
// WithBatchWindow; bad formats an ErrInvalidConfig.
func checkLanes(c *config, bad func(format string, args ...any) error) error {
	switch {
	case c.keyConcurrency < 0 || c.keyConcurrency > 256:
		return bad("WithKeyConcurrency(%d): use 1 to 256 handler calls per shard (1 is one at a time)", c.keyConcurrency)
	case c.keyConcurrency > 1 && c.manualCheckpoint:
		return bad("WithKeyConcurrency cannot be combined with WithManualCheckpoints: the checkpoint is the lanes' watermark, which a handler's own checkpoint of one lane's record would pass over records other lanes still hold")
	case c.maxInFlight < 0:
		return bad("WithMaxInFlight(%d): use a positive bound, or leave it out for %d", c.maxInFlight, defaultMaxInFlight)
	case c.maxInFlight > 0 && c.keyConcurrency <= 1:
		return bad("WithMaxInFlight needs WithKeyConcurrency(n) with n > 1: without lanes a shard has one batch in flight")
	case c.windowRecords < 0 || c.windowRecords == 0 && c.windowWait != 0:
		return bad("WithBatchWindow(%d, %v): use at least 1 record", c.windowRecords, c.windowWait)
	case c.windowRecords > 0 && c.windowWait <= 0:
		return bad("WithBatchWindow(%d, %v): the wait must be positive", c.windowRecords, c.windowWait)
	}
	return nil
}
