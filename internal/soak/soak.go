// Package soak runs several shardlease consumers against one stream for a
// while, injects faults at random (reproducibly from a seed), and checks at
// the end that the library kept its promises: nothing lost, checkpoints
// never backwards, no stale holder's write accepted, partition-key order
// kept across a split and a merge, and every duplicate explained.
//
// Some records are poison: the handler always fails on them, and the
// consumers hand them to their dead-letter callback after a few attempts.
// A dead-lettered record counts as handled (the user chose to set it aside),
// at its place in partition-key order.
//
// With Config.Sessions every worker keeps a session (one keep a renew
// interval keeps all its leases), and the faults add zone losses, takers
// crashing between a fence and their claims, and same-id restarts
// (sessions.go).
//
// It runs in two worlds: "fake" (the in-process Kinesis fake and
// MemoryStore; run it inside a testing/synctest bubble for fake time) and
// "emulator" (kinesalite and DynamoStore on dynalite). TestSoak runs both
// briefly; internal/soak/cmd/soak runs one for as long as asked.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
)

// Kinesis is what the soak needs of a Kinesis client: the consumer's calls
// plus the producer's, the resharding ones and DescribeStreamSummary (the
// workers that may describe the stream do). *kinesis.Client and
// *shardleasetest.Kinesis have them.
type Kinesis interface {
	shardlease.KinesisAPI
	shardlease.StreamDescriber
	CreateStream(ctx context.Context, params *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
	PutRecord(ctx context.Context, params *kinesis.PutRecordInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error)
	SplitShard(ctx context.Context, params *kinesis.SplitShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error)
	MergeShards(ctx context.Context, params *kinesis.MergeShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error)
}

// Config is one soak run.
type Config struct {
	// Seed makes the schedule of crashes, pauses, reshards, clock skews and
	// per-call faults reproducible.
	Seed uint64
	// Workers is how many consumers run at once; Shards the stream's shard
	// count at the start.
	Workers, Shards int
	// Duration is how long faults are injected and records produced. A drain
	// without faults follows, until every record is handled.
	Duration time.Duration
	// Rate is records produced per second, spread over Keys partition keys.
	Rate, Keys int
	// FaultRate is the probability that any one DynamoDB or Kinesis call of
	// a worker fails. Default 0.03.
	FaultRate float64
	// MaxSkew bounds each worker's wall-clock skew. Default 1h.
	MaxSkew time.Duration
	// Lease is the consumers' lease duration; the other timings follow from
	// it. Default 2s.
	Lease time.Duration
	// Drain bounds the wait for every record after the faults stop.
	// Default 30 lease durations.
	Drain time.Duration
	// PoisonEvery makes every PoisonEvery-th record produced one the
	// handler always fails on (see MaxAttempts). Default 50; negative for
	// none.
	PoisonEvery int

	// FanOut, when set, makes the consumers read with enhanced fan-out
	// through the stream consumer of that name (WithEnhancedFanOut) instead
	// of polling; Kinesis must then implement shardlease.FanOutAPI.
	FanOut string

	// Group, when set, runs each worker as one shardlease.Group over
	// three streams named Stream+"-a", "-b" and "-c", read from a polled
	// source (GroupConfig.Source) every SourceInterval (default 2s): while
	// it runs, a fourth, Stream+"-d", is added to the source and "-c" is
	// removed (group.go).
	Group          bool
	SourceInterval time.Duration

	// Mixed, when set, runs one lease table under workers of different
	// kinds: Consumers of one stream, and Groups of two names with fixed
	// sets or sets from polled sources, over three streams named Stream+"-1",
	// "-2" and "-3"; the sources' sets change while the faults run, and a
	// restarted slot may come back as another kind (mixed.go). It needs four
	// workers or more, and excludes Group.
	Mixed bool

	// Sessions, when set, runs every worker WithSessions(true), and adds
	// zone losses, takers dying between a fence and their claims, and
	// same-id restarts to the faults (sessions.go).
	Sessions bool

	// Kinesis is the service the stream is created in.
	Kinesis Kinesis
	// Dynamo is the DynamoDB service of the emulator world; when nil, the
	// consumers share a MemoryStore (the fake world).
	Dynamo shardlease.DynamoDBAPI
	// Stream and Table name the stream and lease table to create.
	Stream, Table string

	// Log receives the library's logs (default: none); Events a line per
	// injected crash, pause and reshard (default: none).
	Log    *slog.Logger
	Events io.Writer
}

func (c *Config) defaults() error {
	if c.Workers < 1 || c.Shards < 1 || c.Duration <= 0 {
		return fmt.Errorf("soak: need workers >= 1, shards >= 1 and a positive duration; got %d, %d, %v", c.Workers, c.Shards, c.Duration)
	}
	if c.Kinesis == nil || c.Stream == "" {
		return errors.New("soak: Kinesis and Stream must be set")
	}
	if c.Dynamo != nil && c.Table == "" {
		return errors.New("soak: Table must be set with Dynamo")
	}
	if _, ok := c.Kinesis.(shardlease.FanOutAPI); c.FanOut != "" && !ok {
		return fmt.Errorf("soak: FanOut needs a Kinesis with the enhanced fan-out calls (shardlease.FanOutAPI); %T has not", c.Kinesis)
	}
	if c.Mixed && (c.Group || c.Workers < 4) {
		return fmt.Errorf("soak: Mixed needs at least 4 workers and excludes Group; got %d workers, Group %v", c.Workers, c.Group)
	}
	if c.Rate <= 0 {
		c.Rate = 50
	}
	if c.Keys <= 0 {
		c.Keys = 64
	}
	if c.FaultRate == 0 {
		c.FaultRate = 0.03
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = time.Hour
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Second
	}
	if c.Drain <= 0 {
		c.Drain = 30 * c.Lease
	}
	if c.PoisonEvery == 0 {
		c.PoisonEvery = 50
	}
	if c.SourceInterval <= 0 {
		c.SourceInterval = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Events == nil {
		c.Events = io.Discard
	}
	return nil
}

// World names the world a config runs in.
func (c *Config) World() string {
	if c.Dynamo != nil {
		return "emulator"
	}
	return "fake"
}

func (c *Config) mode() string {
	if c.FanOut != "" {
		return "fan-out"
	}
	return "polling"
}

// Event kinds counted in the result table.
const (
	EvCrash = "worker crash (no release, no final checkpoint)"
	// EvCrashCoordinator crashes the worker that runs the lowest shard's
	// lease: the one coordinating the others.
	EvCrashCoordinator = "coordinator crash (the holder of the first lease)"
	EvRestart          = "worker restart"
	EvPause            = "pause longer than the lease (frozen mid-batch)"
	EvSplit            = "shard split"
	EvMerge            = "shard merge"
	EvPoison           = "poison record produced (the handler always fails on it)"
	EvSlow             = "batch longer than the lease (the handler honours its context)"
	EvDeaf             = "handler ignoring its context (busy 1.5 leases)"
	EvShared           = "two workers started with one owner id"
	EvMixed            = "worker with twice the lease duration"
)

// slowEvery and deafEvery: while faults are on, one batch in slowEvery takes
// longer than the lease (the handler returns when its context is cancelled),
// and one in deafEvery ignores its context.
const (
	slowEvery = 40
	deafEvery = 200
)

// MaxAttempts is how often the consumers hand a failing batch to the
// handler before they narrow it down and dead-letter the poison records.
const MaxAttempts = 3

// poisonMark ends the payload of a poison record, after its id.
const poisonMark = "!poison"

var errPoison = errors.New("soak: poison record")

// counter is a set of named counts.
type counter struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counter) add(name string, n int64) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[name] += n
	c.mu.Unlock()
}

