package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
)

// The liveness faults: roles that fail together, a coordinator that
// cannot list, capped workers and a joint graceful leave; and the
// invariant they threaten, untaken max: the longest time any lease stayed
// free or expired while a worker with room was alive.
const (
	// EvCrashJoint crashes the coordinator and a deputy together.
	EvCrashJoint = "coordinator and deputy crash together"
	// EvListsFail makes the coordinator's listings (Scans) fail for two
	// lease durations while its other calls succeed.
	EvListsFail = "coordinator's listings fail for 2 leases (it renews)"
	// EvJointLeave shuts the coordinator and a deputy down together, and
	// starts them again later.
	EvJointLeave = "coordinator and deputy leave together (graceful)"
	// EvCapped is a worker started with WithMaxLeases.
	EvCapped = "worker capped by WithMaxLeases"
)

// cappedSlot is the slot whose workers run with WithMaxLeases (one more
// than the even share), when the fleet has at least four slots.
const cappedSlot = 2

// capOf returns the WithMaxLeases cap of slot's workers, 0 for none.
func (c *Config) capOf(slot int) int {
	if c.Workers < 4 || slot != cappedSlot {
		return 0
	}
	shards := c.Shards
	if c.Group {
		shards *= groupStreams + 1 // the group's streams, and the one added
	}
	return (shards+c.Workers-1)/c.Workers + 1
}

// untakenBound is the bound untaken max is held to: four of the longest
// lease duration in the fleet (the last slot runs with twice the lease).
// A joint crash alone is held again within 2.5 of it; the soak's per-call
// faults, pauses and restarts on top delay the takes that follow (up to
// 3.1 measured).
func (c *Config) untakenBound() time.Duration {
	return 4 * c.longestLease()
}

