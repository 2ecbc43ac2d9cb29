package shardlease_test

// The mixed fleet of the TestFleetMixed tests: Consumers and Group workers
// with different stream sets on one lease table, each with a crash switch,
// a handler that watches for two readers of one shard at once, a producer
// that keeps every stream busy, and the measure of a failover: from a crash
// to the moment every lease the crashed workers held is run by a live
// worker that reads its stream.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
)

// firstShard is the shard id of a stream's first lease in both worlds (no
// test here splits or merges a shard).
const firstShard = "shardId-000000000000"

// mixedMember is one worker of a mixed fleet: a Consumer of one stream or
// a worker of a Group.
type mixedMember struct {
	name  string
	group string // the Group's name; "" for a Consumer
	c     *shardlease.Consumer
	g     *shardlease.Group
	src   *source // the Group's source, nil with a fixed stream list
	sw    *crash.Switch
}

func (m *mixedMember) String() string {
	if m.g != nil {
		return fmt.Sprintf("%s (group %s %v)", m.name, m.group, m.g.Streams())
	}
	return fmt.Sprintf("%s (consumer of %s)", m.name, m.c.Stream())
}

func (m *mixedMember) live() bool { return !m.sw.Down() }

func (m *mixedMember) owner() string {
	if m.g != nil {
		return m.g.OwnerID()
	}
	return m.c.OwnerID()
}

func (m *mixedMember) stats() shardlease.Stats {
	if m.g != nil {
		return m.g.Stats()
	}
	return m.c.Stats()
}

// held returns the leases the worker runs, by their row keys.
func (m *mixedMember) held() []shardlease.LeaseKey {
	if m.g != nil {
		return m.g.Held()
	}
	var out []shardlease.LeaseKey
	for _, s := range m.c.Held() {
		out = append(out, shardlease.LeaseKey{Stream: m.c.Stream(), Shard: s})
	}
	return out
}

// reads reports whether stream is in the worker's set now.
func (m *mixedMember) reads(stream string) bool {
	if m.g != nil {
		return slices.Contains(m.g.Streams(), stream)
	}
	return m.c.Stream() == stream
}

// holdsFirst reports whether the worker runs the first lease of a stream.
func (m *mixedMember) holdsFirst() bool {
	return slices.ContainsFunc(m.held(), func(k shardlease.LeaseKey) bool { return k.Shard == firstShard })
}

// coordinates reports whether the worker coordinates a stream, as its
// Stats say or as the first lease it runs makes it.
func (m *mixedMember) coordinates() bool { return m.stats().Coordinating || m.holdsFirst() }

// mixedOverlaps watches handler calls from entry to exit per row key and
// records each time a handler was entered while another one of the same
// shard of the same stream was still running: two readers of one shard.
type mixedOverlaps struct {
	mu      sync.Mutex
	running map[string][]string // stream:shard → workers in a handler call of it now
	found   []string
	calls   int
}

// handler returns worker's handler: it records the call and works for
// work, or until its context ends.
func (o *mixedOverlaps) handler(worker string, work time.Duration) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		key := shardlease.LeaseKey{Stream: b.Stream, Shard: b.ShardID}.String()
		o.mu.Lock()
		o.calls++
		if len(o.running[key]) > 0 {
			o.found = append(o.found, fmt.Sprintf("%s handed to %s at %s while %v still handled a batch of it",
				key, worker, time.Now().Format("15:04:05.000"), o.running[key]))
		}
		o.running[key] = append(o.running[key], worker)
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			i := slices.Index(o.running[key], worker)
			o.running[key] = slices.Delete(o.running[key], i, i+1)
			o.mu.Unlock()
		}()
		timer := time.NewTimer(work)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		return nil
	}
}

// mixedFleet is a mixed fleet on the world's table.
type mixedFleet struct {
	w       *world
	streams []string // every stream some worker of the fleet reads
	members []*mixedMember
	ov      *mixedOverlaps

	mu      sync.Mutex
	skipped map[string]bool // streams the producer no longer writes to
}

// newMixedFleet returns an empty fleet over streams and starts a producer
// that writes four records to each of them every half take interval until
// the test ends: with handlers that work half a take interval a batch (see
// handler), a reader is inside its handler most of the time, so a second
// reader of its shard would be caught.
func newMixedFleet(t *testing.T, w *world, streams ...string) *mixedFleet {
	t.Helper()
	f := &mixedFleet{w: w, streams: streams, ov: &mixedOverlaps{running: map[string][]string{}}, skipped: map[string]bool{}}
	done, exited := make(chan struct{}), make(chan error, 1)
	go func() { exited <- f.produce(done, w.take/2) }()
	t.Cleanup(func() {
		close(done)
		assert.NoError(t, <-exited, "the producer")
	})
	return f
}

