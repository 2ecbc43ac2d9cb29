package soak

// Sessions (Config.Sessions): every worker runs WithSessions(true), so one
// keep of its session row keeps every lease it holds. The fault mix adds
// what threatens a session fleet:
//
//   - zone losses: a third of the workers (rounded up) crash at once, with
//     no release, and come back only once the others should have taken
//     every lease of theirs;
//   - takers dying halfway: a worker whose FenceSession just ended another
//     worker's session crashes before it claims any of that session's
//     leases, with probability takerDeathRate;
//   - same-id restarts: a worker crashes and starts again at once under the
//     same owner id (a new incarnation, a new session).
//
// And it checks what sessions promise on top of the soak's invariants: no
// write a store accepted from a holder after its session was fenced (stale
// writes accepted), and every lease a lost zone held held again within the
// zone bound. It measures the cost: keeps a worker-minute, and lease-row
// writes a lease-minute.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlease/shardlease"
)

// The sessions' event kinds, counted in the result table.
const (
	// EvZoneLost crashes a third of the workers at once (zoneSize).
	EvZoneLost = "zone lost: a third of the workers crash at once"
	// EvTakerDied crashes a worker right after its FenceSession ended
	// another worker's session, before it claims any of its leases.
	EvTakerDied = "taker crashed between fencing a session and claiming"
	// EvSameID crashes a worker and starts the next at once under the
	// same owner id.
	EvSameID = "worker crashed and restarted at once under the same owner id"
)

// takerDeathRate is the probability that a worker crashes right after a
// FenceSession of its ended another worker's session, while faults are on.
const takerDeathRate = 1.0 / 3

// zoneSize is how many workers a zone loss crashes: a third of the fleet,
// rounded up, so that a fleet of four loses two.
func (c *Config) zoneSize() int { return max(1, (c.Workers+2)/3) }

// outAllowed is how many workers may be out at once (crashed, frozen,
// leaving, not started again) while a lease still counts as untaken: the
// promise covers two workers failing together, and with sessions a zone.
func (c *Config) outAllowed() int {
	if c.Sessions {
		return max(2, c.zoneSize())
	}
	return 2
}

// zoneBound is the bound on how long a lease a lost zone held stays held by
// no live worker. The engine promises 2.5 lease durations from the crash
// (its TestSessionZoneLost): the last keep was sent up to a renew interval
// before, an observer needs a take interval to see the session's final
// counter and a lease duration of it standing still, and the role-free
// look confirms a moved mark a stall later. The soak adds one take
// interval: a fence, claim or listing failed by the per-call faults
// defers the takeover to the next take round. The lease is the fleet's
// longest: takers wait the longer of their own and the holder's, and any
// survivor with room (the slow-lease slot among them) may be the taker.
func (c *Config) zoneBound() time.Duration {
	l := c.longestLease()
	return l*5/2 + l*3/20
}

// sessionEvents draws the sessions' faults over window, n being the
// number of plain crashes: zone losses and same-id restarts.
func (s *soak) sessionEvents(window time.Duration, n int) []event {
	cfg := s.cfg
	var evs []event
	for range max(1, n/4) {
		evs = append(evs, event{at: s.jitter(window), kind: EvZoneLost, d: cfg.zoneBound() + time.Duration(s.rng.Float64()*float64(cfg.Lease))})
	}
	for range max(1, n/3) {
		evs = append(evs, event{at: s.jitter(window), kind: EvSameID, slot: s.rng.IntN(cfg.Workers)})
	}
	return evs
}

// loseZone crashes a third of the workers at once, the coordinator among
// them when the draw allows, and starts them again after downtime; it
// measures how long their leases stay held by no live worker. It draws from
// the schedule's rng here and waits on a goroutine of its own, up to three
// leases, for every worker to be up, so that the zone is lost alone and
// the events after it are not held up.
func (s *soak) loseZone(ctx context.Context, downtime time.Duration) {
	coord, perm := s.rng.IntN(2) == 0, s.rng.Perm(s.cfg.Workers)
	s.restarts.Go(func() { s.loseZoneWhenUp(ctx, downtime, coord, perm) })
}