func (c *counter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// incarnation is one run of a worker slot: a process, from start to crash
// or stop.
type incarnation struct {
	id        string
	slot      int
	owner     string // the owner id it was started with (WithOwnerID)
	skew      time.Duration
	crashed   atomic.Bool
	paused    atomic.Bool
	pauseNext atomic.Int64 // a pause of this many ns, at the next batch
	freeze    freezer
	scansFail atomic.Bool // its listings fail (EvListsFail)
	leaving   atomic.Bool // leaving gracefully, drained (drain.go) or shut down (EvJointLeave): its restart is claimed
	consumer  worker
	cancel    context.CancelFunc
	done      chan error
	// troubled is set for rows ("stream:shard") on which a write of this
	// incarnation was refused or failed: it may have lost the lease.
	mu        sync.Mutex
	troubled  map[string]bool
	runErr    error
	startedAt time.Time
	hrng      *rand.Rand // the handler's choices (under mu)
	frng      *rand.Rand // the store's fault choices (under mu): a taker's death (sessions.go)
}

// running is a handler call in progress, from entry to exit, for the
// overlaps invariant.
type running struct {
	by     *incarnation
	deaf   bool // ignores its context
	pauses int  // the worker's freezes when the call was entered
}

// handling is one record handed to a handler.
type handling struct {
	by         *incarnation
	stream     string
	shard      string
	seq        string
	at         time.Time // when the handler was entered
	afterPause bool      // handled by a frozen worker once it woke up
	dead       bool      // handed to the dead-letter callback
	deaf       bool      // by a handler that ignored its context
}

type soak struct {
	cfg      Config
	rng      *rand.Rand // the schedule; used by the scheduler goroutine only
	counts   counter
	audit    *auditor
	memory   *shardlease.MemoryStore
	faultsOn atomic.Bool
	// faultsMu orders turning the faults off with the restarts a worker's
	// own call starts (takerDied): none starts once they are off.
	faultsMu  sync.Mutex
	sessAudit sessionAudit // sessions.go
	units     packedUnits  // sessions_units.go
	meter     meter
	zones     zones
	start     time.Time
	untaken   untaken   // liveness.go
	sink      sink      // where handlers apply effects, fenced (sink.go)
	sinkSt    sinkState // what the sink acknowledged

	mu        sync.Mutex
	slots     []*incarnation
	all       []*incarnation
	gens      []int
	ownerNext []string // per slot: the owner id its next incarnation starts with, "" for its own (sessions.go)
	restarts  sync.WaitGroup
	operator  sync.WaitGroup        // the operator's edits of the table
	handled   map[string][]handling // id → handlings
	keyOrder  map[string][]string   // key → ids in first-handling order
	produced  []string              // ids in write order
	keyOf     map[string]string     // id → partition key
	seqOf     map[string]string
	retried   map[string]bool      // ids whose put was retried
	putAt     map[string]time.Time // id → when its put returned
	shardOfID map[string]string    // id → the shard its put went to
	rewinds   []rewound            // the operator's rewinds (rewind.go)
	nonHolder []string             // batches handed to a worker not holding the lease
	toolHeld  int                  // of those left out: by the holder an operator's tool took the row from, before its cut-off
	badDead   []string             // records dead-lettered that are not poison
	unknown   int                  // handled records with an id never produced

	// running handler calls by row ("stream:shard"); overlaps counts calls
	// entered while another one of the same shard of the same stream ran (deafOverlaps: one of them ignored
	// its context, which the library cannot prevent).
	running        map[string][]*running
	overlaps       []string
	overlapsOf     map[string]int // stream → overlaps
	deafOverlaps   int
	frozenOverlaps int         // the other call's worker froze during it
	stalled        []string    // held shards still showing lag once drained (lag.go)
	grp            *groupState // the group mode's (group.go); nil otherwise
	mix            *mixedState // the mixed mode's (mixed.go); nil otherwise
}

// Run runs one soak and returns its result. An error means the soak could
// not run (setup failed); the library's failures are in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &soak{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x50a4)),
		audit:   newAuditor(cfg.Lease),
		handled: map[string][]handling{}, keyOrder: map[string][]string{}, running: map[string][]*running{},
		keyOf: map[string]string{}, seqOf: map[string]string{}, retried: map[string]bool{}, overlapsOf: map[string]int{}, putAt: map[string]time.Time{}, shardOfID: map[string]string{},
	}
	s.audit.sess = &s.sessAudit
	if cfg.Group {
		return s.runGroup(ctx)
	}
	if cfg.Mixed {
		return s.runMixed(ctx)
	}
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	stopWatch := s.startWatched(ctx, s.watchUntaken)
	s.withFaults(ctx, s.produce, s.chaos)

	drained := s.drain(ctx)
	stopWatch()
	live := s.liveSlots()
	stalled := s.stallsAtRest(ctx, live, drained)
	stopWorkers(live)
	s.mu.Lock()
	s.stalled = stalled
	s.mu.Unlock()
	return s.result(ctx, drained), nil
}