func (f *mixedFleet) produce(done chan struct{}, gap time.Duration) error {
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-done:
			return nil
		case <-tick.C:
		}
		for _, s := range f.streams {
			if err := f.put(s, n); err != nil {
				return err
			}
		}
	}
}

// put writes the producer's four records of round n to stream, unless it
// was skipped: under f.mu, so that skip returns only once no put to the
// stream is under way.
func (f *mixedFleet) put(stream string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.skipped[stream] {
		return nil
	}
	for i := range 4 {
		_, err := f.w.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{
			StreamName: aws.String(stream), PartitionKey: aws.String(fmt.Sprintf("key-%03d-%d", n%16, i)), Data: fmt.Appendf(nil, "%s/rec-%06d-%d", stream, n, i),
		})
		if err != nil {
			return fmt.Errorf("put to %s: %w", stream, err)
		}
	}
	return nil
}

// skip makes the producer write no more to stream: once it returns, no put
// to it is under way.
func (f *mixedFleet) skip(stream string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skipped[stream] = true
}

// listings returns the table listings of the live workers so far.
func (f *mixedFleet) listings() int64 {
	var n int64
	for _, m := range f.members {
		if m.live() {
			n += m.stats().TableListings
		}
	}
	return n
}

// opts returns the options of a fleet worker: the world's timings with the
// default take interval's idle polling, as startLiveWorker gives.
func (f *mixedFleet) opts(name string) []shardlease.Option {
	return f.w.opts(name, shardlease.WithIdlePollInterval(max(f.w.idle, f.w.take)))
}

// consumer starts a Consumer of the world's stream named name.
func (f *mixedFleet) consumer(t *testing.T, name string) *mixedMember {
	t.Helper()
	sw := &crash.Switch{}
	wk := startWorker(t, f.w, crash.Kinesis(f.w.kin, sw), crash.Store(f.w.store, sw), f.ov.handler(name, f.w.take/2), f.opts(name)...)
	m := &mixedMember{name: name, c: wk.c, sw: sw}
	f.members = append(f.members, m)
	return m
}

// group starts a worker named name of the Group named group over streams.
func (f *mixedFleet) group(t *testing.T, name, group string, streams ...string) *mixedMember {
	t.Helper()
	return f.groupWith(t, name, shardlease.GroupConfig{Name: group, Streams: specsOf(streams...)}, nil)
}

// sourced starts a worker named name of the Group named group that follows
// a source of its own, returning streams until the test changes it.
func (f *mixedFleet) sourced(t *testing.T, name, group string, streams ...string) *mixedMember {
	t.Helper()
	src := newSource(streams...)
	return f.groupWith(t, name, shardlease.GroupConfig{Name: group, Source: src.get, SourceInterval: f.w.take}, src)
}

func (f *mixedFleet) groupWith(t *testing.T, name string, cfg shardlease.GroupConfig, src *source) *mixedMember {
	t.Helper()
	sw := &crash.Switch{}
	g, err := shardlease.NewGroup(crash.Kinesis(f.w.kin, sw), crash.Store(f.w.store, sw), cfg, f.ov.handler(name, f.w.take/2), f.opts(name)...)
	if err != nil {
		t.Fatalf("group worker %s of %s: %v", name, cfg.Name, err)
	}
	runGroup(t, g)
	m := &mixedMember{name: name, group: cfg.Name, g: g, src: src, sw: sw}
	f.members = append(f.members, m)
	return m
}

// byOwner returns the member whose owner id is owner, nil if none.
func (f *mixedFleet) byOwner(owner string) *mixedMember {
	for _, m := range f.members {
		if m.owner() == owner {
			return m
		}
	}
	return nil
}

// rows returns the unfinished lease rows of the fleet's streams.
func (f *mixedFleet) rows(t *testing.T) []shardlease.Lease {
	t.Helper()
	var out []shardlease.Lease
	for _, s := range f.streams {
		for _, l := range streamRows(t, f.w, s) {
			if l.Checkpoint != shardlease.ShardEnd {
				out = append(out, l)
			}
		}
	}
	return out
}

