package shardlease

import (
	"context"
	"sync"
	"time"

	"github.com/shardlease/shardlease/internal/scaling"
)

// Lag and stalls. A held shard has two lags: how far its reader is behind
// the tip of the shard (behind-latest, as Kinesis reports it), and how long
// its checkpoint has waited while there was work behind it (checkpoint
// age). The first says the fleet reads too slowly; the second says a
// handler is stuck, however fast the reader is. Checkpoint age is counted
// from the later of the checkpoint's last move and the moment the shard last
// had work behind its checkpoint after having none: records read and not
// yet checkpointed, or a read that Kinesis reported behind. A shard that is
// caught up and idle has none.
//
// Each holder writes both on its row with every renewal and checkpoint (see
// HolderLag), so the coordinator's listing shows the whole stream's lag, and
// from two listings a lease duration apart it works out how many workers
// the stream needs (internal/scaling).

// drainTarget is how soon the workers-wanted rule wants a backlog drained.
const drainTarget = 5 * time.Minute

// lagClock is one held lease's checkpoint age. The reader calls read and
// behind, the processor (through mark) moved; the keeper, Status and the
// metric callback read it. mu orders them.
type lagClock struct {
	mu     sync.Mutex
	behind int64     // (mu) the last read's MillisBehindLatest; -1 before the first
	readTo position  // (mu) the last record read
	done   position  // (mu) the pending checkpoint
	since  time.Time // (mu) when the age is counted from, while owing
}

// newLagClock returns the clock of a lease taken at checkpoint at.
func newLagClock(at position) lagClock { return lagClock{behind: -1, done: at} }

// owing reports whether work is behind the checkpoint. mu is held.
func (c *lagClock) owing() bool { return c.behind > 0 || c.readTo.compare(c.done) > 0 }

// update runs fn under mu, starting the age at now when the shard begins
// owing work.
func (c *lagClock) update(now time.Time, fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.owing()
	fn()
	if !was && c.owing() {
		c.since = now
	}
}

// read records that the reader read up to p.
func (c *lagClock) read(p position) {
	c.update(time.Now(), func() {
		if p.compare(c.readTo) > 0 {
			c.readTo = p
		}
	})
}

// reportBehind records the MillisBehindLatest of a read.
func (c *lagClock) reportBehind(ms int64) {
	c.update(time.Now(), func() { c.behind = ms })
}

// moved records that the pending checkpoint moved forward to p.
func (c *lagClock) moved(p position) {
	now := time.Now()
	c.update(now, func() {
		c.done = p
		c.since = now
	})
}

// lag returns the lag at now; ok is false before the first read.
func (c *lagClock) lag(now time.Time) (l Lag, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.behind < 0 {
		return Lag{}, false
	}
	l.BehindLatest = time.Duration(c.behind) * time.Millisecond
	if c.owing() {
		l.CheckpointAge = now.Sub(c.since)
	}
	return l, true
}

// withLag returns ctx carrying the lag for the store to write on the row,
// once the reader has read.
func (c *lagClock) withLag(ctx context.Context) context.Context {
	if l, ok := c.lag(time.Now()); ok {
		return WithHolderLag(ctx, l)
	}
	return ctx
}

// sizing is the coordinator's sampling of the stream's lag for the
// workers-wanted gauge: written on Run's goroutine (sample), read by Status
// and the metric callback under mu.
type sizing struct {
	mu     sync.Mutex
	prev   map[string]scaling.Sample // (mu) the older sample, by shard
	prevAt time.Time                 // (mu) when it was listed
	seenAt time.Time                 // (mu) the listing last sampled
	wanted int                       // (mu) the last answer; 0 while not coordinating or not known
}

// sample takes a coordinator's listing (made at at) into the rule: once a
// window has passed since the older sample, the rule answers and the listing
// becomes the older sample. Any other role forgets everything.
func (s *sizing) sample(coordinating bool, leases []Lease, at time.Time, window time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !coordinating {
		s.prev, s.prevAt, s.seenAt, s.wanted = nil, time.Time{}, time.Time{}, 0
		return
	}
	if at.Equal(s.seenAt) {
		return
	}
	s.seenAt = at
	now, in := lagSamples(leases, at)
	if s.prev == nil {
		s.prev, s.prevAt = now, at
		return
	}
	if at.Sub(s.prevAt) < window {
		return
	}
	in.Prev, in.Now, in.Busy, in.Drain = s.prev, now, window, drainTarget
	s.wanted = scaling.Wanted(in).Wanted
	s.prev, s.prevAt = now, at
}

// lagSamples returns the lag of every held, unfinished lease of a listing
// made at at, and the rule's counts: the shards to read and the workers
// holding them.
func lagSamples(leases []Lease, at time.Time) (map[string]scaling.Sample, scaling.Input) {
	out := make(map[string]scaling.Sample, len(leases))
	owners := map[string]bool{}
	var in scaling.Input
	for _, l := range leases {
		if l.Checkpoint == ShardEnd {
			continue
		}
		in.Shards++
		if l.Owner == "" {
			continue
		}
		owners[l.Owner] = true
		if l.Lag != nil {
			out[l.Key.String()] = scaling.Sample{Owner: l.Owner, Behind: l.Lag.BehindLatest, At: at}
		}
	}
	in.Workers = len(owners)
	return out, in
}

// workersWanted returns the coordinator's last answer; ok is false while
// this worker does not coordinate or has not sampled for a window yet.
func (s *sizing) workersWanted() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wanted, s.wanted > 0
}