// startWorkers starts the run's clock, turns the faults on and launches
// the first incarnation of every slot.
func (s *soak) startWorkers() {
	s.start = time.Now()
	s.faultsOn.Store(true)
	s.slots = make([]*incarnation, s.cfg.Workers)
	s.gens = make([]int, s.cfg.Workers)
	s.ownerNext = make([]string, s.cfg.Workers)
	for i := range s.cfg.Workers {
		s.launch(i)
	}
}

// startWatched starts the workers and watch, the mode's check of the fleet
// while it runs; the function returned stops watch and waits for it.
func (s *soak) startWatched(ctx context.Context, watch func(context.Context)) (stop func()) {
	s.startWorkers()
	var wg sync.WaitGroup
	watchCtx, cancel := context.WithCancel(ctx)
	wg.Go(func() { watch(watchCtx) })
	wg.Go(func() { s.meter.run(watchCtx, s) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// liveSlots returns each slot's latest incarnation.
func (s *soak) liveSlots() []*incarnation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.slots)
}

// withFaults runs produce and chaos for the run's duration, then waits for
// the operator's edits, turns the faults off and waits for the restarts
// the chaos started.
func (s *soak) withFaults(ctx context.Context, produce, chaos func(context.Context)) {
	chaosCtx, stopChaos := context.WithTimeout(ctx, s.cfg.Duration)
	defer stopChaos()
	var bg sync.WaitGroup
	bg.Go(func() { produce(chaosCtx) })
	bg.Go(func() { chaos(chaosCtx) })
	<-chaosCtx.Done()
	bg.Wait()
	s.operator.Wait()
	s.faultsMu.Lock()
	s.faultsOn.Store(false)
	s.faultsMu.Unlock()
	s.restarts.Wait()
	s.mu.Lock()
	n := len(s.produced)
	s.mu.Unlock()
	fmt.Fprintf(s.cfg.Events, "%6.1fs faults off, producer stopped after %d records; draining\n", s.since(), n)
}

// stopWorkers stops the live incarnations and waits for their Run to
// return.
func stopWorkers(live []*incarnation) {
	for _, inc := range live {
		inc.cancel()
	}
	for _, inc := range live {
		inc.runErr = <-inc.done
	}
}

func (s *soak) since() float64 { return time.Since(s.start).Seconds() }

func (s *soak) setup(ctx context.Context) error {
	cfg := s.cfg
	if err := s.setupStore(ctx); err != nil {
		return err
	}
	if _, err := cfg.Kinesis.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(cfg.Stream), ShardCount: aws.Int32(int32(cfg.Shards))}); err != nil {
		return fmt.Errorf("soak: create stream %s: %w", cfg.Stream, err)
	}
	return s.untilActive(ctx, func() error {
		_, err := cfg.Kinesis.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(cfg.Stream)})
		return err
	})
}

// setupStore makes the table (or the MemoryStore) and the sink.
func (s *soak) setupStore(ctx context.Context) error {
	cfg := s.cfg
	if cfg.Dynamo != nil {
		creator, ok := cfg.Dynamo.(shardlease.CreateTableAPI)
		if !ok {
			return fmt.Errorf("soak: the DynamoDB client %T cannot create the table %s", cfg.Dynamo, cfg.Table)
		}
		if err := shardlease.CreateTable(ctx, creator, cfg.Table); err != nil {
			return err
		}
	} else {
		s.memory = shardlease.NewMemoryStore()
		s.memory.OnWrite(s.audit.onWrite)
	}
	return s.newSink(ctx)
}

