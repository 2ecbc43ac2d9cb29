package shardlease

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// StreamSpec names one stream of a Group and how it is read. Give Name or
// ARN; every other field is optional and falls back to the group's.
type StreamSpec struct {
	// Name is the stream's name.
	Name string
	// ARN names the stream by its ARN instead
	// ("arn:aws:kinesis:<region>:<account>:stream/<name>"): every Kinesis
	// call on it then carries StreamARN, which a stream of another account,
	// read through the resource policy its owner wrote, needs. Its rows are
	// keyed by the name in the ARN, and its identity row records the ARN.
	ARN string
	// Client reads the stream (a client of another region, or with other
	// credentials); nil reads it with the group's. The lease table is
	// always reached through the store given to NewGroup.
	Client KinesisAPI
	// Handler handles the stream's batches; nil uses the group's.
	Handler Handler
	// Position is where a shard without a checkpoint starts ("" uses the
	// group's, WithInitialPosition); Timestamp goes with AtTimestamp.
	Position  InitialPosition
	Timestamp time.Time
	// FanOut reads the stream with enhanced fan-out under this consumer
	// name; "" uses the group's reading mode (WithEnhancedFanOut).
	FanOut string
	// Polling reads the stream with GetRecords even when the group reads
	// with enhanced fan-out.
	Polling bool
}

// StreamSource returns the streams a Group reads now. A Group calls it at
// start and every GroupConfig.SourceInterval, each call bounded by the
// interval (at most a minute).
type StreamSource func(ctx context.Context) ([]StreamSpec, error)

// GroupConfig says which streams a Group reads.
type GroupConfig struct {
	// Name names the group's worker rows in the table ("<name>:@<owner>");
	// every worker of the group gives the same. It is not the name of a
	// stream the table holds rows of.
	Name string
	// Streams is a fixed set of streams. Give Streams or Source.
	Streams []StreamSpec
	// Source returns the set of streams to read, polled every
	// SourceInterval (default a minute). A stream it stops returning is
	// removed: its readers stop at a batch boundary with a final
	// checkpoint and release their leases, and its rows are no longer
	// read. A failed call keeps the set as it was (a Warn log says so);
	// at start it fails Run.
	Source         StreamSource
	SourceInterval time.Duration
	// DeleteRemovedAfter, when positive, deletes the rows of a stream
	// removed from the set once it has been out that long (deferred
	// deletion; at least two source intervals, two lease durations and the
	// shutdown timeout) and no worker reads it any more: the rows nobody
	// holds, and those whose holder has been gone a lease duration. Zero
	// keeps them, so that a stream added back starts from its checkpoints.
	DeleteRemovedAfter time.Duration
}

// Group reads several streams under one Run, sharing their leases with
// every other worker of the group: one scheduler lists the leases of every
// stream in one read of the table per take interval, counts the fair share
// over all of them, and one coordinator and its deputies serve them all.
// Each lease row stays keyed "stream:shard", as a Consumer of that stream
// writes it. Create one with NewGroup and call Run.
type Group struct {
	c       *Consumer
	cfg     GroupConfig
	client  KinesisAPI
	handler Handler
	base    config

	running atomic.Bool // set by Run: a Group runs once
	// removed settles the rows of streams that left the set; Run's
	// scheduler holds and calls it.
	removed *removals
}

// defaultSourceInterval is how often a Group polls its source by default.
const defaultSourceInterval = time.Minute

