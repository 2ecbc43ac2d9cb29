package soak

// The mixed mode (Config.Mixed): one lease table shared by workers that do
// not read the same streams, as a real fleet shares it mid-deploy. Three
// streams, Stream+"-1", "-2" and "-3", and four kinds of worker:
//
//	consumer 1      a Consumer of stream 1
//	group a fixed   Group "a" over streams 1 and 2 (fixed Streams)
//	group a by A    Group "a" over source A: 1, 2, 3; 3 leaves at a third
//	                of the run and comes back at three fifths
//	group b by B    Group "b" over source B: 2, 3; 1 joins at a quarter
//	consumer 3      a Consumer of stream 3
//
// Slot 0 starts as consumer 1, slot 1 as group a fixed (with slot 0's owner
// id, as two pods with a reused name), slot 2 as group a by A, slot 3 as
// group b by B. A restarted slot comes back, half the time, as the next kind
// of its cycle (slot 0: consumer 1, group a fixed; slot 1 the other way;
// slot 2: a by A, b by B; slot 3: b by B, a by A, consumer 3). Slots 0 and 1
// always read stream 1, slot 2 stream 2, slot 3 stream 3 (source A has it
// back before the faults end): every record of every stream must be handled.
// Slot 0 is the capped one (WithMaxLeases): slot 1 reads its streams too, so
// no stream waits on a capped worker's room.
//
// The random faults, the coordinator and deputy crashes among them, run over
// the first 70% of the run. Then, the fleet quiet, two streams'
// coordinators crash and stay down past the untaken bound (quietCrash): the
// live workers that read those streams, of whatever kind, must hold their
// leases again, as in the table, where one crash in a quiet fleet
// left leases untaken for good.
//
// The audits keep their meaning per stream: lost, duplicates, overlaps
// (keyed stream:shard), order, fencing and the sink. Untaken max counts a
// lease as untaken only while a live worker that reads its stream (as the
// worker's own set says) has room and does not hold it; a lease held by a
// worker that no longer reads its stream is untaken. While no live worker
// reads a stream its leases do not count, and the table shows how long
// that lasted (mixed_watch.go).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
)

// mixedStreams is how many streams the mixed mode's table holds rows of.
const mixedStreams = 3

// Event kinds of the mixed mode.
const (
	EvKindChanged = "worker restarted as another kind (Consumer <-> Group, or another set)"
	EvSetChanged  = "stream added to or removed from one group's source (others read it)"
	EvCrashFirst  = "crash of the holder of a stream's first lease (its coordinator)"
	EvCrashDeputy = "crash of a deputy (a worker holding a deputy note)"
	EvQuietCrash  = "crash of a stream's coordinator in a quiet fleet, down past the untaken bound"
)

// mixedKind is what one incarnation runs as.
type mixedKind struct {
	name     string       // as printed
	consumer string       // a Consumer's stream; "" for a Group
	group    string       // a Group's name
	fixed    []string     // a Group's fixed Streams
	source   *mixedSource // a Group's source; nil with fixed Streams
}

// mixedSource is a polled source of stream names, as a config service
// would serve it.
type mixedSource struct {
	name string
	mu   sync.Mutex
	set  []string
}

// specs returns the set the source serves now.
func (m *mixedSource) specs() []shardlease.StreamSpec {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]shardlease.StreamSpec, 0, len(m.set))
	for _, name := range m.set {
		out = append(out, shardlease.StreamSpec{Name: name})
	}
	return out
}

// change adds stream to the source's set, or removes it, and returns the
// set after.
func (m *mixedSource) change(stream string, add bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set = slices.DeleteFunc(m.set, func(n string) bool { return n == stream })
	if add {
		m.set = append(m.set, stream)
		slices.Sort(m.set)
	}
	return slices.Clone(m.set)
}

// setChange is one change of a source while the faults run, at that
// fraction of the run.
type setChange struct {
	src    *mixedSource
	stream string
	add    bool
	num    int // at num/den of the run
	den    int
}