// untilActive retries a stream call while the stream is being created or
// resharded.
func (s *soak) untilActive(ctx context.Context, call func() error) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		err := call()
		var inUse *kinesistypes.ResourceInUseException
		var limit *kinesistypes.LimitExceededException
		var nf *kinesistypes.ResourceNotFoundException
		if err == nil || !errors.As(err, &inUse) && !errors.As(err, &limit) && !errors.As(err, &nf) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("soak: stream %s not active: %w (%w)", s.cfg.Stream, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// launch starts a new incarnation in slot.
func (s *soak) launch(slot int) {
	cfg := s.cfg
	s.mu.Lock()
	s.gens[slot]++
	gen := s.gens[slot]
	s.mu.Unlock()
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(slot)<<32|uint64(gen)))
	inc := &incarnation{
		id: fmt.Sprintf("w%d-%d", slot, gen), slot: slot,
		skew:     time.Duration((rng.Float64()*2 - 1) * float64(cfg.MaxSkew)),
		done:     make(chan error, 1),
		troubled: map[string]bool{}, startedAt: time.Now(),
		hrng: rand.New(rand.NewPCG(cfg.Seed^3, uint64(slot)<<32|uint64(gen))),
		frng: rand.New(rand.NewPCG(cfg.Seed^5, uint64(slot)<<32|uint64(gen))),
	}
	rate := func() float64 {
		if s.faultsOn.Load() {
			return cfg.FaultRate
		}
		return 0
	}
	mk := func(service string, stream uint64) *injector {
		return &injector{service: service, rate: rate, counts: &s.counts, rng: rand.New(rand.NewPCG(cfg.Seed^stream, uint64(slot)<<32|uint64(gen))), crashed: &inc.crashed, freeze: &inc.freeze, scansFail: &inc.scansFail}
	}
	store := s.storeFor(inc, mk("dynamodb", 1))
	s.attachSink(inc, mk("sink dynamodb", 3))
	kin, mode := s.kinesisFor(&faultKinesis{next: cfg.Kinesis, in: mk("kinesis", 2)}, slot, gen)
	lease := cfg.leaseOf(slot)
	owner := s.ownerOf(inc, slot, gen, lease)
	if !cfg.Mixed { // the mixed mode caps another slot (mixed.go)
		mode = append(mode, s.capped(slot)...)
	}
	take := lease * 3 / 20
	mode = append(mode, laneOptions(slot)...)
	opts := append(mode,
		shardlease.WithOwnerID(owner),
		shardlease.WithLeaseDuration(lease),
		shardlease.WithRenewInterval(lease/3),
		shardlease.WithTakeInterval(take),
		shardlease.WithIdlePollInterval(lease/40),
		shardlease.WithShardSyncInterval(5*take),
		shardlease.WithRetryBackoff(take/10, take),
		shardlease.WithShutdownTimeout(lease),
		shardlease.WithWallClock(func() time.Time { return time.Now().Add(inc.skew) }),
		shardlease.WithLogger(cfg.Log.With("worker", inc.id)),
		shardlease.WithMaxAttempts(MaxAttempts),
		shardlease.WithDeadLetter(s.deadLetter(inc)),
		shardlease.WithSessions(cfg.Sessions),
	)
	c, err := s.newWorker(inc, gen, kin, store, opts)
	if err != nil {
		panic(err) // the options above are valid for any positive lease
	}
	inc.consumer = c
	ctx, cancel := context.WithCancel(context.Background())
	inc.cancel = cancel
	go func() { inc.done <- c.Run(ctx) }()
	s.mu.Lock()
	s.slots[slot] = inc
	s.all = append(s.all, inc)
	s.mu.Unlock()
	if gen > 1 {
		s.counts.add(EvRestart, 1)
	}
	fmt.Fprintf(s.cfg.Events, "%6.1fs start %s as %s (wall clock %+v)\n", s.since(), inc.id, owner, inc.skew.Round(time.Second))
}

// ownerOf returns the owner id inc of slot runs under, and sets it: its own
// id; slot 1 shares slot 0's, as two pods with a reused name would; and a
// same-id restart (sessions.go) reuses the one it was given.
func (s *soak) ownerOf(inc *incarnation, slot, gen int, lease time.Duration) string {
	owner := inc.id
	switch {
	case slot == 1:
		owner = fmt.Sprintf("w0-%d", gen)
		s.counts.add(EvShared, 1)
	case lease != s.cfg.Lease:
		s.counts.add(EvMixed, 1)
	}
	s.mu.Lock()
	if o := s.ownerNext[slot]; o != "" {
		owner, s.ownerNext[slot] = o, ""
	}
	s.mu.Unlock()
	inc.owner = owner
	return owner
}

// newWorker returns inc's worker of the soak's mode: a Consumer, a Group,
// or the mixed mode's kind for its slot.
func (s *soak) newWorker(inc *incarnation, gen int, kin shardlease.KinesisAPI, store shardlease.LeaseStore, opts []shardlease.Option) (worker, error) {
	switch {
	case s.cfg.Mixed:
		return s.newMixedWorker(inc, gen, kin, store, opts)
	case s.cfg.Group:
		return s.newGroupWorker(inc, kin, store, opts)
	}
	return shardlease.NewConsumer(kin, store, s.cfg.Stream, s.handler(inc), opts...)
}

// leaseOf returns the lease duration of slot's workers: the last slot runs
// with twice the lease duration, as a rolling deploy that changes it would.
func (c *Config) leaseOf(slot int) time.Duration {
	if slot >= 2 && slot == c.Workers-1 {
		return 2 * c.Lease
	}
	return c.Lease
}

// longestLease is the longest lease duration of the fleet: the last slot's.
func (c *Config) longestLease() time.Duration { return c.leaseOf(c.Workers - 1) }