// NewGroup returns a consumer of the streams cfg names, with client and
// handler for every stream whose spec gives none, and the options of
// NewConsumer (they apply to every stream). It checks every spec and starts
// nothing: call Run. Two specs of one stream (by name, or by an ARN with
// that name) are refused, since they would write the same rows.
func NewGroup(client KinesisAPI, store LeaseStore, cfg GroupConfig, handler Handler, opts ...Option) (*Group, error) {
	if err := ValidateStreamName(cfg.Name); err != nil {
		return nil, errorf("shardlease: NewGroup: group name: %w", err)
	}
	switch {
	case isNil(store):
		return nil, errorf("%w: group %s: the lease store is nil; pass shardlease.NewDynamoStore(...) or shardlease.NewMemoryStore()", ErrInvalidConfig, cfg.Name)
	case cfg.Source == nil && len(cfg.Streams) == 0:
		return nil, errorf("%w: group %s: no streams: set GroupConfig.Streams or GroupConfig.Source", ErrInvalidConfig, cfg.Name)
	case cfg.Source != nil && len(cfg.Streams) > 0:
		return nil, errorf("%w: group %s: both Streams and Source are set: give one", ErrInvalidConfig, cfg.Name)
	case cfg.SourceInterval < 0 || cfg.DeleteRemovedAfter < 0:
		return nil, errorf("%w: group %s: SourceInterval %v and DeleteRemovedAfter %v must not be negative", ErrInvalidConfig, cfg.Name, cfg.SourceInterval, cfg.DeleteRemovedAfter)
	}
	if cfg.SourceInterval == 0 {
		cfg.SourceInterval = defaultSourceInterval
	}
	if !isNil(client) {
		if err := checkRegion(client); err != nil {
			return nil, errorf("group %s: %w", cfg.Name, err)
		}
	}
	base, err := buildConfig(cfg.Name, opts)
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: cfg, client: client, handler: handler, base: base}
	var ms []*member
	if cfg.Source == nil {
		if ms, err = g.members(cfg.Streams); err != nil {
			return nil, err
		}
	}
	// The engine is a Consumer's, over the group's set; its worker rows,
	// logs and Status carry the group's name.
	c, err := newConsumer(store, cfg.Name, base, newMemberSet(true, ms...))
	if err != nil {
		return nil, err
	}
	c.group = g
	g.c = c
	g.removed = &removals{c: c, cfg: cfg, rowsSeen: make(map[string]observation), sessions: newSessionView(c.caps.sessions)}
	return g, nil
}

// members checks specs and returns their members.
func (g *Group) members(specs []StreamSpec) ([]*member, error) {
	seen := make(map[string]string, len(specs))
	out := make([]*member, 0, len(specs))
	for i, s := range specs {
		m, err := g.member(i, s)
		if err != nil {
			return nil, err
		}
		if m.name == g.cfg.Name {
			return nil, errorf("%w: group %s: stream %d is named %s like the group, whose worker rows would mix with its rows: name the group otherwise", ErrInvalidConfig, g.cfg.Name, i, m.name)
		}
		if prev, dup := seen[m.name]; dup {
			return nil, errorf("%w: group %s: %s and %s both name stream %s, whose rows they would both write (streams of one name in two accounts or regions need a lease table each): give it once", ErrInvalidConfig, g.cfg.Name, prev, m.ref, m.name)
		}
		seen[m.name] = m.ref
		out = append(out, m)
	}
	return out, nil
}