// loseZoneWhenUp is loseZone's goroutine: the zone is the coordinator's
// slot if coord is set, then the slots up in the order of perm.
func (s *soak) loseZoneWhenUp(ctx context.Context, downtime time.Duration, coord bool, perm []int) {
	var up []int
	for wait := 0; wait < 60; wait++ {
		if up = s.upSlots(); len(up) == s.cfg.Workers {
			break
		}
		t := time.NewTimer(s.cfg.Lease / 20)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	k := s.cfg.zoneSize()
	if len(up) < k+1 || ctx.Err() != nil {
		fmt.Fprintf(s.cfg.Events, "%6.1fs zone loss skipped: %d workers up\n", s.since(), len(up))
		return
	}
	zone := make([]int, 0, k)
	if c, ok := s.coordinatorSlot(); ok && coord && slices.Contains(up, c) {
		zone = append(zone, c)
	}
	for _, slot := range perm {
		if len(zone) < k && slices.Contains(up, slot) && !slices.Contains(zone, slot) {
			zone = append(zone, slot)
		}
	}
	var held []string
	for _, slot := range zone {
		s.mu.Lock()
		inc := s.slots[slot]
		s.mu.Unlock()
		held = append(held, inc.consumer.Held()...)
	}
	s.counts.add(EvZoneLost, 1)
	fmt.Fprintf(s.cfg.Events, "%6.1fs zone lost: slots %v holding %v\n", s.since(), zone, held)
	at := time.Now()
	for _, slot := range zone {
		s.crash(slot, downtime)
	}
	// Measured past the faults' end: the drain waits for it.
	s.zones.measure(context.WithoutCancel(ctx), s, at, held)
}

// upSlots returns the slots whose incarnation runs: started, neither
// crashed nor leaving.
func (s *soak) upSlots() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var up []int
	for slot, inc := range s.slots {
		if inc != nil && inc.consumer != nil && !inc.crashed.Load() && !inc.leaving.Load() {
			up = append(up, slot)
		}
	}
	return up
}

// zones holds the zone losses' figures.
type zones struct {
	mu sync.Mutex
	// max is the longest any lease a lost zone held stayed held by no live
	// worker while only the zone was out (maxWhat names it); stacked the
	// longest while more workers were out than the zone.
	max, stacked time.Duration
	maxWhat      string
	measured     int
}

// measure samples every twentieth of a lease, from at, until every lease
// of held is held by a live worker again or finished, or 4 zone bounds
// passed; it records the longest wait.
func (z *zones) measure(ctx context.Context, s *soak, at time.Time, held []string) {
	store := s.memoryOrDynamo()
	left := slices.Clone(held)
	stacked := false
	var worst time.Duration
	worstWhat := ""
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	for len(left) > 0 && time.Since(at) < 4*s.cfg.zoneBound() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live, _, running := s.liveHolders()
		if running < s.cfg.Workers-s.cfg.zoneSize() {
			stacked = true // another crash, pause or leave on top of the zone
		}
		ls, err := store.List(context.WithoutCancel(ctx), s.cfg.Stream)
		if err != nil {
			continue
		}
		byShard := make(map[string]shardlease.Lease, len(ls))
		for _, l := range ls {
			byShard[l.Key.Shard] = l
		}
		left = slices.DeleteFunc(left, func(shard string) bool {
			l, ok := byShard[shard]
			if live[shard] || !ok || !readable(l, byShard) {
				if d := time.Since(at); d > worst {
					worst, worstWhat = d, fmt.Sprintf("%s (zone lost at %.1fs)", shard, at.Sub(s.start).Seconds())
				}
				return true
			}
			return false
		})
	}
	if len(left) > 0 {
		worst, worstWhat = time.Since(at), fmt.Sprintf("%v not held again (zone lost at %.1fs)", left, at.Sub(s.start).Seconds())
	}
	note := ""
	if stacked {
		note = " (other faults on top)"
	}
	fmt.Fprintf(s.cfg.Events, "%6.1fs zone lost at %.1fs: its leases held again after %.2f L, the last %s%s\n", s.since(), at.Sub(s.start).Seconds(),
		worst.Seconds()/s.cfg.Lease.Seconds(), worstWhat, note)
	z.mu.Lock()
	defer z.mu.Unlock()
	z.measured++
	if stacked {
		z.stacked = max(z.stacked, worst)
	} else if worst > z.max {
		z.max, z.maxWhat = worst, worstWhat
	}
}