// storeFor returns the lease store of an incarnation: the world's store,
// through the audit, then the faults of in, then the record of trouble.
func (s *soak) storeFor(inc *incarnation, in *injector) shardlease.LeaseStore {
	var store shardlease.LeaseStore
	if s.cfg.Dynamo != nil {
		audited := &auditDynamo{DynamoDBAPI: s.cfg.Dynamo, a: s.audit, by: inc.id}
		ds, err := shardlease.NewDynamoStore(&faultDynamo{next: audited, in: in}, s.cfg.Table)
		if err != nil {
			panic(err) // the table name was validated by CreateTable
		}
		store = ds
	} else {
		store = &faultStore{next: &auditStore{LeaseStore: s.memory, WorkerStore: s.memory, a: s.audit, by: inc.id}, in: in}
	}
	return &troubleStore{LeaseStore: store, inc: inc, s: s}
}

// troubleStore marks the shards on which a write of the incarnation failed:
// the lease may be lost there, which explains a record handled again. It is
// the outermost layer: the holder's writes it passes on carry when they
// were sent (withHolderWrite), for the sessions' audit (sessions.go).
type troubleStore struct {
	shardlease.LeaseStore
	inc *incarnation
	s   *soak
}

func (t *troubleStore) mark(l shardlease.Lease, err error) {
	if err != nil {
		t.inc.mu.Lock()
		t.inc.troubled[l.Key.String()] = true
		t.inc.mu.Unlock()
	}
}

func (t *troubleStore) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	got, err := t.LeaseStore.Renew(withHolderWrite(ctx, "renew", t.inc, l), l, e)
	t.mark(l, err)
	return got, err
}

func (t *troubleStore) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	got, err := t.LeaseStore.Checkpoint(withHolderWrite(ctx, "checkpoint", t.inc, l), l, cp, sub, e)
	t.mark(l, err)
	return got, err
}

func (t *troubleStore) Release(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	got, err := t.LeaseStore.Release(withHolderWrite(ctx, "release", t.inc, l), l)
	t.mark(l, err)
	return got, err
}

// The calls the consumer finds by type assertion are passed on: both stores
// under a troubleStore keep worker rows, list eventually and carry notes.

func (t *troubleStore) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	return t.LeaseStore.(shardlease.WorkerStore).ListWithWorkers(ctx, stream)
}

func (t *troubleStore) Heartbeat(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	return t.LeaseStore.(shardlease.WorkerStore).Heartbeat(ctx, stream, owner)
}

// RemoveWorker records a session row removed as a fence of its session.
func (t *troubleStore) RemoveWorker(ctx context.Context, w shardlease.Worker) (bool, error) {
	removed, err := t.LeaseStore.(shardlease.WorkerStore).RemoveWorker(ctx, w)
	if err == nil && removed && t.s != nil {
		t.s.sessAudit.fence(w)
	}
	return removed, err
}

func (t *troubleStore) ListWithWorkersEventually(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	return t.LeaseStore.(shardlease.EventualLister).ListWithWorkersEventually(ctx, stream)
}

func (t *troubleStore) Note(ctx context.Context, l shardlease.Lease, note string) (shardlease.Lease, error) {
	return t.LeaseStore.(shardlease.NoteStore).Note(ctx, l, note)
}

func (t *troubleStore) GetEventually(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	return t.LeaseStore.(shardlease.NoteStore).GetEventually(ctx, k)
}

// handler records what an incarnation handles. A crashed incarnation
// handles nothing; a paused one freezes mid-batch, then goes on with the
// batch in hand as a process that woke up would.
func (s *soak) handler(inc *incarnation) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		if inc.crashed.Load() {
			return errCrashed
		}
		key := shardlease.LeaseKey{Stream: b.Stream, Shard: b.ShardID}.String()
		s.checkHolder(inc, key, b)
		for _, r := range b.Records {
			if strings.HasSuffix(string(r.Data), poisonMark) {
				return fmt.Errorf("record %s: %w", r.SequenceNumber, errPoison)
			}
		}
		at := time.Now()
		// A handler entered while another one froze the process is frozen
		// mid-batch too, and goes on with its batch when the process wakes.
		woke := inc.freeze.frozen() != nil
		inc.freeze.wait()
		if d := inc.pauseNext.Swap(0); d > 0 {
			woke = true
			inc.paused.Store(true)
			s.counts.add(EvPause, 1)
			fmt.Fprintf(s.cfg.Events, "%6.1fs pause %s for %v mid-batch on %s\n", s.since(), inc.id, time.Duration(d), b.ShardID)
			inc.freeze.pause(time.Duration(d))
			if inc.crashed.Load() {
				return errCrashed
			}
		}
		// Slow batches and handlers that ignore their context, while the
		// faults are on.
		var slow, deaf bool
		if s.faultsOn.Load() && !woke {
			inc.mu.Lock()
			slow, deaf = inc.hrng.IntN(slowEvery) == 0, inc.hrng.IntN(deafEvery) == 0
			inc.mu.Unlock()
		}
		if !woke {
			call := s.enter(inc, b.Stream, b.ShardID, deaf)
			defer s.exit(key, call)
		}
		pauses := inc.freeze.count()
		switch {
		case deaf:
			s.counts.add(EvDeaf, 1)
			t := time.NewTimer(s.cfg.Lease * 3 / 2)
			<-t.C // ignores ctx
		case slow:
			s.counts.add(EvSlow, 1)
			t := time.NewTimer(s.cfg.Lease * 3 / 2)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err() // not processed: the next holder reads it again
			}
		}
		if inc.freeze.count() != pauses {
			// The process froze during the call: it goes on once it wakes,
			// like a frozen worker with its batch in hand.
			inc.freeze.wait()
			woke = true
		}
		if err := s.applyToSink(ctx, inc, b); err != nil {
			return err // refused: a newer holder wrote; not handled here
		}
		s.handledBatch(b, handling{by: inc, stream: b.Stream, shard: b.ShardID, at: at, afterPause: woke, deaf: deaf})
		return nil
	}
}