// member checks spec i and returns its member.
func (g *Group) member(i int, s StreamSpec) (*member, error) {
	name, ref := s.Name, s.Name
	switch {
	case s.ARN != "" && s.Name != "":
		return nil, errorf("%w: group %s: stream %d gives both Name %q and ARN %q: give one", ErrInvalidConfig, g.cfg.Name, i, s.Name, s.ARN)
	case s.ARN != "":
		n, ok := streamNameOfARN(s.ARN)
		if !ok {
			return nil, errorf("%w: group %s: stream %d: %q is not a Kinesis stream ARN (arn:aws:kinesis:<region>:<account>:stream/<name>)", ErrInvalidConfig, g.cfg.Name, i, s.ARN)
		}
		name, ref = n, s.ARN
	case strings.HasPrefix(s.Name, "arn:"):
		return nil, errorf("%w: group %s: stream %d: Name %q is an ARN, not a stream name: move it to the spec's ARN field, shardlease.StreamSpec{ARN: %q}, or give the stream's name in Name",
			ErrInvalidName, g.cfg.Name, i, s.Name, s.Name)
	default:
		if err := ValidateStreamName(s.Name); err != nil {
			return nil, errorf("shardlease: group %s: stream %d: %w", g.cfg.Name, i, err)
		}
	}
	kin := s.Client
	if isNil(kin) {
		kin = g.client
	}
	h := s.Handler
	if h == nil {
		h = g.handler
	}
	switch {
	case isNil(kin):
		return nil, errorf("%w: group %s: stream %s has no Kinesis client: pass one to NewGroup or in its StreamSpec", ErrInvalidConfig, g.cfg.Name, name)
	case h == nil:
		return nil, errorf("%w: group %s: stream %s has no handler: pass one to NewGroup or in its StreamSpec", ErrInvalidConfig, g.cfg.Name, name)
	}
	if !isNil(s.Client) {
		if err := checkRegion(s.Client); err != nil {
			return nil, errorf("group %s: stream %s: %w", g.cfg.Name, name, err)
		}
	}
	cfg := g.base
	if s.Position != "" {
		cfg.position, cfg.startTimestamp = s.Position, s.Timestamp
	}
	switch {
	case s.Polling:
		cfg.fanOutSet = false
	case s.FanOut != "":
		cfg.fanOutSet, cfg.fanOutName = true, s.FanOut
	}
	bad := func(format string, args ...any) error {
		return errorf("%w: group %s: stream %s: %s", ErrInvalidConfig, g.cfg.Name, name, fmt.Sprintf(format, args...))
	}
	if err := cfg.checkPosition(bad); err != nil {
		return nil, err
	}
	fo, err := newFanOut(kin, name, cfg)
	if err != nil {
		return nil, err
	}
	return newMember(name, ref, kin, h, cfg, fo), nil
}

// Run reads the group's streams until ctx is cancelled, then shuts down
// gracefully and returns as Consumer.Run does: nil, or an
// *AbandonedHandlersError when it abandoned handlers deaf to their context.
// With a Source, the first call must succeed and return at least one stream,
// or Run fails. A Group runs once: a second call returns ErrAlreadyRunning.
func (g *Group) Run(ctx context.Context) error {
	if !g.running.CompareAndSwap(false, true) {
		return alreadyRunning("group "+g.cfg.Name, "Group")
	}
	if g.cfg.Source == nil {
		return g.c.Run(ctx)
	}
	specs, err := g.poll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return errorf("shardlease: group %s: the stream source failed at start: %w", g.cfg.Name, err)
	}
	if len(specs) == 0 {
		return errorf("%w: group %s: the stream source returned no streams at start", ErrInvalidConfig, g.cfg.Name)
	}
	ms, err := g.members(specs)
	if err != nil {
		return err
	}
	for _, m := range ms {
		g.c.set.add(m)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.follow(sctx)
	}()
	// Rows handed to this worker as their stream left are released before
	// it goes, with the others it does not run (scheduler.releaseLate).
	err = g.c.Run(ctx)
	stop()
	<-done
	return err
}

// poll calls the source once, bounded by the source interval (at most a
// minute).
func (g *Group) poll(ctx context.Context) ([]StreamSpec, error) {
	pctx, cancel := context.WithTimeout(ctx, min(g.cfg.SourceInterval, time.Minute))
	defer cancel()
	return g.cfg.Source(pctx)
}

// follow polls the source every interval until ctx ends, applies what it
// returns to the set, and tells Run's scheduler after each poll (through
// the set), which then looks after the rows of removed streams (removals):
// it writes no lease row itself.
func (g *Group) follow(ctx context.Context) {
	t := time.NewTicker(g.cfg.SourceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		specs, err := g.poll(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = g.apply(ctx, specs)
		}
		if err != nil {
			g.c.count(evSourceFailure, 1)
			g.c.log.Warn("the stream source failed, or a stream it returned cannot be read yet; the group reads the streams it read and tries again at the next poll", "err", err)
		}
		poke(g.c.set.polled)
	}
}