// unsettled says why the fleet is not settled, "" when it is: every row of
// its streams is owned by a live worker that runs it and reads its stream,
// no handoff is pending, and no live worker runs a row it does not own.
func (f *mixedFleet) unsettled(t *testing.T) string {
	t.Helper()
	owned := map[string][]shardlease.LeaseKey{}
	for _, l := range f.rows(t) {
		m := f.byOwner(l.Owner)
		switch {
		case m == nil || !m.live():
			return fmt.Sprintf("%s is owned by %q, no live worker", l.Key, l.Owner)
		case l.HandoffTo != "":
			return fmt.Sprintf("%s is being handed from %s to %q", l.Key, m.name, l.HandoffTo)
		case !m.reads(l.Key.Stream):
			return fmt.Sprintf("%s is owned by %s, which does not read %s", l.Key, m, l.Key.Stream)
		}
		owned[m.owner()] = append(owned[m.owner()], l.Key)
	}
	for _, m := range f.members {
		if !m.live() {
			continue
		}
		held, want := keyStrings(m.held()), keyStrings(owned[m.owner()])
		if !slices.Equal(held, want) {
			return fmt.Sprintf("%s runs %v, the table gives it %v", m, held, want)
		}
	}
	return ""
}

func keyStrings(keys []shardlease.LeaseKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

// settle waits until the fleet has settled and stayed so, with the same
// owners, for three take intervals.
func (f *mixedFleet) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * f.w.lease)
	for {
		why := f.unsettled(t)
		if why == "" {
			before := f.owners(t)
			time.Sleep(3 * f.w.take)
			if why = f.unsettled(t); why == "" && slices.Equal(before, f.owners(t)) {
				return
			}
			if why == "" {
				why = "leases still moving"
			}
		} else {
			time.Sleep(f.w.take / 4)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mixed fleet did not settle within 20 lease durations: %s\nroles: %s", why, f.roles(t))
		}
	}
}

// owners returns "key=owner" for every row of the fleet's streams, sorted.
func (f *mixedFleet) owners(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range f.rows(t) {
		out = append(out, l.Key.String()+"="+l.Owner)
	}
	slices.Sort(out)
	return out
}

// deputies returns the live workers a row of the fleet's streams names
// deputy (its note begins "deputy "), whatever first lease the note names.
func (f *mixedFleet) deputies(t *testing.T) []*mixedMember {
	t.Helper()
	var out []*mixedMember
	for _, l := range f.rows(t) {
		if !strings.HasPrefix(l.Note, "deputy ") {
			continue
		}
		if m := f.byOwner(l.Owner); m != nil && m.live() && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// firstHolder returns the live worker that runs stream's first lease.
func (f *mixedFleet) firstHolder(t *testing.T, stream string) *mixedMember {
	t.Helper()
	for _, m := range f.members {
		if m.live() && slices.Contains(m.held(), shardlease.LeaseKey{Stream: stream, Shard: firstShard}) {
			return m
		}
	}
	t.Fatalf("no live worker runs %s:%s\nroles: %s", stream, firstShard, f.roles(t))
	return nil
}

// plain returns the live workers that run a lease of stream ("" for any)
// and neither coordinate nor are named deputy.
func (f *mixedFleet) plain(t *testing.T, stream string) []*mixedMember {
	t.Helper()
	deps := f.deputies(t)
	var out []*mixedMember
	for _, m := range f.members {
		if !m.live() || m.coordinates() || slices.Contains(deps, m) {
			continue
		}
		if slices.ContainsFunc(m.held(), func(k shardlease.LeaseKey) bool { return stream == "" || k.Stream == stream }) {
			out = append(out, m)
		}
	}
	return out
}

// nonCoordinating returns the live workers that coordinate nothing and run
// a lease of stream.
func (f *mixedFleet) nonCoordinating(t *testing.T, stream string) []*mixedMember {
	t.Helper()
	var out []*mixedMember
	for _, m := range f.members {
		if m.live() && !m.coordinates() && slices.ContainsFunc(m.held(), func(k shardlease.LeaseKey) bool { return k.Stream == stream }) {
			out = append(out, m)
		}
	}
	return out
}

// waitDeputy waits until a row names a deputy.
func (f *mixedFleet) waitDeputy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * f.w.lease)
	for len(f.deputies(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no row of %v named a deputy within 20 lease durations\nroles: %s", f.streams, f.roles(t))
		}
		time.Sleep(f.w.take / 4)
	}
}