// sameIDRestart crashes the incarnation in slot, or, if it is down or
// leaving, the next slot's that is neither, and starts the next one at once
// under the same owner id.
func (s *soak) sameIDRestart(slot int) {
	var inc *incarnation
	s.mu.Lock()
	for i := range len(s.slots) {
		c := s.slots[(slot+i)%len(s.slots)]
		if c != nil && c.consumer != nil && !c.leaving.Load() && c.crashed.CompareAndSwap(false, true) {
			inc, slot = c, (slot+i)%len(s.slots)
			break
		}
	}
	s.mu.Unlock()
	if inc == nil {
		fmt.Fprintf(s.cfg.Events, "%6.1fs no live worker to restart under its owner id\n", s.since())
		return
	}
	s.counts.add(EvCrash, 1)
	s.counts.add(EvSameID, 1)
	fmt.Fprintf(s.cfg.Events, "%6.1fs crash %s holding %v; restart at once as owner %s\n", s.since(), inc.id, inc.consumer.Held(), inc.owner)
	inc.cancel()
	s.mu.Lock()
	s.ownerNext[slot] = inc.owner
	s.mu.Unlock()
	s.launch(slot)
	s.restarts.Go(func() { inc.runErr = <-inc.done })
}

// takerDied is called when inc's FenceSession ended another worker's
// session: while faults are on, with probability takerDeathRate, inc
// crashes before it claims anything (its calls fail from now on) and
// starts again after a lease.
func (s *soak) takerDied(inc *incarnation, fenced shardlease.Worker) {
	inc.mu.Lock()
	die := inc.frng.Float64() < takerDeathRate
	inc.mu.Unlock()
	if !die || inc.leaving.Load() {
		return
	}
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	if !s.faultsOn.Load() || !inc.crashed.CompareAndSwap(false, true) {
		return
	}
	inc.cancel()
	s.counts.add(EvCrash, 1)
	s.counts.add(EvTakerDied, 1)
	// Held takes the worker's lock, which the caller may hold: print and
	// restart from another goroutine.
	s.restarts.Go(func() {
		fmt.Fprintf(s.cfg.Events, "%6.1fs crash %s right after it fenced %s (generation %d), holding %v; restart in %v\n",
			s.since(), inc.id, fenced.Key(), fenced.Gen, inc.consumer.Held(), s.cfg.Lease)
		s.relaunch(inc, inc.slot, s.cfg.Lease)
	})
}

// sessionAudit keeps the sessions fenced, and counts the writes stores
// accepted from a holder after its session was fenced, and the keeps.
type sessionAudit struct {
	mu      sync.Mutex
	fenced  map[sessionID]time.Time // when a fence of the session was seen to land (its call returned)
	byTaker int                     // fences of another worker's session (FenceSession by a taker)
	stale   []string
	// keeps counts the keeps that succeeded while metering (meter.on).
	keeps atomic.Int64
}

// sessionID names one generation of a session: its worker row's key and
// generation.
type sessionID struct {
	key string
	gen int64
}

// holderWrite is a holder's write to a lease row as its call was sent: the
// outermost store layer puts it in the call's context, the layer next to
// the store checks it once the store accepted the write (a reply lost on
// the way back included).
type holderWrite struct {
	op, by string
	key    string
	sess   sessionID
	sent   time.Time
}

type holderWriteKey struct{}

// withHolderWrite returns ctx carrying the write of l by inc, sent now.
func withHolderWrite(ctx context.Context, op string, inc *incarnation, l shardlease.Lease) context.Context {
	if l.Session == "" {
		return ctx
	}
	return context.WithValue(ctx, holderWriteKey{}, holderWrite{op: op, by: inc.id, key: l.Key.String(), sess: sessionID{l.Session, l.SessionGen}, sent: time.Now()})
}