// handledBatch records the records of b as handled, each as h with its
// sequence number.
func (s *soak) handledBatch(b *shardlease.Batch, h handling) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		id := string(r.Data)
		if _, ok := s.keyOf[id]; !ok {
			s.unknown++
			continue
		}
		if len(s.handled[id]) == 0 {
			s.keyOrder[r.PartitionKey] = append(s.keyOrder[r.PartitionKey], id)
		}
		h.seq = r.SequenceNumber
		s.handled[id] = append(s.handled[id], h)
	}
}

// checkHolder records a batch of key handed to inc while the row names
// another owner. A holder an operator's tool took the row from (rewind or
// reset with handover) goes on until its next write fails, at the latest
// its cut-off, a lease duration after the take: its batches until then are
// counted apart. The tool leaves the row held that long, so no other
// handler runs meanwhile (overlaps).
func (s *soak) checkHolder(inc *incarnation, key string, b *shardlease.Batch) {
	me := inc.consumer.OwnerID()
	owner, to, taken, at := s.audit.holder(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case owner == me || to == me:
	case taken == me && time.Since(at) <= s.cfg.leaseOf(inc.slot):
		s.toolHeld++
	default:
		s.nonHolder = append(s.nonHolder, fmt.Sprintf("%s handed %d records of %s from %s while the row's owner was %q (%s)",
			inc.id, len(b.Records), b.ShardID, b.Records[0].SequenceNumber, owner, s.audit.lastWrites(key, 3)))
	}
}

// enter records a handler call of stream's shard entering, and counts an
// overlap if another one of that shard of that stream runs.
func (s *soak) enter(inc *incarnation, stream, shard string, deaf bool) *running {
	key := shardlease.LeaseKey{Stream: stream, Shard: shard}.String()
	call := &running{by: inc, deaf: deaf, pauses: inc.freeze.count()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enteredAfterRemoval(inc, stream, shard, deaf)
	for _, other := range s.running[key] {
		if other.by == inc && withLanes(inc.slot) {
			continue // lanes of one worker run at once by design
		}
		if other.deaf || deaf {
			s.deafOverlaps++
			continue
		}
		if other.by.freeze.frozen() != nil || other.by.freeze.count() != other.pauses {
			// A frozen process goes on with its batch in hand when it
			// wakes: no library can stop it (see the pauses).
			s.frozenOverlaps++
			continue
		}
		s.overlaps = append(s.overlaps, fmt.Sprintf("%s entered a handler of %s at %.1fs while %s's ran", inc.id, key, s.since(), other.by.id))
		s.overlapsOf[stream]++
	}
	s.running[key] = append(s.running[key], call)
	return call
}

// exit records a handler call of a shard ("stream:shard") returning.
func (s *soak) exit(key string, call *running) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[key] = slices.DeleteFunc(s.running[key], func(r *running) bool { return r == call })
}

// deadLetter records what an incarnation hands to its dead-letter callback:
// the poison records, counted as handled.
func (s *soak) deadLetter(inc *incarnation) shardlease.DeadLetterFunc {
	return func(ctx context.Context, shard string, records []shardlease.Record, err error) error {
		if inc.crashed.Load() {
			return errCrashed
		}
		at := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range records {
			id := strings.TrimSuffix(string(r.Data), poisonMark)
			if _, ok := s.keyOf[id]; !ok {
				s.unknown++
				continue
			}
			if !errors.Is(err, errPoison) || id == string(r.Data) {
				s.badDead = append(s.badDead, fmt.Sprintf("%s dead-lettered %s of %s (%v)", inc.id, id, shard, err))
			}
			if len(s.handled[id]) == 0 {
				s.keyOrder[s.keyOf[id]] = append(s.keyOrder[s.keyOf[id]], id)
			}
			s.handled[id] = append(s.handled[id], handling{by: inc, stream: s.streamOfID(id), shard: shard, seq: r.SequenceNumber, at: at, dead: true})
		}
		return nil
	}
}

// produce writes records with unique ids until ctx is done.
func (s *soak) produce(ctx context.Context) {
	s.atRate(ctx, func(n int, every time.Duration) {
		id, key, data := s.record("", n)
		s.mu.Lock()
		s.keyOf[id] = key // before the put: a reader may see it at once
		s.mu.Unlock()
		s.putRetrying(ctx, s.cfg.Stream, id, key, data, every, func(*kinesis.PutRecordOutput) {})
	})
}

// atRate calls produce with n = 0, 1, 2, … at the config's rate (every
// being the interval), until ctx is done.
func (s *soak) atRate(ctx context.Context, produce func(n int, every time.Duration)) {
	every := time.Second / time.Duration(s.cfg.Rate)
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		produce(n, every)
	}
}

// record returns the id, partition key and payload of record n, its id and
// key prefixed by prefix. Every PoisonEvery-th record is poison.
func (s *soak) record(prefix string, n int) (id, key, data string) {
	id = fmt.Sprintf("%srec-%08d", prefix, n)
	key = fmt.Sprintf("%skey-%03d", prefix, n%s.cfg.Keys)
	data = id
	if s.cfg.PoisonEvery > 0 && (n+1)%s.cfg.PoisonEvery == 0 {
		data += poisonMark
		s.counts.add(EvPoison, 1)
	}
	return id, key, data
}