// roles describes each worker: its kind and set, its role, its leases.
func (f *mixedFleet) roles(t *testing.T) string {
	t.Helper()
	deps := f.deputies(t)
	var b strings.Builder
	for _, m := range f.members {
		role := "plain"
		switch {
		case !m.live():
			role = "crashed"
		case m.coordinates():
			role = fmt.Sprintf("coordinator (Stats().Coordinating %v)", m.stats().Coordinating)
		case slices.Contains(deps, m):
			role = "deputy"
		}
		fmt.Fprintf(&b, "\n  %s: %s, runs %v", m, role, keyStrings(m.held()))
	}
	return b.String()
}

// failover crashes victims together (what says who they are) and waits
// until every lease they ran is run by a live worker that reads its
// stream. It asserts the README's bound for their roles: 2.5 L when one of
// them coordinated, else 1.4 L (L + T at the default take interval); then,
// a lease duration on, that no shard ever had two readers at once.
func (f *mixedFleet) failover(t *testing.T, what string, victims ...*mixedMember) {
	t.Helper()
	var lost []shardlease.LeaseKey
	want, rule := 14*f.w.lease/10, "1.4 L, a crashed worker's"
	for _, v := range victims {
		lost = append(lost, v.held()...)
		if v.coordinates() {
			want, rule = 25*f.w.lease/10, "2.5 L, a crashed coordinator's"
		}
	}
	if len(lost) == 0 {
		t.Fatalf("%s run no lease: nothing to fail over\nroles: %s", what, f.roles(t))
	}
	t.Logf("%s: crashing %s, running %v; roles:%s", f.w.name, what, keyStrings(lost), f.roles(t))
	limit := 20 * f.w.lease
	if f.w.name != "fake" {
		limit = 10 * f.w.lease
	}
	crashed := time.Now()
	for _, v := range victims {
		v.sw.Crash()
	}
	missing := f.notRunAgain(t, lost)
	for len(missing) > 0 && time.Since(crashed) <= limit {
		time.Sleep(10 * time.Millisecond)
		missing = f.notRunAgain(t, lost)
	}
	took := time.Since(crashed)
	inL := float64(took) / float64(f.w.lease)
	if len(missing) > 0 {
		t.Errorf("%s: %d of the %d leases %s ran were not run again by a live reader of their stream %.1f L after the crash (bound %s):\n  %s\nroles:%s",
			f.w.name, len(missing), len(lost), what, inL, rule, strings.Join(missing, "\n  "), f.roles(t))
	} else {
		t.Logf("%s: the %d leases %s ran were run again %.2f L after the crash (bound %s)", f.w.name, len(lost), what, inL, rule)
		assert.LessOrEqual(t, took, bound(f.w, want), "%s: the leases %s ran were run again %.2f L after the crash, past %s", f.w.name, what, inL, rule)
	}
	time.Sleep(f.w.lease)
	f.assertOneReader(t)
}

// notRunAgain describes each of keys that no live worker reading its
// stream runs: who owns its row now, and what that owner is.
func (f *mixedFleet) notRunAgain(t *testing.T, keys []shardlease.LeaseKey) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		if slices.ContainsFunc(f.members, func(m *mixedMember) bool {
			return m.live() && m.reads(k.Stream) && slices.Contains(m.held(), k)
		}) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s", k, f.ownerOf(k)))
	}
	return out
}

// ownerOf says who the table names as the owner of k's row.
func (f *mixedFleet) ownerOf(k shardlease.LeaseKey) string {
	l, err := f.w.store.Get(context.Background(), k)
	switch {
	case err != nil:
		return fmt.Sprintf("row unreadable: %v", err)
	case l.Owner == "":
		return fmt.Sprintf("free (counter %d)", l.Counter)
	}
	m := f.byOwner(l.Owner)
	switch {
	case m == nil:
		return fmt.Sprintf("held by %q, no worker of the fleet", l.Owner)
	case !m.live():
		return fmt.Sprintf("still held by the crashed %s (counter %d)", m, l.Counter)
	case !m.reads(k.Stream):
		return fmt.Sprintf("held by the live %s, which does not read %s", m, k.Stream)
	}
	return fmt.Sprintf("held by the live %s, which does not run it", m)
}

// assertOneReader asserts that handlers ran and never two of one shard at
// once.
func (f *mixedFleet) assertOneReader(t *testing.T) {
	t.Helper()
	f.ov.mu.Lock()
	defer f.ov.mu.Unlock()
	assert.Positive(t, f.ov.calls, "handlers ran")
	if n := len(f.ov.found); n > 0 {
		t.Errorf("%s: two readers of one shard at once, %d times; the first:\n  %s", f.w.name, n, strings.Join(f.ov.found[:min(n, 5)], "\n  "))
	}
}