// mixedState is the mixed mode's side of a soak.
type mixedState struct {
	streams  []string
	kinds    map[string]*mixedKind
	cycles   [][]string // kind names by slot%4, in the order a slot moves through them
	srcA     *mixedSource
	srcB     *mixedSource
	changes  []setChange
	untakens mixedUntaken // mixed_watch.go

	mu     sync.Mutex
	kindAt map[int]int                 // slot → index in its cycle, of its latest incarnation
	kindOf map[*incarnation]*mixedKind // every incarnation's
}

// newMixedState returns the kinds, sources and set changes of the streams
// named after prefix.
func newMixedState(prefix string) *mixedState {
	s1, s2, s3 := prefix+"-1", prefix+"-2", prefix+"-3"
	m := &mixedState{
		streams: []string{s1, s2, s3},
		srcA:    &mixedSource{name: "A", set: []string{s1, s2, s3}},
		srcB:    &mixedSource{name: "B", set: []string{s2, s3}},
		kindAt:  map[int]int{}, kindOf: map[*incarnation]*mixedKind{},
	}
	ga, gb := prefix+"-a", prefix+"-b"
	m.kinds = map[string]*mixedKind{
		"consumer 1":    {name: "consumer of " + s1, consumer: s1},
		"group a fixed": {name: fmt.Sprintf("group %s over %s, %s (fixed)", ga, s1, s2), group: ga, fixed: []string{s1, s2}},
		"group a by A":  {name: fmt.Sprintf("group %s by source A", ga), group: ga, source: m.srcA},
		"group b by B":  {name: fmt.Sprintf("group %s by source B", gb), group: gb, source: m.srcB},
		"consumer 3":    {name: "consumer of " + s3, consumer: s3},
	}
	m.cycles = [][]string{
		{"consumer 1", "group a fixed"},
		{"group a fixed", "consumer 1"},
		{"group a by A", "group b by B"},
		{"group b by B", "group a by A", "consumer 3"},
	}
	m.changes = []setChange{
		{src: m.srcB, stream: s1, add: true, num: 1, den: 4},
		{src: m.srcA, stream: s3, add: false, num: 1, den: 3},
		{src: m.srcA, stream: s3, add: true, num: 3, den: 5},
	}
	return m
}

// kindFor picks the kind of a new incarnation of slot: its cycle's first
// for the first, and for a restart the next in the cycle half the time
// (drawn from rng).
func (m *mixedState) kindFor(inc *incarnation, gen int, rng *rand.Rand) (k *mixedKind, changed bool) {
	cycle := m.cycles[inc.slot%len(m.cycles)]
	m.mu.Lock()
	defer m.mu.Unlock()
	at := m.kindAt[inc.slot]
	if gen > 1 && rng.IntN(2) == 0 {
		at, changed = (at+1)%len(cycle), true
	}
	m.kindAt[inc.slot] = at
	k = m.kinds[cycle[at]]
	m.kindOf[inc] = k
	return k, changed
}