// fence records that the session of w ended now.
func (a *sessionAudit) fence(w shardlease.Worker) {
	if w.Gen == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fenced == nil {
		a.fenced = map[sessionID]time.Time{}
	}
	id := sessionID{w.Key(), w.Gen}
	if _, ok := a.fenced[id]; !ok {
		a.fenced[id] = time.Now()
	}
}

// accepted checks a write the store accepted: the one ctx carries, if
// any, is stale when its session was fenced before it was sent.
func (a *sessionAudit) accepted(ctx context.Context) {
	w, ok := ctx.Value(holderWriteKey{}).(holderWrite)
	if !ok {
		return
	}
	a.check(w)
}

// check counts w as a stale write accepted if its session was fenced
// before w was sent.
func (a *sessionAudit) check(w holderWrite) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.fenced[w.sess]
	if !ok || !at.Before(w.sent) {
		return
	}
	a.stale = append(a.stale, fmt.Sprintf("%s %s by %s sent %v after its session %s (generation %d) was fenced",
		w.op, w.key, w.by, w.sent.Sub(at).Round(time.Millisecond), w.sess.key, w.sess.gen))
}

// meter measures worker time and held-lease time by sampling, for the
// keeps a worker-minute and the lease-row writes a lease-minute.
type meter struct {
	on                    atomic.Bool
	mu                    sync.Mutex
	workerTime, leaseTime time.Duration
	writes0               int // lease-row writes recorded when metering began
}

// run samples every twentieth of a lease until ctx ends.
func (m *meter) run(ctx context.Context, s *soak) {
	m.writes0 = s.audit.leaseWrites()
	m.on.Store(true)
	defer m.on.Store(false)
	every := s.cfg.Lease / 20
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		incs := slices.Clone(s.slots)
		s.mu.Unlock()
		workers, leases := 0, 0
		for _, inc := range incs {
			if inc == nil || inc.consumer == nil || inc.crashed.Load() || inc.freeze.frozen() != nil {
				continue
			}
			workers++
			leases += len(inc.consumer.Held())
		}
		m.mu.Lock()
		m.workerTime += time.Duration(workers) * every
		m.leaseTime += time.Duration(leases) * every
		m.mu.Unlock()
	}
}

// sessionsResult fills in the sessions' figures and problems.
func (s *soak) sessionsResult(r *Result, problem func(string, ...any)) {
	r.Sessions = s.cfg.Sessions
	a := &s.sessAudit
	a.mu.Lock()
	r.StaleSessionAccepted = len(a.stale)
	for i, e := range a.stale {
		if i < 5 {
			problem("stale write accepted after its session was fenced: %s", e)
		}
	}
	r.SessionsFenced, r.FencedByTakers = len(a.fenced), a.byTaker
	a.mu.Unlock()
	m := &s.meter
	m.mu.Lock()
	if m.workerTime > 0 {
		r.KeepsPerWorkerMinute = float64(a.keeps.Load()) / m.workerTime.Minutes()
	}
	if m.leaseTime > 0 {
		writes := s.audit.leaseWrites() - m.writes0
		r.WritesPerLeaseMinute = float64(writes) / m.leaseTime.Minutes()
		r.WriteUnitsPerLeaseMinute = float64(int64(writes)+s.units.total()) / m.leaseTime.Minutes()
	}
	m.mu.Unlock()
	z := &s.zones
	z.mu.Lock()
	r.ZoneMax, r.ZoneStacked, r.ZoneLease, r.ZonesMeasured = z.max, z.stacked, z.maxWhat, z.measured
	z.mu.Unlock()
	r.ZoneBound = s.cfg.zoneBound()
	if r.ZoneMax > r.ZoneBound {
		problem("a lost zone's lease %s stayed held by no live worker for %v (bound %v)", r.ZoneLease, r.ZoneMax, r.ZoneBound)
	}
}

