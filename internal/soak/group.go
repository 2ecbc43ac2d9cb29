package soak

// The group mode (Config.Group): each worker runs one shardlease.Group
// over three streams, read from a source that every worker polls (one
// list of specs under a lock, the way a config service would serve it).
// While the faults run, a fourth stream is added to the source (its
// records, produced from the start, must all be handled: it is read from
// TRIM_HORIZON) and one of the three is removed. Of the removed stream,
// the records produced before its removal up to the last checkpoint of
// their shard must have been handled; the records produced after it need
// not be; and once SourceInterval, the longest lease duration and a grace
// have passed since the removal, no live worker may hold one of its leases
// or enter a handler of it. The groups delete a removed stream's rows
// (DeleteRemovedAfter); once they are gone the stream is added back, read
// from TRIM_HORIZON, and every one of its records must be handled again
// (group_readd.go). The other audits (lost, duplicates, overlaps,
// fencing, partition-key order, the fenced sink) run over every stream,
// per stream and in total; overlaps are keyed by stream and shard.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// groupStreams is how many streams a group reads at the start.
const groupStreams = 3

// Event kinds of the group mode.
const (
	EvStreamAdded   = "stream added to the group's source"
	EvStreamRemoved = "stream removed from the group's source"
	EvSourceFailed  = "stream source call failed (the set stays)"
)

// worker is what the soak needs of a worker: a Consumer, or a Group
// through groupWorker.
type worker interface {
	Run(ctx context.Context) error
	OwnerID() string
	Held() []string
	Drain(ctx context.Context) error
	Stats() shardlease.Stats
	Status() shardlease.Status
}

// groupWorker is a Group as a worker: Held names its leases
// "stream:shard".
type groupWorker struct{ *shardlease.Group }

func (g groupWorker) Held() []string {
	var out []string
	for _, k := range g.Group.Held() {
		out = append(out, k.String())
	}
	return out
}

// groupState is the group mode's side of a soak.
type groupState struct {
	name    string   // the group's
	streams []string // every stream: the three at the start, then the one added
	added   string   // joins the source at addAt
	removed string   // leaves it at removeAt

	mu       sync.Mutex // the source's list and the times below
	specs    []shardlease.StreamSpec
	addedAt  time.Time
	removeAt time.Time // zero until removed
	readdAt  time.Time // zero until added back, its rows deleted (group_readd.go)

	// under soak.mu
	streamOf    map[string]string    // record id → stream
	putAt       map[string]time.Time // record id → when its put returned
	shardOf     map[string]string    // record id → the shard its put went to
	lateHeld    map[string]bool      // "worker holds lease" after the removal bound
	lateEntered []string             // handler calls of the removed stream after the bound
}

// source returns the specs the source serves now.
func (g *groupState) source() []shardlease.StreamSpec {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.specs)
}

// removalBound is how long after the removal a live worker may still hold
// a lease of the removed stream: a source interval for every worker to
// poll, the longest lease duration of the fleet, and a grace of two of
// them for the batch in hand (a slow or deaf one takes 1.5 leases), the
// final checkpoint and the release under faults.
func (c *Config) removalBound() time.Duration {
	long := c.longestLease()
	return c.SourceInterval + long + 2*long
}

// streamOfID returns the stream a record id was produced to. s.mu is held.
func (s *soak) streamOfID(id string) string {
	if s.grp == nil {
		return s.cfg.Stream
	}
	return s.grp.streamOf[id]
}

// enteredAfterRemoval records a handler call of the removed stream entered
// once the removal bound passed. s.mu is held.
func (s *soak) enteredAfterRemoval(inc *incarnation, stream, shard string, deaf bool) {
	if s.grp == nil || stream != s.grp.removed {
		return
	}
	at := s.grp.outSince()
	if at.IsZero() || time.Since(at) <= s.cfg.removalBound() {
		return
	}
	s.grp.lateEntered = append(s.grp.lateEntered, fmt.Sprintf("%s entered a handler of %s:%s %v after its removal", inc.id, stream, shard, time.Since(at).Round(time.Millisecond)))
}

// newGroupWorker returns the Group of an incarnation: the soak's source,
// whose calls fail at the fault rate (never the first: it would fail Run).
func (s *soak) newGroupWorker(inc *incarnation, kin shardlease.KinesisAPI, store shardlease.LeaseStore, opts []shardlease.Option) (worker, error) {
	src := s.faultySource(inc, s.grp.source)
	g, err := shardlease.NewGroup(kin, &groupListStore{troubleStore: store.(*troubleStore)}, shardlease.GroupConfig{
		Name: s.grp.name, Source: src, SourceInterval: s.cfg.SourceInterval, DeleteRemovedAfter: s.cfg.SourceInterval,
	}, s.handler(inc), opts...)
	if err != nil {
		return nil, err
	}
	return groupWorker{g}, nil
}