// putRetrying writes the record id to stream, retrying every interval
// until it lands or has failed more than 50 times. A record that landed is
// counted produced, with its sequence number, and its put's output passed
// to landed (with s.mu held) for what the mode records of it besides; the
// key of one given up on is forgotten.
func (s *soak) putRetrying(ctx context.Context, stream, id, key, data string, every time.Duration, landed func(out *kinesis.PutRecordOutput)) {
	for attempt := 0; ; attempt++ {
		out, err := s.cfg.Kinesis.PutRecord(context.WithoutCancel(ctx), &kinesis.PutRecordInput{
			StreamName: aws.String(stream), PartitionKey: aws.String(key), Data: []byte(data),
		})
		if err == nil {
			s.mu.Lock()
			s.produced = append(s.produced, id)
			s.seqOf[id] = aws.ToString(out.SequenceNumber)
			s.putAt[id] = time.Now()
			s.shardOfID[id] = aws.ToString(out.ShardId)
			landed(out)
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		s.retried[id] = true
		s.mu.Unlock()
		s.counts.add("producer put retried", 1)
		if attempt > 50 {
			fmt.Fprintf(s.cfg.Events, "%6.1fs producer gives up on %s: %v\n", s.since(), id, err)
			s.mu.Lock()
			delete(s.keyOf, id)
			s.mu.Unlock()
			return
		}
		w := time.NewTimer(every)
		<-w.C
	}
}

// chaos injects crashes, pauses, a split and a merge at times drawn from
// the seed, over the run's first 85% (the rest lets the reshards settle).
func (s *soak) chaos(ctx context.Context) {
	cfg := s.cfg
	window := cfg.Duration * 85 / 100
	evs := s.faultEvents(window, func(n int) []event {
		var evs []event
		for _, kind := range []string{EvCrashJoint, EvListsFail, EvJointLeave} {
			for range max(1, n/4) {
				evs = append(evs, event{at: s.jitter(window), kind: kind, d: cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(2*cfg.Lease))})
			}
		}
		if cfg.Sessions {
			evs = append(evs, s.sessionEvents(window, n)...)
		}
		return evs
	})
	evs = append(evs, event{at: window * 5 / 6, kind: EvDeleteFinished})
	s.inject(ctx, evs, func(ev event) {
		switch ev.kind {
		case EvCrashJoint:
			s.crashJoint(ctx, ev.d)
		case EvListsFail:
			s.failLists()
		case EvJointLeave:
			s.leaveJoint(ctx, ev.d)
		case EvDeleteFinished:
			s.operator.Go(func() { s.deleteFinished(ctx) })
		case EvZoneLost:
			s.loseZone(ctx, ev.d)
		case EvSameID:
			s.sameIDRestart(ev.slot)
		case EvSplit, EvMerge:
			if err := s.reshard(ctx, ev.kind); err != nil {
				fmt.Fprintf(cfg.Events, "%6.1fs %s failed: %v\n", s.since(), ev.kind, err)
				s.counts.add(ev.kind+" failed", 1)
			} else {
				s.counts.add(ev.kind, 1)
			}
		}
	})
}

// event is one injection of a chaos schedule: of kind, at that offset from
// the start, on slot (crashes, pauses and drains), for d.
type event struct {
	at   time.Duration
	kind string
	slot int
	d    time.Duration
}

// faultEvents draws the faults of both modes over window: crashes and
// coordinator crashes, the mode's own from extra (given the number of
// crashes), pauses, drains, rewinds and resets, and a split at a third of
// the window and a merge at two thirds. extra draws from s.rng between the crashes and the
// pauses: the order of the draws is the schedule a seed makes.
func (s *soak) faultEvents(window time.Duration, extra func(n int) []event) []event {
	cfg := s.cfg
	var evs []event
	n := max(2, int(window/(4*cfg.Lease)))
	for range n {
		evs = append(evs, event{at: s.jitter(window), kind: EvCrash, slot: s.rng.IntN(cfg.Workers), d: cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(2*cfg.Lease))})
	}
	for range max(1, n/3) {
		evs = append(evs, event{at: s.jitter(window), kind: EvCrashCoordinator, d: cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(2*cfg.Lease))})
	}
	evs = append(evs, extra(n)...)
	for range max(2, n*2/3) {
		evs = append(evs, event{at: s.jitter(window), kind: EvPause, slot: s.rng.IntN(cfg.Workers), d: cfg.Lease*3/2 + time.Duration(s.rng.Float64()*float64(cfg.Lease))})
	}
	for range max(1, n/3) {
		evs = append(evs, event{at: s.jitter(window), kind: EvDrain, slot: s.rng.IntN(cfg.Workers), d: cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(cfg.Lease))})
	}
	evs = append(evs, s.rewindEvents(window, n)...)
	evs = append(evs, s.resetEvents(window, n)...)
	return append(evs, event{at: window / 3, kind: EvSplit}, event{at: window * 2 / 3, kind: EvMerge})
}