// sessionRows prints the cost row and, with sessions, the sessions' rows
// of Table.
func (r *Result) sessionRows(row func(name string, v any, verdict string), ok func(bool) string) {
	row("lease-row writes a held-lease-minute (all kinds)", fmt.Sprintf("%.1f", r.WritesPerLeaseMinute), "")
	row("write units a held-lease-minute (lease rows and keeps, as DynamoDB bills them)", fmt.Sprintf("%.2f", r.WriteUnitsPerLeaseMinute), "")
	verdict := ""
	if r.Sessions && !r.Group {
		verdict = ok(r.DupCrash <= r.DupCrashBound)
	}
	row(fmt.Sprintf("duplicates after crashes (bound %d: %d crashes, two renew intervals of one stream's traffic each)", r.DupCrashBound, r.Crashed), r.DupCrash, verdict)
	if !r.Sessions {
		return
	}
	row("sessions: stale writes accepted (sent after the fence)", r.StaleSessionAccepted, ok(r.StaleSessionAccepted == 0))
	row("  sessions ended (fenced, closed or their rows removed)", r.SessionsFenced, "")
	row("  of which fenced by a taker (FenceSession)", r.FencedByTakers, "")
	row(fmt.Sprintf("  zone lost: held again max, zone alone (bound %v)", r.ZoneBound), r.ZoneMax.Round(10*time.Millisecond), ok(r.ZoneMax <= r.ZoneBound))
	row("  zone lost: held again max, other faults on top", r.ZoneStacked.Round(10*time.Millisecond), "")
	row("  zone losses measured", r.ZonesMeasured, "")
	row("  keeps a worker-minute", fmt.Sprintf("%.1f", r.KeepsPerWorkerMinute), "")
}

// sessionSummary is the summary line's sessions part.
func (r *Result) sessionSummary() string {
	if !r.Sessions {
		return ""
	}
	return fmt.Sprintf(", stale writes accepted %d, zone held again max %v (bound %v), keeps/worker-min %.1f, lease-row writes/lease-min %.1f, write units/lease-min %.2f, duplicates after crashes %d (bound %d)",
		r.StaleSessionAccepted, r.ZoneMax.Round(10*time.Millisecond), r.ZoneBound, r.KeepsPerWorkerMinute, r.WritesPerLeaseMinute, r.WriteUnitsPerLeaseMinute, r.DupCrash, r.DupCrashBound)
}

// leaseWrites returns how many writes to lease rows the audit recorded
// (what listings observed left out).
func (a *auditor) leaseWrites() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, w := range a.writes {
		if w.op != "observed" {
			n++
		}
	}
	return n
}

// acceptedInSession checks the holder's write ctx carries, which the store
// accepted unless err is set.
func (a *auditor) acceptedInSession(ctx context.Context, err error) {
	if err == nil && a.sess != nil {
		a.sess.accepted(ctx)
	}
}

// takerFenced counts a fence of another worker's session.
func (a *sessionAudit) takerFenced() {
	a.mu.Lock()
	a.byTaker++
	a.mu.Unlock()
}

// crashDuplicates bounds the records handed again after crashes: each
// crashed incarnation at most two renew intervals of the stream's traffic
// (what its keeps, or its checkpoint writes, had not made durable yet).
// s.mu is held, and r.DupCrash counted.
func (s *soak) crashDuplicates(r *Result, problem func(string, ...any)) {
	for _, inc := range s.all {
		if inc.crashed.Load() {
			r.Crashed++
		}
	}
	renew := s.cfg.Lease / 3
	r.DupCrashBound = int(float64(r.Crashed) * float64(s.cfg.Rate) * 2 * renew.Seconds())
	// The bound is the sessions' promise (one stream, its checkpoints
	// carried by the keeps); a group soak's several streams and the
	// renewals of the other modes are printed, not judged.
	if s.cfg.Sessions && !s.cfg.Group && r.DupCrash > r.DupCrashBound {
		problem("%d records handed again after %d crashes, more than two renew intervals of traffic each (%d)", r.DupCrash, r.Crashed, r.DupCrashBound)
	}
}