// groupListStore adds the group's listing (shardlease.GroupLister) to a
// worker's store, through its faults: one Scan.
type groupListStore struct{ *troubleStore }

func (t *groupListStore) ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]shardlease.Lease, []shardlease.Worker, error) {
	return t.LeaseStore.(shardlease.GroupLister).ListStreams(ctx, streams, workersOf, consistent)
}

// ListStreams passes the group's listing on through the fake world's
// faults and audit.
func (s *faultStore) ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]shardlease.Lease, []shardlease.Worker, error) {
	type both struct {
		l []shardlease.Lease
		w []shardlease.Worker
	}
	got, err := storeCall(s.in, "Scan", false, both{}, func() (both, error) {
		l, w, err := s.next.(shardlease.GroupLister).ListStreams(ctx, streams, workersOf, consistent)
		return both{l, w}, err
	})
	return got.l, got.w, err
}

func (s *auditStore) ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]shardlease.Lease, []shardlease.Worker, error) {
	return s.LeaseStore.(shardlease.GroupLister).ListStreams(ctx, streams, workersOf, consistent)
}

// runGroup is Run in the group mode.
func (s *soak) runGroup(ctx context.Context) (*Result, error) {
	cfg := s.cfg
	g := &groupState{name: cfg.Stream + "-group", streamOf: map[string]string{}, putAt: map[string]time.Time{}, shardOf: map[string]string{}, lateHeld: map[string]bool{}}
	for _, suffix := range []string{"a", "b", "c", "d"} {
		g.streams = append(g.streams, cfg.Stream+"-"+suffix)
	}
	g.added, g.removed = g.streams[3], g.streams[2]
	for _, name := range g.streams[:groupStreams] {
		g.specs = append(g.specs, shardlease.StreamSpec{Name: name})
	}
	s.grp = g
	if err := s.setupGroup(ctx); err != nil {
		return nil, err
	}
	stopWatch := s.startWatched(ctx, s.watchRemoved)
	s.withFaults(ctx, s.produceGroup, s.chaosGroup)

	// The removal's bound must have passed before the drain ends, so that
	// the watch sees every worker past it.
	drained := s.drainGroup(ctx)
	if at := g.outSince(); !at.IsZero() {
		t := time.NewTimer(time.Until(at.Add(cfg.removalBound() + cfg.Lease)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	stopWatch()
	stopWorkers(s.liveSlots())
	return s.groupResult(ctx, drained), nil
}

// setupGroup makes the table (or the MemoryStore), the sink and the four
// streams.
func (s *soak) setupGroup(ctx context.Context) error {
	cfg := s.cfg
	if err := s.setupStore(ctx); err != nil {
		return err
	}
	for _, name := range s.grp.streams {
		if _, err := cfg.Kinesis.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(cfg.Shards))}); err != nil {
			return fmt.Errorf("soak: create stream %s: %w", name, err)
		}
	}
	for _, name := range s.grp.streams {
		err := s.untilActive(ctx, func() error {
			_, err := cfg.Kinesis.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// produceGroup writes records with unique ids to every stream, the added
// one from the start and the removed one after its removal too, until ctx
// is done.
func (s *soak) produceGroup(ctx context.Context) {
	s.atRate(ctx, func(n int, every time.Duration) {
		for _, stream := range s.grp.streams {
			s.put(ctx, stream, n, every)
		}
	})
}

// put writes record n of stream.
func (s *soak) put(ctx context.Context, stream string, n int, every time.Duration) {
	id, key, data := s.record(stream+"/", n)
	s.mu.Lock()
	s.keyOf[id] = key // before the put: a reader may see it at once
	s.grp.streamOf[id] = stream
	s.mu.Unlock()
	s.putRetrying(ctx, stream, id, key, data, every, func(out *kinesis.PutRecordOutput) {
		s.grp.putAt[id] = time.Now()
		s.grp.shardOf[id] = aws.ToString(out.ShardId)
	})
}

// chaosGroup injects the soak's crashes, pauses, drains, rewinds, a split
// and a merge (of the first and second streams), adds the fourth stream to
// the source at a quarter of the run and removes the third at a third of
// it, to add it back once its rows are deleted (group_readd.go).
func (s *soak) chaosGroup(ctx context.Context) {
	cfg := s.cfg
	window := cfg.Duration * 85 / 100
	evs := s.faultEvents(window, func(int) []event { return nil })
	evs = append(evs, event{at: cfg.Duration / 4, kind: EvStreamAdded}, event{at: cfg.Duration / 3, kind: EvStreamRemoved})
	s.inject(ctx, evs, func(ev event) {
		switch ev.kind {
		case EvStreamAdded:
			s.grp.mu.Lock()
			s.grp.specs = append(s.grp.specs, shardlease.StreamSpec{Name: s.grp.added, Position: shardlease.TrimHorizon})
			s.grp.addedAt = time.Now()
			s.grp.mu.Unlock()
			s.counts.add(EvStreamAdded, 1)
			fmt.Fprintf(cfg.Events, "%6.1fs added %s to the source (from TRIM_HORIZON)\n", s.since(), s.grp.added)
		case EvStreamRemoved:
			s.grp.mu.Lock()
			s.grp.specs = slices.DeleteFunc(s.grp.specs, func(sp shardlease.StreamSpec) bool { return sp.Name == s.grp.removed })
			s.grp.removeAt = time.Now()
			s.grp.mu.Unlock()
			s.counts.add(EvStreamRemoved, 1)
			fmt.Fprintf(cfg.Events, "%6.1fs removed %s from the source; its leases must be free of live workers within %v\n", s.since(), s.grp.removed, cfg.removalBound())
			s.operator.Go(func() { s.readdOnceDeleted(ctx) })
		case EvSplit, EvMerge:
			stream := s.grp.streams[0]
			if ev.kind == EvMerge {
				stream = s.grp.streams[1]
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

// watchRemoved checks, every twentieth of a lease once the removal bound
// has passed, that no live worker (not crashed, not frozen) holds a lease
// of the removed stream.
func (s *soak) watchRemoved(ctx context.Context) {
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	prefix := s.grp.removed + ":"
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := s.grp.outSince()
		if at.IsZero() || time.Since(at) <= s.cfg.removalBound() {
			continue
		}
		for _, inc := range s.liveSlots() {
			if inc == nil || inc.consumer == nil || inc.crashed.Load() || inc.freeze.frozen() != nil {
				continue
			}
			for _, k := range inc.consumer.Held() {
				if strings.HasPrefix(k, prefix) {
					s.mu.Lock()
					s.grp.lateHeld[fmt.Sprintf("%s holds %s", inc.id, k)] = true
					s.mu.Unlock()
				}
			}
		}
	}
}

// required returns the ids each stream's records must have been handled
// by: every record of the streams in the set, and of the removed one those
// produced before the removal up to the checkpoint of their shard as the
// table holds it; and the removed stream's records past that checkpoint
// (before the removal) and after the removal. s.mu is held.
func (s *soak) required(ctx context.Context) (req map[string][]string, pastCheckpoint, afterRemoval int, err error) {
	removeAt := s.grp.outSince() // every record is read again once added back
	cps := map[string]string{}
	if !removeAt.IsZero() {
		ls, lerr := s.memoryOrDynamo().List(ctx, s.grp.removed)
		if lerr != nil {
			return nil, 0, 0, lerr
		}
		for _, l := range ls {
			cps[l.Key.Shard] = l.Checkpoint
		}
	}
	req = map[string][]string{}
	for _, id := range s.produced {
		stream := s.grp.streamOf[id]
		if stream == s.grp.removed && !removeAt.IsZero() {
			if !s.grp.putAt[id].Before(removeAt) {
				afterRemoval++
				continue
			}
			if !s.checkpointed(id, cps) {
				pastCheckpoint++
				continue
			}
		}
		req[stream] = append(req[stream], id)
	}
	return req, pastCheckpoint, afterRemoval, nil
}

// checkpointed reports whether the checkpoint of the shard the record id
// was put to (cps, by shard) is at or past it.
func (s *soak) checkpointed(id string, cps map[string]string) bool {
	cp := cps[s.grp.shardOf[id]]
	return cp == shardlease.ShardEnd || cp != "" && seqnum.Compare(cp, s.seqOf[id]) >= 0
}

// drainGroup waits until every required record was handled (and its
// effect is in the sink), or the drain time is up.
func (s *soak) drainGroup(ctx context.Context) bool {
	deadline := time.Now().Add(s.cfg.Drain)
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	for {
		s.mu.Lock()
		req, _, _, err := s.required(ctx)
		missing := 0
		for _, ids := range req {
			for _, id := range ids {
				if len(s.handled[id]) == 0 || !s.sinkDrained(id) {
					missing++
				}
			}
		}
		s.mu.Unlock()
		if err == nil && missing == 0 {
			fmt.Fprintf(s.cfg.Events, "%6.1fs drained\n", s.since())
			return true
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.cfg.Events, "%6.1fs drain timed out with %d records unhandled (%v)\n", s.since(), missing, err)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// StreamResult is one stream's figures in a group soak.
type StreamResult struct {
	Name string
	Role string // "read from the start", "added", "removed"
	// Produced counts every record written to the stream; Audited those
	// that had to be handled (all of them but the removed stream's past
	// its last checkpoint or written after its removal).
	Produced, Audited                     int
	Handled, DeadLettered                 int
	Lost, Duplicates, DupUnexplained      int
	Overlaps                              int
	Keys, KeysOutOfOrder                  int
	HeldAtEnd                             int
	HandedAtRemoval                       int  // rows left owned by the taker of a handoff the removal overtook
	PastCheckpoint, AfterRemoval          int  // the removed stream's records not audited
	HeldAfterRemoval, EnteredAfterRemoval int  // live workers holding / handling it past the bound
	Readded                               bool // added back once its rows were deleted: every record audited
	RemovalBound                          time.Duration
}

// groupResult is result for the group mode: the totals over the audited
// records of every stream, and each stream's figures.
func (s *soak) groupResult(ctx context.Context, drained bool) *Result {
	s.mu.Lock()
	all := slices.Clone(s.produced)
	req, pastCp, afterRm, err := s.required(ctx)
	var audited []string
	for _, name := range s.grp.streams {
		audited = append(audited, req[name]...)
	}
	s.produced = audited // the totals audit what had to be handled
	s.mu.Unlock()

	r := s.result(ctx, drained)
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	if err != nil {
		problem("listing the removed stream's rows: %v", err)
	}
	r.Group = true
	r.SourceInterval = s.cfg.SourceInterval

	s.mu.Lock()
	defer s.mu.Unlock()
	produced := map[string]int{}
	for _, id := range all {
		produced[s.grp.streamOf[id]]++
	}
	r.Produced = len(all)
	store := s.memoryOrDynamo()
	for _, name := range s.grp.streams {
		sr := StreamResult{Name: name, Role: "read from the start", Produced: produced[name], Audited: len(req[name]), Overlaps: s.overlapsOf[name]}
		part := &Result{}
		s.recordAudit(part, req[name], func(string, ...any) {})
		sr.Handled, sr.DeadLettered, sr.Lost, sr.Duplicates, sr.DupUnexplained = part.Handled, part.DeadLettered, part.Lost, part.Duplicates, part.DupUnexplained
		sr.Keys, sr.KeysOutOfOrder = part.Keys, part.KeysOutOfOrder
		ls, lerr := store.List(ctx, name)
		if lerr != nil {
			problem("listing the leases of %s at the end: %v", name, lerr)
		}
		switch name {
		case s.grp.added:
			sr.Role = fmt.Sprintf("added at %.1fs, from TRIM_HORIZON", s.grp.addedAt.Sub(s.start).Seconds())
		case s.grp.removed:
			s.removedResult(&sr, pastCp, afterRm, problem)
		}
		// A removed stream's row may keep the owner of a worker that
		// crashed holding it: nobody takes it again. A worker that
		// stopped gracefully released it.
		for _, l := range ls {
			if l.Owner == "" || name == s.grp.removed && s.grp.readdAt.IsZero() && s.crashedOwner(l.Owner) {
				continue
			}
			if name == s.grp.removed && s.audit.handedOver(l.Key.String(), l.Owner) {
				// The holder's release handed it to a worker that had
				// asked for it, just as the stream left: that worker must
				// release it (the group does, from its removed streams'
				// listings), or the row stays owned for good.
				sr.HandedAtRemoval++
			}
			sr.HeldAtEnd++
			r.HeldAtEnd++
			problem("lease %s still held by %s after every worker stopped (%s)", l.Key, l.Owner, s.audit.lastWrites(l.Key.String(), 3))
		}
		r.Streams = append(r.Streams, sr)
	}
	if s.grp.addedAt.IsZero() {
		problem("stream %s was never added", s.grp.added)
	}
	return r
}

// removedResult fills in the removed stream's own figures: its records
// not audited, and the leases held and handlers entered past the removal
// bound; and whether it was added back. s.mu is held.
func (s *soak) removedResult(sr *StreamResult, pastCp, afterRm int, problem func(string, ...any)) {
	sr.Role = fmt.Sprintf("removed at %.1fs", s.grp.removeAt.Sub(s.start).Seconds())
	sr.PastCheckpoint, sr.AfterRemoval = pastCp, afterRm
	sr.RemovalBound = s.cfg.removalBound()
	sr.HeldAfterRemoval = len(s.grp.lateHeld)
	sr.EnteredAfterRemoval = len(s.grp.lateEntered)
	for _, e := range slices.Sorted(maps.Keys(s.grp.lateHeld)) {
		problem("lease of the removed stream held %v after its removal: %s", sr.RemovalBound, e)
	}
	for i, e := range s.grp.lateEntered {
		if i < 5 {
			problem("handler of the removed stream entered past the bound: %s", e)
		}
	}
	if s.grp.removeAt.IsZero() {
		problem("stream %s was never removed", sr.Name)
	}
	if !s.grp.readdAt.IsZero() {
		sr.Role += fmt.Sprintf(", its rows deleted, added back at %.1fs from TRIM_HORIZON", s.grp.readdAt.Sub(s.start).Seconds())
		sr.Readded = true
	}
}

// crashedOwner reports whether an incarnation with that owner id crashed.
// s.mu is held.
func (s *soak) crashedOwner(owner string) bool {
	return slices.ContainsFunc(s.all, func(inc *incarnation) bool {
		return inc.crashed.Load() && inc.consumer != nil && inc.consumer.OwnerID() == owner
	})
}

// streamsTable prints each stream's figures, in the rows of Table.
func (r *Result) streamsTable(b *strings.Builder, ok func(bool) string) {
	row := func(name string, v any, verdict string) { fmt.Fprintf(b, "  %-56s %8v  %s\n", name, v, verdict) }
	for _, st := range r.Streams {
		fmt.Fprintf(b, "\n%-58s %8s\n", fmt.Sprintf("stream %s (%s)", st.Name, st.Role), "figure")
		row("records produced", st.Produced, "")
		row("records audited (to be handled)", st.Audited, "")
		if st.RemovalBound > 0 {
			row("  not audited: produced before removal, past the checkpoint", st.PastCheckpoint, "")
			row("  not audited: produced after removal", st.AfterRemoval, "")
		}
		row("records handled (distinct, of those audited)", st.Handled, "")
		row("  of which dead-lettered (poison, after every attempt)", st.DeadLettered, "")
		row("lost (audited, never handled)", st.Lost, ok(st.Lost == 0))
		row("duplicates (handled more than once)", st.Duplicates, "")
		row("  unexplained", st.DupUnexplained, ok(st.DupUnexplained == 0))
		row("overlaps: handlers of one shard running at once", st.Overlaps, ok(st.Overlaps == 0))
		row(fmt.Sprintf("partition keys out of order (of %d)", st.Keys), st.KeysOutOfOrder, ok(st.KeysOutOfOrder == 0))
		row("leases still held after the graceful stop", st.HeldAtEnd, ok(st.HeldAtEnd == 0))
		if st.RemovalBound > 0 {
			row(fmt.Sprintf("leases held by live workers %v after removal", st.RemovalBound), st.HeldAfterRemoval, ok(st.HeldAfterRemoval == 0))
			row(fmt.Sprintf("handlers entered %v after removal", st.RemovalBound), st.EnteredAfterRemoval, ok(st.EnteredAfterRemoval == 0))
			row("rows left owned: handed over as the stream left, never released", st.HandedAtRemoval, ok(st.HandedAtRemoval == 0))
		}
	}
}

// streamsSummary prints a summary line per stream.
func (r *Result) streamsSummary(b *strings.Builder) {
	for _, st := range r.Streams {
		fmt.Fprintf(b, "summary %s: produced %d, audited %d, lost %d, overlaps %d\n", st.Name, st.Produced, st.Audited, st.Lost, st.Overlaps)
	}
}

// lastWrites describes the last n writes the audit saw accepted on key.
func (a *auditor) lastWrites(key string, n int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for i := len(a.writes) - 1; i >= 0 && len(out) < n; i-- {
		if w := a.writes[i]; w.key == key {
			out = append(out, fmt.Sprintf("%s by %s at %v, owner %q counter %d", w.op, w.by, w.at.Format("15:04:05.000"), w.owner, w.counter))
		}
	}
	return "last writes: " + strings.Join(out, "; ")
}

// handedOver reports whether the last write accepted on key was a release
// by another owner that handed the row to owner (a handoff completed).
func (a *auditor) handedOver(key, owner string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.writes) - 1; i >= 0; i-- {
		w := a.writes[i]
		if w.key != key || w.op == "observed" {
			continue
		}
		return w.op == "release" && w.owner == owner && w.claimOwner != owner
	}
	return false
}