// deputySlots returns the slots whose live incarnations hold a row that
// names them deputy, as the store shows it.
func (s *soak) deputySlots(ctx context.Context) []int {
	ls, err := s.memoryOrDynamo().List(ctx, s.cfg.Stream)
	if err != nil {
		return nil
	}
	owners := map[string]bool{}
	for _, l := range ls {
		if _, ok := balance.DeputyFirst(l.Note); ok && l.Owner != "" {
			owners[l.Owner] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for slot, inc := range s.slots {
		if inc != nil && !inc.crashed.Load() && owners[inc.consumer.OwnerID()] {
			out = append(out, slot)
		}
	}
	return out
}

// pairSlots returns the coordinator's slot and a deputy's (or another
// slot), for the joint faults.
func (s *soak) pairSlots(ctx context.Context) (int, int, bool) {
	coord, ok := s.coordinatorSlot()
	if !ok {
		return 0, 0, false
	}
	for _, d := range s.deputySlots(ctx) {
		if d != coord {
			return coord, d, true
		}
	}
	return coord, (coord + 1) % s.cfg.Workers, s.cfg.Workers > 1
}

// crashJoint crashes the coordinator and a deputy together.
func (s *soak) crashJoint(ctx context.Context, downtime time.Duration) {
	a, b, ok := s.pairSlots(ctx)
	if !ok {
		return
	}
	s.counts.add(EvCrashJoint, 1)
	s.crash(a, downtime)
	s.crash(b, downtime)
}

// failLists makes the coordinator's Scans fail for two lease durations.
func (s *soak) failLists() {
	slot, ok := s.coordinatorSlot()
	if !ok {
		return
	}
	s.mu.Lock()
	inc := s.slots[slot]
	s.mu.Unlock()
	if !inc.scansFail.CompareAndSwap(false, true) {
		return
	}
	s.counts.add(EvListsFail, 1)
	fmt.Fprintf(s.cfg.Events, "%6.1fs listings of %s fail\n", s.since(), inc.id)
	s.restarts.Go(func() {
		t := time.NewTimer(2 * s.cfg.Lease)
		<-t.C
		inc.scansFail.Store(false)
	})
}

// leaveJoint shuts the coordinator and a deputy down gracefully together
// and starts new incarnations in their slots after downtime.
func (s *soak) leaveJoint(ctx context.Context, downtime time.Duration) {
	a, b, ok := s.pairSlots(ctx)
	if !ok {
		return
	}
	s.counts.add(EvJointLeave, 1)
	for _, slot := range []int{a, b} {
		s.mu.Lock()
		inc := s.slots[slot]
		s.mu.Unlock()
		if inc.crashed.Load() || !inc.leaving.CompareAndSwap(false, true) {
			continue
		}
		fmt.Fprintf(s.cfg.Events, "%6.1fs %s leaves holding %v; restart in %v\n", s.since(), inc.id, inc.consumer.Held(), downtime.Round(time.Millisecond))
		inc.cancel()
		s.restarts.Go(func() { s.relaunch(inc, slot, downtime) })
	}
}

// untaken measures, per lease, how long it stays run by no live worker
// while a live worker has room for it; max is the longest.
type untaken struct {
	mu     sync.Mutex
	since  map[string]time.Time
	max    time.Duration
	maxKey string
}

// watchUntaken samples the table and the workers every twentieth of a
// lease until ctx ends.
func (s *soak) watchUntaken(ctx context.Context) {
	u := &s.untaken
	u.since = map[string]time.Time{}
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	store := s.memoryOrDynamo()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ls, err := store.List(context.WithoutCancel(ctx), s.cfg.Stream)
		if err != nil {
			continue
		}
		s.sampleUntaken(ls, time.Now())
	}
}

// sampleUntaken updates the untaken times from one reading of the rows.
// Only while at most two workers are out (crashed, frozen, leaving or not
// started again yet), with sessions a zone (outAllowed), does a lease count
// as untaken: the promise is to any two workers failing together.
func (s *soak) sampleUntaken(ls []shardlease.Lease, now time.Time) {
	held, room, running := s.liveHolders()
	room = room && running >= s.cfg.Workers-s.cfg.outAllowed()
	byShard := make(map[string]shardlease.Lease, len(ls))
	for _, l := range ls {
		byShard[l.Key.Shard] = l
	}
	u := &s.untaken
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, l := range ls {
		key := l.Key.String()
		if held[l.Key.Shard] || !room || !readable(l, byShard) {
			delete(u.since, key)
			continue
		}
		since, ok := u.since[key]
		if !ok {
			u.since[key] = now
			continue
		}
		if d := now.Sub(since); d > u.max {
			u.max, u.maxKey = d, fmt.Sprintf("%s (from %.1fs)", key, since.Sub(s.start).Seconds())
		}
	}
}

// readable reports whether l can be read now: not finished, and every
// parent with a row finished.
func readable(l shardlease.Lease, byShard map[string]shardlease.Lease) bool {
	if l.Checkpoint == shardlease.ShardEnd {
		return false
	}
	for _, p := range l.Parents {
		if pl, ok := byShard[p]; ok && pl.Checkpoint != shardlease.ShardEnd {
			return false
		}
	}
	return true
}

// liveHolders returns the shards that live, running (not frozen, not
// leaving) workers run, whether one of them has room for more, and how
// many run.
func (s *soak) liveHolders() (map[string]bool, bool, int) {
	s.mu.Lock()
	incs := append([]*incarnation(nil), s.slots...)
	s.mu.Unlock()
	held := map[string]bool{}
	room, running := false, 0
	for slot, inc := range incs {
		if inc == nil || inc.consumer == nil || inc.crashed.Load() || inc.leaving.Load() || inc.freeze.frozen() != nil {
			continue
		}
		running++
		h := inc.consumer.Held()
		for _, id := range h {
			held[id] = true
		}
		if most := s.cfg.capOf(slot); most == 0 || len(h) < most {
			room = true
		}
	}
	return held, room, running
}

// untakenResult sets the result's untaken max and bound, and a problem
// when the bound was passed.
func (s *soak) untakenResult(r *Result) {
	u := &s.untaken
	u.mu.Lock()
	r.UntakenMax, r.UntakenLease = u.max, u.maxKey
	u.mu.Unlock()
	r.UntakenBound = s.cfg.untakenBound()
	if r.UntakenMax > r.UntakenBound {
		r.Problems = append(r.Problems, fmt.Sprintf("lease %s stayed untaken for %v while a worker had room (bound %v)", r.UntakenLease, r.UntakenMax, r.UntakenBound))
	}
}

// capped returns the options of slot's cap, if it has one (see capOf).
func (s *soak) capped(slot int) []shardlease.Option {
	most := s.cfg.capOf(slot)
	if most == 0 {
		return nil
	}
	s.counts.add(EvCapped, 1)
	return []shardlease.Option{shardlease.WithMaxLeases(most)}
}