// apply makes the set the streams of specs and tells the scheduler when it
// changed. Specs that fail the checks of NewGroup change nothing. A stream
// joins the set only once it is ready to read (see prepare); one that is
// not is tried again at the next poll, and its error returned.
func (g *Group) apply(ctx context.Context, specs []StreamSpec) error {
	ms, err := g.members(specs)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return errorf("%w: group %s: the stream source returned no streams; a group keeps at least one (stop Run to read none)", ErrInvalidConfig, g.cfg.Name)
	}
	set := g.c.set
	changed := false
	want := make(map[string]bool, len(ms))
	var errs []error
	for _, m := range ms {
		want[m.name] = true
		if set.has(m.name) {
			continue
		}
		if err := g.prepare(ctx, m); err != nil {
			errs = append(errs, err)
			continue
		}
		set.add(m)
		changed = true
		g.c.log.Info("stream added to the group", "stream", m.name)
	}
	now := time.Now()
	kept := 0
	for _, name := range set.names() {
		if want[name] {
			kept++
		}
	}
	if kept == 0 {
		// Every stream returned failed to join: keep reading the old ones.
		return errors.Join(append(errs, errorf("%w: group %s: none of the streams the source returned can be read yet; the group keeps reading the streams it read", ErrInvalidConfig, g.cfg.Name))...)
	}
	for _, name := range set.names() {
		if !want[name] && set.remove(name, now) {
			changed = true
			g.c.log.Info("stream removed from the group: its readers stop at a batch boundary and release their leases", "stream", name)
		}
	}
	if changed {
		poke(set.changed)
	}
	return errors.Join(errs...)
}

// prepare makes m, a stream joining the set while the group runs, ready to
// read before any of its leases may be taken: its identity checked (and
// recorded), so that its fence tokens carry its incarnation, and its fan-out
// consumer registered. Each is bounded by the start-up timeout.
func (g *Group) prepare(ctx context.Context, m *member) error {
	c := g.c
	m.registered.Store(false)
	pctx, cancel := context.WithTimeout(ctx, c.cfg.startupTimeout())
	defer cancel()
	if err := c.checkMemberIdentity(pctx, m); err != nil {
		return errorf("shardlease: group %s: stream %s not added: %w", g.cfg.Name, m.name, err)
	}
	if m.fanOut != nil {
		if err := m.fanOut.register(pctx, c, m); err != nil {
			return errorf("shardlease: group %s: stream %s not added: %w", g.cfg.Name, m.name, err)
		}
	}
	m.registered.Store(true)
	return nil
}

// Streams returns the names of the streams the group reads now, sorted.
func (g *Group) Streams() []string { return g.c.set.names() }

// Held returns the leases this worker holds now, by stream and shard,
// sorted.
func (g *Group) Held() []LeaseKey { return g.c.heldKeys() }

// OwnerID returns the identity this worker writes into the rows it holds
// (see Consumer.OwnerID).
func (g *Group) OwnerID() string { return g.c.OwnerID() }

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// Stats returns the group's counters, summed over its streams.
func (g *Group) Stats() Stats { return g.c.Stats() }

// Status returns what Consumer.Status returns, for the group: its Stream is
// the group's name and its shards are named "stream/shard".
func (g *Group) Status() Status { return g.c.Status() }

// StatusHandler serves Status as JSON, as Consumer.StatusHandler does.
func (g *Group) StatusHandler() http.Handler { return g.c.StatusHandler() }

// Drain hands every lease this worker holds, of every stream, to the other
// workers, as Consumer.Drain does.
func (g *Group) Drain(ctx context.Context) error { return g.c.Drain(ctx) }

// SourceFailures counts the calls of the stream source that failed, or
// returned streams the group refused, since Run started.
func (g *Group) SourceFailures() int64 { return g.c.Stats().SourceFailures }
