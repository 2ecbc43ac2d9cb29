package shardlease

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// member is one stream a consumer reads: what its readers, handler and
// shard sync need to know of it. A Consumer has one; a Group's has one per
// stream in the set. The fields above mu are set when the member is made and
// never written after.
type member struct {
	name      string // the stream's name, which its rows' keys carry
	ref       string // what Kinesis calls name it by: the ARN when the spec gave one, else name
	kin       KinesisAPI
	describer StreamDescriber // nil when kin cannot describe streams
	handler   Handler
	cfg       config  // the consumer's, with this stream's initial position and reading mode
	fanOut    *fanOut // nil unless read with enhanced fan-out
	epoch     fenceEpoch
	retention retention // the stream's retention period, learned when a shard first gets stuck

	// Written by Run's scheduler only (the identity check): the stream's
	// incarnation as checked, nil until the first check; noIdentity once
	// the client cannot describe the stream.
	identity   *StreamIdentity
	noIdentity bool
	// registered is set by the scheduler once the fan-out consumer is
	// registered (at once when fanOut is nil); until then take rounds do
	// not list the stream's rows, so none of its leases is taken.
	registered atomic.Bool
	// gone is set by the scheduler while Kinesis says the stream does not
	// exist (its last shard listing); none of its leases is taken
	// meanwhile, so that readers are not started only to end.
	gone atomic.Bool
}

// newMember returns the member of stream name, named ref in Kinesis calls.
// A stream read by polling needs no registration.
func newMember(name, ref string, kin KinesisAPI, h Handler, cfg config, fo *fanOut) *member {
	describer, _ := kin.(StreamDescriber)
	m := &member{name: name, ref: ref, kin: kin, describer: describer, handler: h, cfg: cfg, fanOut: fo}
	m.registered.Store(fo == nil)
	return m
}

// knownARN returns the stream's ARN as the identity check described it, or
// the ARN the spec named it by, or "".
func (m *member) knownARN() string {
	if m.identity != nil {
		return m.identity.ARN
	}
	if m.ref != m.name {
		return m.ref
	}
	return ""
}

// memberSet is the set of streams a consumer reads. Inside the consumer
// (its scheduler, its runners) a lease is named by its row's key,
// "stream:shard" (LeaseKey.String; a ':' is in no stream name or shard id),
// for a Consumer as for a Group: one scheduler lists, balances and
// coordinates the leases of every stream in the set at once, and every
// store call names the row it writes.
type memberSet struct {
	// grouped is set for a Group's set: its logs and metrics name each
	// lease's stream, and its public names of a lease are "stream/shard"
	// (a Consumer's are shard ids).
	grouped bool

	// mu guards byName and removed. They are written by Run's scheduler
	// (the group's stream source) and read by the listings and by
	// runners. byName keeps the streams that left the set too (a runner
	// launched just before may still read one until it stops); removed
	// holds them, with when this worker saw them leave.
	mu      sync.Mutex
	byName  map[string]*member
	removed map[string]time.Time

	// changed and polled carry, from a Group's source goroutine to Run's
	// scheduler, "the set changed" and "the source was polled" (buffered:
	// one pending is enough). nil for a Consumer's set, which never
	// changes.
	changed, polled chan struct{}
}

func newMemberSet(grouped bool, ms ...*member) *memberSet {
	s := &memberSet{grouped: grouped, byName: make(map[string]*member, len(ms)), removed: make(map[string]time.Time)}
	if grouped {
		s.changed, s.polled = make(chan struct{}, 1), make(chan struct{}, 1)
	}
	for _, m := range ms {
		s.byName[m.name] = m
	}
	return s
}

// keyOf returns the row key of the consumer's id (a LeaseKey.String).
func keyOf(id string) LeaseKey {
	stream, shard, _ := strings.Cut(id, ":")
	return LeaseKey{Stream: stream, Shard: shard}
}

// parentIDs returns the consumer's ids of l's parents (a row names its
// parents by shard id, in its own stream).
func parentIDs(l Lease) []string {
	out := make([]string, len(l.Parents))
	for i, p := range l.Parents {
		out[i] = LeaseKey{Stream: l.Key.Stream, Shard: p}.String()
	}
	return out
}

// publicID returns how the public API names the lease of id: its shard id
// for a Consumer, "stream/shard" for a Group.
func (s *memberSet) publicID(id string) string {
	k := keyOf(id)
	if !s.grouped {
		return k.Shard
	}
	return k.Stream + "/" + k.Shard
}

// of returns the member reading the shard of id (also when its stream left
// the set), or nil when the set never had its stream.
func (s *memberSet) of(id string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[keyOf(id).Stream]
}

// all returns the members in the set (not those that left it), ordered by
// stream name.
func (s *memberSet) all() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*member, 0, len(s.byName))
	for name, m := range s.byName {
		if _, gone := s.removed[name]; !gone {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *member) int { return strings.Compare(a.name, b.name) })
	return out
}

// names returns the names of the streams in the set, sorted.
func (s *memberSet) names() []string {
	ms := s.all()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return out
}