// inject injects the events in the order of their times (those of one time
// in the order given), each at its time, until ctx is done: the crashes,
// pauses and drains itself, the others through own.
func (s *soak) inject(ctx context.Context, evs []event, own func(ev event)) {
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.at - b.at) })
	for _, ev := range evs {
		t := time.NewTimer(time.Until(s.start.Add(ev.at)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		switch ev.kind {
		case EvCrash:
			s.crash(ev.slot, ev.d)
		case EvCrashCoordinator:
			if slot, ok := s.coordinatorSlot(); ok {
				s.crash(slot, ev.d)
				s.counts.add(EvCrashCoordinator, 1)
			}
		case EvDrain:
			s.drainForRestart(ctx, ev.slot, ev.d)
		case EvRewind:
			s.operator.Go(func() { s.rewind(ctx, ev) })
		case EvReset:
			s.operator.Go(func() { s.reset(ctx, ev) })
		case EvPause:
			s.mu.Lock()
			inc := s.slots[ev.slot]
			s.mu.Unlock()
			if !inc.crashed.Load() {
				inc.pauseNext.CompareAndSwap(0, int64(ev.d)) // counted when it happens
			}
		default:
			own(ev)
		}
	}
}

// jitter returns a random offset in [lease, window).
func (s *soak) jitter(window time.Duration) time.Duration {
	lo := s.cfg.Lease
	if window <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Float64()*float64(window-lo))
}

// coordinatorSlot returns the slot whose live incarnation runs the lowest
// shard id any worker runs: the first readable lease, whose holder
// coordinates.
func (s *soak) coordinatorSlot() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, lowest := -1, ""
	for slot, inc := range s.slots {
		if inc == nil || inc.consumer == nil || inc.crashed.Load() || inc.leaving.Load() {
			continue
		}
		for _, shard := range inc.consumer.Held() {
			if best < 0 || shard < lowest {
				best, lowest = slot, shard
			}
		}
	}
	return best, best >= 0
}

// crash kills the incarnation in slot (unless it is dead already) and
// starts a new one after downtime.
func (s *soak) crash(slot int, downtime time.Duration) {
	s.mu.Lock()
	inc := s.slots[slot]
	s.mu.Unlock()
	if inc.leaving.Load() || !inc.crashed.CompareAndSwap(false, true) {
		return
	}
	s.counts.add(EvCrash, 1)
	fmt.Fprintf(s.cfg.Events, "%6.1fs crash %s holding %v; restart in %v\n", s.since(), inc.id, inc.consumer.Held(), downtime.Round(time.Millisecond))
	inc.cancel() // its calls fail from now on: nothing it writes lands
	s.restarts.Go(func() { s.relaunch(inc, slot, downtime) })
}

// relaunch waits for inc's Run to return, then downtime, and starts the
// slot's next incarnation. It always starts one, even once the chaos is
// over: Run waits for every slot's last incarnation to return.
func (s *soak) relaunch(inc *incarnation, slot int, downtime time.Duration) {
	inc.runErr = <-inc.done
	time.Sleep(downtime)
	s.launch(slot)
}

// reshard splits an open shard at the middle of its hash range, or merges
// two adjacent open shards.
func (s *soak) reshard(ctx context.Context, kind string) error {
	return s.reshardStream(ctx, s.cfg.Stream, kind)
}

// reshardStream is reshard on the stream of that name.
func (s *soak) reshardStream(ctx context.Context, stream, kind string) error {
	cfg := s.cfg
	return s.untilActive(ctx, func() error {
		out, err := cfg.Kinesis.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
		if err != nil {
			return err
		}
		var open []kinesistypes.Shard
		for _, sh := range out.Shards {
			if sh.SequenceNumberRange == nil || sh.SequenceNumberRange.EndingSequenceNumber == nil {
				open = append(open, sh)
			}
		}
		hash := func(s *string) *big.Int { n, _ := new(big.Int).SetString(aws.ToString(s), 10); return n }
		slices.SortFunc(open, func(a, b kinesistypes.Shard) int {
			return hash(a.HashKeyRange.StartingHashKey).Cmp(hash(b.HashKeyRange.StartingHashKey))
		})
		if kind == EvSplit {
			sh := open[s.rng.IntN(len(open))]
			lo, hi := hash(sh.HashKeyRange.StartingHashKey), hash(sh.HashKeyRange.EndingHashKey)
			mid := new(big.Int).Add(lo, hi)
			mid.Add(mid, big.NewInt(1)).Rsh(mid, 1)
			_, err := cfg.Kinesis.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: sh.ShardId, NewStartingHashKey: aws.String(mid.String())})
			if err == nil {
				fmt.Fprintf(cfg.Events, "%6.1fs split %s of %s at %s\n", s.since(), aws.ToString(sh.ShardId), stream, mid)
			}
			return err
		}
		if len(open) < 2 {
			return errors.New("fewer than two open shards to merge")
		}
		i := s.rng.IntN(len(open) - 1)
		a, b := open[i], open[i+1]
		_, err = cfg.Kinesis.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: a.ShardId, AdjacentShardToMerge: b.ShardId})
		if err == nil {
			fmt.Fprintf(cfg.Events, "%6.1fs merge %s and %s of %s\n", s.since(), aws.ToString(a.ShardId), aws.ToString(b.ShardId), stream)
		}
		return err
	})
}

// drain waits until every produced record was handled or the drain time is
// up; it reports whether all were handled.
func (s *soak) drain(ctx context.Context) bool {
	deadline := time.Now().Add(s.cfg.Drain)
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	for {
		s.mu.Lock()
		missing := 0
		for _, id := range s.produced {
			if len(s.handled[id]) == 0 || !s.sinkDrained(id) {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			fmt.Fprintf(s.cfg.Events, "%6.1fs drained\n", s.since())
			return true
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.cfg.Events, "%6.1fs drain timed out with %d records unhandled\n", s.since(), missing)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// memoryOrDynamo returns the store as it is, without faults.
func (s *soak) memoryOrDynamo() shardlease.LeaseStore {
	if s.memory != nil {
		return s.memory
	}
	ds, err := shardlease.NewDynamoStore(s.cfg.Dynamo, s.cfg.Table)
	if err != nil {
		panic(err)
	}
	return ds
}