// readers names the kinds that read stream at some time of the run.
func (m *mixedState) readers(stream string) []string {
	var out []string
	for _, cycle := range m.cycles {
		for _, name := range cycle {
			k := m.kinds[name]
			reads := k.consumer == stream || slices.Contains(k.fixed, stream) || k.source != nil
			if reads && !slices.Contains(out, k.name) {
				out = append(out, k.name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// mixedCappedSlot is the slot whose workers run with WithMaxLeases in the
// mixed mode: slot 0, since slot 1 reads its streams' first too, uncapped.
// A capped slot that alone reads a stream could leave it unread for want
// of room, which no promise covers.
const mixedCappedSlot = 0

// mixedCapOf returns the WithMaxLeases cap of slot's workers in the mixed
// mode, 0 for none: capOf's rule over the three streams' shards.
func (c *Config) mixedCapOf(slot int) int {
	if slot != mixedCappedSlot {
		return 0
	}
	return (c.Shards*mixedStreams+c.Workers-1)/c.Workers + 1
}

// consumerWorker is a Consumer as a worker of the mixed mode: Held names
// its leases "stream:shard", as a Group's do, and Streams is its stream.
type consumerWorker struct{ *shardlease.Consumer }

// Held returns the leases the consumer runs, as "stream:shard".
func (c consumerWorker) Held() []string {
	held := c.Consumer.Held()
	out := make([]string, 0, len(held))
	for _, shard := range held {
		out = append(out, shardlease.LeaseKey{Stream: c.Stream(), Shard: shard}.String())
	}
	return out
}

// Streams returns the one stream the consumer reads.
func (c consumerWorker) Streams() []string { return []string{c.Stream()} }

// streamReader is a worker that says which streams it reads now.
type streamReader interface{ Streams() []string }

// newMixedWorker returns the worker of an incarnation of the mixed mode:
// a Consumer or a Group, of the kind its slot runs as now.
func (s *soak) newMixedWorker(inc *incarnation, gen int, kin shardlease.KinesisAPI, store shardlease.LeaseStore, opts []shardlease.Option) (worker, error) {
	rng := rand.New(rand.NewPCG(s.cfg.Seed^5, uint64(inc.slot)<<32|uint64(gen)))
	k, changed := s.mix.kindFor(inc, gen, rng)
	if changed {
		s.counts.add(EvKindChanged, 1)
	}
	fmt.Fprintf(s.cfg.Events, "%6.1fs %s runs as %s\n", s.since(), inc.id, k.name)
	if most := s.cfg.mixedCapOf(inc.slot); most > 0 {
		s.counts.add(EvCapped, 1)
		opts = append(opts, shardlease.WithMaxLeases(most))
	}
	if k.consumer != "" {
		c, err := shardlease.NewConsumer(kin, store, k.consumer, s.handler(inc), opts...)
		if err != nil {
			return nil, err
		}
		return consumerWorker{c}, nil
	}
	gc := shardlease.GroupConfig{Name: k.group}
	if k.source == nil {
		for _, name := range k.fixed {
			gc.Streams = append(gc.Streams, shardlease.StreamSpec{Name: name})
		}
	} else {
		gc.Source, gc.SourceInterval = s.faultySource(inc, k.source.specs), s.cfg.SourceInterval
	}
	g, err := shardlease.NewGroup(kin, &groupListStore{troubleStore: store.(*troubleStore)}, gc, s.handler(inc), opts...)
	if err != nil {
		return nil, err
	}
	return groupWorker{g}, nil
}

// faultySource returns a stream source serving specs whose calls fail at
// the fault rate while the faults run (never the first: it would fail Run),
// and always once inc crashed.
func (s *soak) faultySource(inc *incarnation, specs func() []shardlease.StreamSpec) shardlease.StreamSource {
	var calls atomic.Int64
	return func(ctx context.Context) ([]shardlease.StreamSpec, error) {
		if inc.crashed.Load() {
			return nil, errCrashed
		}
		if calls.Add(1) > 1 && s.faultsOn.Load() {
			inc.mu.Lock()
			fail := inc.hrng.Float64() < s.cfg.FaultRate
			inc.mu.Unlock()
			if fail {
				s.counts.add(EvSourceFailed, 1)
				return nil, errors.New("soak: injected stream source failure")
			}
		}
		return specs(), nil
	}
}

// runMixed is Run in the mixed mode.
func (s *soak) runMixed(ctx context.Context) (*Result, error) {
	cfg := s.cfg
	s.mix = newMixedState(cfg.Stream)
	// The group mode's bookkeeping of records by stream serves here too; no
	// stream leaves every set, so none is "removed" or "added".
	s.grp = &groupState{streams: s.mix.streams, streamOf: map[string]string{}, putAt: map[string]time.Time{}, shardOf: map[string]string{}, lateHeld: map[string]bool{}}
	if err := s.setupGroup(ctx); err != nil {
		return nil, err
	}
	stopWatch := s.startWatched(ctx, s.watchMixed)
	s.withFaults(ctx, s.produceGroup, s.chaosMixed)

	drained := s.drainGroup(ctx)
	stopWatch()
	stopWorkers(s.liveSlots())
	return s.mixedResult(ctx, drained), nil
}

// chaosMixed injects, over the run's first 70%, the soak's crashes,
// pauses, drains, rewinds and resets; crashes of a stream's first-lease
// holder, of a deputy, of both together, and a coordinator's failing
// listings; a split of the first stream and a merge of the third; and the
// sources' set changes. Two quiet crashes follow (quietCrash).
func (s *soak) chaosMixed(ctx context.Context) {
	cfg := s.cfg
	window := cfg.Duration * 70 / 100
	down := func() time.Duration { return cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(2*cfg.Lease)) }
	evs := s.faultEvents(window, func(n int) []event {
		var evs []event
		for i := range max(3, n/2) {
			evs = append(evs, event{at: s.jitter(window), kind: EvCrashFirst, slot: i % mixedStreams, d: down()})
		}
		for i := range max(2, n/4) {
			evs = append(evs, event{at: s.jitter(window), kind: EvCrashDeputy, d: down()},
				event{at: s.jitter(window), kind: EvCrashJoint, slot: i % mixedStreams, d: down()},
				event{at: s.jitter(window), kind: EvListsFail})
		}
		return evs
	})
	// Once the other faults are over and their restarts due, the quiet
	// crashes (quietCrash): two streams' coordinators, the seed picks
	// which, stay down past the untaken bound.
	for i := range 2 {
		evs = append(evs, event{at: min(window+time.Duration(3+2*i)*cfg.Lease, cfg.Duration-cfg.Lease), kind: EvQuietCrash, slot: (int(cfg.Seed) + i) % mixedStreams})
	}
	for i, ch := range s.mix.changes {
		evs = append(evs, event{at: cfg.Duration * time.Duration(ch.num) / time.Duration(ch.den), kind: EvSetChanged, slot: i})
	}
	s.inject(ctx, evs, func(ev event) {
		switch ev.kind {
		case EvCrashFirst:
			s.operator.Go(func() { s.crashFirst(ctx, ev.slot, ev.d) })
		case EvCrashDeputy:
			s.operator.Go(func() { s.crashDeputy(ctx, ev.d) })
		case EvQuietCrash:
			s.operator.Go(func() { s.quietCrash(ctx, s.mix.streams[ev.slot]) })
		case EvCrashJoint:
			s.crashFirstAndDeputy(ctx, s.mix.streams[ev.slot], ev.d)
		case EvListsFail:
			s.failLists()
		case EvSetChanged:
			s.changeSet(s.mix.changes[ev.slot])
		case EvSplit, EvMerge:
			stream := s.mix.streams[0]
			if ev.kind == EvMerge {
				stream = s.mix.streams[2]
			}
			if err := s.reshardStream(ctx, stream, ev.kind); err != nil {
				fmt.Fprintf(cfg.Events, "%6.1fs %s of %s failed: %v\n", s.since(), ev.kind, stream, err)
				s.counts.add(ev.kind+" failed", 1)
			} else {
				s.counts.add(ev.kind, 1)
			}
		}
	})
}

// changeSet applies one change of a source.
func (s *soak) changeSet(ch setChange) {
	set := ch.src.change(ch.stream, ch.add)
	s.counts.add(EvSetChanged, 1)
	verb := "removed " + ch.stream + " from"
	if ch.add {
		verb = "added " + ch.stream + " to"
	}
	fmt.Fprintf(s.cfg.Events, "%6.1fs %s source %s: it serves %v\n", s.since(), verb, ch.src.name, set)
}

// firstHolder returns the slot whose live incarnation runs the lowest
// shard of stream it holds: the holder of the stream's first readable
// lease, its coordinator.
func (s *soak) firstHolder(stream string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, lowest := -1, ""
	for slot, inc := range s.slots {
		if inc == nil || inc.consumer == nil || inc.crashed.Load() || inc.leaving.Load() {
			continue
		}
		for _, key := range inc.consumer.Held() {
			if strings.HasPrefix(key, stream+":") && (best < 0 || key < lowest) {
				best, lowest = slot, key
			}
		}
	}
	return best, best >= 0
}

// mixedDeputies returns the slots whose live incarnations hold a row of
// any stream that carries a deputy note, as the store shows them.
func (s *soak) mixedDeputies(ctx context.Context) []int {
	owners := map[string]bool{}
	for _, stream := range s.mix.streams {
		ls, err := s.memoryOrDynamo().List(ctx, stream)
		if err != nil {
			return nil
		}
		for _, l := range ls {
			if _, ok := balance.DeputyFirst(l.Note); ok && l.Owner != "" {
				owners[l.Owner] = true
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for slot, inc := range s.slots {
		if inc != nil && inc.consumer != nil && !inc.crashed.Load() && !inc.leaving.Load() && owners[inc.consumer.OwnerID()] {
			out = append(out, slot)
		}
	}
	return out
}

// crashDeputy crashes a live worker that holds a row with a deputy note,
// looking every quarter lease for one, for at most two leases or until ctx
// ends.
func (s *soak) crashDeputy(ctx context.Context, downtime time.Duration) {
	t := time.NewTicker(s.cfg.Lease / 4)
	defer t.Stop()
	for range 8 {
		if slots := s.mixedDeputies(ctx); len(slots) > 0 && ctx.Err() == nil {
			s.counts.add(EvCrashDeputy, 1)
			s.crash(slots[0], downtime)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	s.counts.add("deputy crash skipped (no deputy note for two leases)", 1)
}

// crashFirst crashes the holder of a stream's first lease: of stream i
// if it has a live holder, else of the next stream that has one, looking
// every quarter lease for six leases (crashes and restarts may leave a
// stream with no live reader for a while).
func (s *soak) crashFirst(ctx context.Context, i int, downtime time.Duration) {
	t := time.NewTicker(s.cfg.Lease / 4)
	defer t.Stop()
	for range 24 {
		for j := range mixedStreams {
			if slot, ok := s.firstHolder(s.mix.streams[(i+j)%mixedStreams]); ok && ctx.Err() == nil {
				s.counts.add(EvCrashFirst, 1)
				s.crash(slot, downtime)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	s.counts.add("first-lease holder crash skipped (none for six leases)", 1)
}

// quietCrash crashes the holder of stream's first lease, looking every
// quarter lease for one until ctx ends, and restarts it once the untaken
// bound and the longest lease have passed. The random faults are over
// (chaosMixed's window) and their restarts due: the fleet is quiet, as
// where the table was measured, and no restart of the crashed
// worker mends what the live workers that read the stream leave untaken,
// whatever their kind.
func (s *soak) quietCrash(ctx context.Context, stream string) {
	t := time.NewTicker(s.cfg.Lease / 4)
	defer t.Stop()
	for {
		if slot, ok := s.firstHolder(stream); ok && ctx.Err() == nil {
			s.counts.add(EvQuietCrash, 1)
			s.crash(slot, s.cfg.untakenBound()+2*s.cfg.longestLease())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// crashFirstAndDeputy crashes the holder of stream's first lease and a
// deputy of another slot together (another slot when no deputy shows).
func (s *soak) crashFirstAndDeputy(ctx context.Context, stream string, downtime time.Duration) {
	first, ok := s.firstHolder(stream)
	if !ok {
		return
	}
	other := (first + 1) % s.cfg.Workers
	for _, d := range s.mixedDeputies(ctx) {
		if d != first {
			other = d
			break
		}
	}
	s.counts.add(EvCrashJoint, 1)
	s.crash(first, downtime)
	s.crash(other, downtime)
}