// has reports whether stream is in the set.
func (s *memberSet) has(stream string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, gone := s.removed[stream]
	return s.byName[stream] != nil && !gone
}

// add puts m in the set (again, when its stream left it before).
func (s *memberSet) add(m *member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byName[m.name] = m
	delete(s.removed, m.name)
}

// remove takes stream out of the set at now; it reports whether it was in.
func (s *memberSet) remove(stream string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.removed[stream]; gone || s.byName[stream] == nil {
		return false
	}
	s.removed[stream] = now
	return true
}

// left returns the streams that left the set, with when.
func (s *memberSet) left() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.removed)
}

// forget drops stream, which left the set, from it for good.
func (s *memberSet) forget(stream string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.removed[stream]; gone {
		delete(s.removed, stream)
		delete(s.byName, stream)
	}
}

// holdsStream reports whether a runner of stream still runs on this worker.
func (c *Consumer) holdsStream(stream string) bool {
	return c.runs(func(r *leaseRunner) bool { return r.key.Stream == stream })
}

// runs reports whether a runner on this worker is one that is says.
func (c *Consumer) runs(is func(*leaseRunner) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.held {
		if is(r) {
			return true
		}
	}
	return false
}

// onSetChanged follows a change of the Group's set: the runners of streams
// that left it stop at a batch boundary (their final checkpoint written,
// their leases released), and a shard sync makes the rows of the streams
// added (which the Group made ready to read before they joined), from a
// listing of its own: the coordinator's latest predates the change.
func (sc *scheduler) onSetChanged(ctx context.Context) error {
	c := sc.c
	sc.stopStreams(func(stream string) bool { return !c.set.has(stream) }, stopRemoved, "stopping the shard of a stream removed from the group")
	sc.withdrawRemoved(ctx)
	sc.cd.recentAt = time.Time{}
	if err := sc.boundedSync(ctx); err != nil && ctx.Err() == nil && isFatal(err) {
		return err
	}
	poke(sc.wake)
	return nil
}

// attrs are the metric attributes that name the stream of id: in a Group,
// its stream in place of the group's name; none for a Consumer, whose
// instruments name its stream already.
func (s *memberSet) attrs(id string) []attribute.KeyValue {
	if !s.grouped {
		return nil
	}
	return []attribute.KeyValue{attribute.String("stream", keyOf(id).Stream)}
}

// readable reports whether the lease of id may be taken now: its stream is
// in the set, its fan-out consumer registered, and Kinesis did not say at
// the last shard sync that it has no such stream. A take (or handoff
// request) decided from a listing older than a change of the set is
// refused by it, so that it starts no reader of a stream that left.
func (s *memberSet) readable(id string) bool {
	m := s.of(id)
	return m != nil && s.has(m.name) && m.registered.Load() && !m.gone.Load()
}

// withdrawRemoved withdraws the handoff requests this worker made for rows of
// streams that left the set: it will not take them, and a holder answering
// one would make it their owner.
func (sc *scheduler) withdrawRemoved(ctx context.Context) {
	c := sc.c
	hw := c.caps.withdraws
	for id := range sc.pending {
		if c.set.has(keyOf(id).Stream) {
			continue
		}
		delete(sc.pending, id)
		if hw == nil {
			continue
		}
		wctx, cancel := c.storeCtx(ctx)
		_, err := hw.WithdrawHandoff(wctx, keyOf(id), c.cfg.identity)
		cancel()
		if err != nil {
			c.log.Warn("withdrawing a handoff request for a removed stream's row failed; the row is released if it is handed over", "shard", id, "err", err)
		}
	}
}

// stopStreams stops, at a batch boundary with cause, the runners of the
// streams stop says.
func (sc *scheduler) stopStreams(stop func(stream string) bool, cause stopCause, why string) {
	c := sc.c
	c.mu.Lock()
	var runners []*leaseRunner
	for _, r := range c.held {
		if stop(r.key.Stream) {
			runners = append(runners, r)
		}
	}
	c.mu.Unlock()
	for _, r := range runners {
		r.log.Info(why)
		r.stopFor(cause)
	}
}

// learntEpoch is the epoch m's worker learnt from Kinesis (0 when it could
// not, or for a nil member): an acquire raises the stream's fence floor to
// it (see withKnownEpoch).
func (m *member) learntEpoch() int64 {
	if m == nil {
		return 0
	}
	return m.epoch.Load()
}

// registerFanOut registers the fan-out consumer of every stream in the set
// read with enhanced fan-out and not registered yet, in stream order.
func (s *memberSet) registerFanOut(ctx context.Context, c *Consumer) error {
	for _, m := range s.all() {
		if m.registered.Load() {
			continue
		}
		if m.fanOut != nil {
			if err := m.fanOut.register(ctx, c, m); err != nil {
				return err
			}
		}
		m.registered.Store(true)
	}
	return nil
}

// isGone reports whether Kinesis said, at the last shard sync, that m's
// stream does not exist (false for a nil member).
func (m *member) isGone() bool { return m != nil && m.gone.Load() }
