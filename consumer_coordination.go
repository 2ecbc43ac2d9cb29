package shardlease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/shardlease/shardlease/internal/balance"
)

// Coordination: lease-table reads that do not grow with the fleet.
//
// Without it every worker lists the stream's rows each take interval, so
// reads grow with the number of workers. With a store that carries notes
// (NoteStore) and keeps worker rows (WorkerStore), only these workers list:
//
//   - the coordinator: the holder of the stream's first readable lease (the
//     lowest shard id among the rows that are not finished and whose parents
//     are). It lists every take interval, takes released leases at once and
//     expired ones the moment a lease duration has passed since it first saw
//     their counter (not at its next listing), beyond its own share, and
//     wakes the workers below their share with a note on one of their rows
//     so that they list and ask for handoffs. Taking the first lease is what
//     makes a worker the coordinator: it is fenced by that lease's own
//     writes, and costs no write of its own.
//   - the deputy: a worker the coordinator names with a note. It reads the
//     coordinator's lease row twice a take interval (one eventually
//     consistent GetItem) and starts listing the moment the row stands still
//     longer than a renewal or shows no owner, so that it takes the lease
//     (and with it coordination) when the coordinator is gone.
//   - workers that hold nothing, were woken, wait for a handoff they asked
//     for, or took something in their last round: until a round leaves them
//     nothing to do.
//
// Every other worker only renews: it sees handoff requests and notes in the
// rows its renewals return. Every decision is still a conditional write on
// the counter a listing showed, so a coordinator that is wrong, late or two
// at once costs writes that fail, never a second reader.

// noteSeen is a note a renewal returned: shard is the row it is on.
type noteSeen struct {
	shard, text string
}

// The notes the coordinator writes: "wake <nonce>" (list now and ask for
// your share), "deputy <first shard> <nonce>" (watch that row) and
// "lead <nonce>" (you hold the first readable lease now: list).
const (
	noteWake   = "wake"
	noteDeputy = "deputy"
	noteLead   = "lead"
)

// deputyFirst returns the shard a deputy note asks to watch.
func deputyFirst(note string) (string, bool) {
	f := strings.Fields(note)
	if len(f) < 2 || f[0] != noteDeputy {
		return "", false
	}
	return f[1], true
}

// sendNote hands a note a renewal returned to Run's coordinator; a note that
// finds the queue full is dropped (the coordinator writes it again if it
// still matters).
func (c *Consumer) sendNote(shard, text string) {
	select {
	case c.notes <- noteSeen{shard: shard, text: text}:
	default:
	}
}

// coordination is the coordinator's state for it (see the top of this file).
type coordination struct {
	// ns is the store's notes; nil when it has none (every worker lists).
	ns NoteStore
	// catchUp is set while this worker lists until a round leaves it
	// nothing to do: at start, when woken, after a round that took or asked.
	catchUp bool
	// leading is set while this worker holds the first readable lease.
	leading bool
	// first is the first readable lease's shard, as the last listing or a
	// deputy note showed it.
	first string
	// deputyRow is the shard whose row names this worker deputy; "" when it
	// is not the deputy. suspect is set while the coordinator's row looked
	// stalled or free: the deputy lists until it moves again.
	deputyRow string
	suspect   bool
	lookTimer *time.Timer
	// watchUntil keeps a worker that stopped listing watching the first
	// lease as the deputy would, while its last listing showed no deputy
	// for it: long enough for the coordinator to name one and for it to
	// read its naming.
	watchUntil time.Time
	// due are leases held by others whose lease duration runs out before
	// the coordinator's next listing, with when; expiry fires at the first.
	due    map[string]dueLease
	expiry *time.Timer
	// woken holds when each owner was last woken, with its load then and
	// how long to wait before waking it again.
	woken map[string]wakeState
	nonce uint64
	// lookAt is when a quiet worker that is not the deputy next looks at
	// the first lease (backstop); readable is how many leases the last
	// listing could read.
	lookAt   time.Time
	readable int
	// recent is the last listing's rows and when it was made, for shard
	// syncs to reuse instead of listing again.
	recent   []Lease
	recentAt time.Time
}

// wakeState is when an owner was last woken, its load then, and the wait
// before it is woken again: a lease duration, doubled (to 32 at most) each
// time it was woken and its load did not move (it may hold no more).
type wakeState struct {
	at   time.Time
	load int
	wait time.Duration
}

type dueLease struct {
	lease Lease
	at    time.Time
}

func newCoordination(c *Consumer) coordination {
	cd := coordination{catchUp: true, due: map[string]dueLease{}, woken: map[string]wakeState{}}
	cd.ns = c.caps.notes
	cd.lookTimer = stoppedTimer()
	cd.expiry = stoppedTimer()
	return cd
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// listsNow reports whether this worker lists the table at a take tick.
func (sc *scheduler) listsNow() bool {
	cd := &sc.cd
	if cd.ns == nil {
		return true
	}
	return cd.leading || cd.catchUp || cd.suspect || sc.c.heldCount() == 0
}

// holds reports whether this worker runs shard.
func (c *Consumer) holds(shard string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[shard]
	return ok
}

func (c *Consumer) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// onNote handles a note one of this worker's renewals returned.
func (sc *scheduler) onNote(n noteSeen) {
	cd := &sc.cd
	if n.shard == cd.deputyRow {
		if _, ok := deputyFirst(n.text); !ok {
			sc.c.log.Debug("no longer the deputy")
			cd.deputyRow = ""
			cd.lookTimer.Stop()
		}
	}
	switch f := strings.Fields(n.text); {
	case len(f) == 0:
	case f[0] == noteWake || f[0] == noteLead:
		sc.c.log.Debug("woken by the coordinator: listing", "shard", n.shard, "note", f[0])
		cd.catchUp = true
		sc.poke(sc.wake)
	case f[0] == noteDeputy && len(f) >= 2:
		if cd.deputyRow == "" {
			sc.c.log.Info("named deputy: watching the coordinator's lease", "lease", f[1])
		}
		cd.deputyRow, cd.first = n.shard, f[1]
		sc.armWatch()
	}
}

// armWatch schedules the deputy's next look at the coordinator's row: half
// a take interval, give or take a fifth, so deputies do not move in step.
func (sc *scheduler) armWatch() {
	half := sc.c.cfg.takeInterval / 2
	sc.cd.lookTimer.Reset(half*4/5 + rand.N(half*2/5+1))
}

// isDeputy reports whether this worker watches the coordinator now: it
// was named deputy and holds the row that says so, or it watches for a while
// because no deputy was named yet (watchUntil).
func (sc *scheduler) isDeputy() bool {
	cd := &sc.cd
	if cd.leading || cd.first == "" {
		return false
	}
	if cd.deputyRow == "" {
		return time.Now().Before(cd.watchUntil)
	}
	return sc.c.holds(cd.deputyRow)
}

// watchFirst is the deputy's look at the coordinator's row (see
// lookAtFirst), every half take interval while it watches.
func (sc *scheduler) watchFirst(ctx context.Context) {
	cd := &sc.cd
	if cd.deputyRow != "" && !sc.c.holds(cd.deputyRow) {
		cd.deputyRow = "" // the row that named it moved on
	}
	if !sc.isDeputy() {
		return
	}
	defer sc.armWatch()
	sc.lookAtFirst(ctx)
}

// lookAtFirst reads the first lease's row, eventually consistent, and makes
// this worker list at once when the row shows no owner (or is gone: its
// shard finished and was cleaned up), this worker (it holds the lease
// without coordinating yet), or a counter that stood still longer than a
// renewal. A read that fails otherwise changes nothing.
func (sc *scheduler) lookAtFirst(ctx context.Context) {
	cd := &sc.cd
	c := sc.c
	gctx, cancel := c.storeCtx(ctx)
	l, err := cd.ns.GetEventually(gctx, LeaseKey{Stream: c.stream, Shard: cd.first})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, ErrLeaseNotFound) {
			c.log.Debug("reading the coordinator's lease failed", "lease", cd.first, "err", err)
			return
		}
		l = Lease{}
	}
	now := time.Now()
	o := observeRow(sc.obs, cd.first, l.Counter, l.Owner, now)
	if l.Owner == "" || l.Owner == c.cfg.identity || now.Sub(o.changed) >= sc.stall(l) {
		if !cd.suspect {
			c.log.Info("the coordinator's lease stands still or is free: listing", "lease", cd.first, "owner", l.Owner, "counter", l.Counter)
		}
		cd.suspect = true
		sc.poke(sc.wake)
	}
}

// stall is how long a lease's counter may stand still before its holder
// looks late: a renewal interval (the longer of this worker's and a third of
// the holder's lease duration) and half a take interval.
func (sc *scheduler) stall(l Lease) time.Duration {
	cfg := sc.c.cfg
	return max(cfg.renewInterval, expiresAfter(l, cfg.leaseDuration)/3) + cfg.takeInterval/2
}

// firstReadable returns the lowest shard id among the readable leases.
func firstReadable(leases []Lease) (Lease, bool) {
	if len(leases) == 0 {
		return Lease{}, false
	}
	return slices.MinFunc(leases, func(a, b Lease) int { return strings.Compare(a.Key.Shard, b.Key.Shard) }), true
}

// afterRound updates the roles from a take round: in is its listing, p its
// plan, first its first readable lease (in.first names it; "" when there is
// none), busy whether the round took, adopted or asked for anything.
func (sc *scheduler) afterRound(ctx context.Context, in balance.Listing, readable []Lease, p balance.Plan, first Lease, busy bool, now time.Time) {
	cd := &sc.cd
	if cd.ns == nil {
		return
	}
	c := sc.c
	cd.catchUp = busy || len(sc.pending) > 0 || sc.mayTakeSoon(in, readable, p, now)
	if in.First == "" {
		cd.leading = false
		c.stats.coordinating.Store(false)
		return
	}
	cd.first, cd.readable = first.Key.Shard, len(readable)
	held := c.heldSet()
	was := cd.leading
	cd.leading = held[first.Key.Shard]
	c.stats.coordinating.Store(cd.leading)
	if cd.leading != was {
		if cd.leading {
			c.log.Info("coordinating the stream's leases", "lease", first.Key.Shard)
		} else {
			c.log.Info("no longer coordinating", "lease", first.Key.Shard, "holder", first.Owner)
		}
	}
	// The first readable lease moved to a worker that may not list (the
	// shard before it finished, or the deputy's alarm was false): tell it.
	handOver := was && !cd.leading
	if cd.suspect {
		o := sc.obs[first.Key.Shard]
		switch {
		case cd.leading || first.Owner != "" && !in.Expired[first.Key.Shard] && now.Sub(o.changed) < sc.stall(first):
			cd.suspect = false
			handOver = !cd.leading
		case first.Owner == "" && in.MaxLeases > 0 && len(held) >= in.MaxLeases:
			// Free, but this worker may hold no more (WithMaxLeases): the
			// alarm would keep it listing for nothing.
			cd.suspect = false
		}
	}
	if handOver && first.Owner != "" && first.Owner != in.Me && first.HandoffTo == "" && !in.Expired[first.Key.Shard] {
		sc.note(ctx, first, fmt.Sprintf("%s %x", noteLead, sc.nextNonce()))
	}
	// A worker that stops listing while no deputy is named for the first
	// lease watches it in the meantime: a coordinator that crashes in its
	// first moments is then noticed as quickly as later on.
	if !cd.leading && !cd.catchUp && cd.deputyRow == "" && first.Owner != "" && !hasDeputyFor(readable, first.Key.Shard) {
		cd.watchUntil = now.Add(c.cfg.renewInterval + c.cfg.takeInterval)
		sc.armWatch()
	}
	if !cd.leading {
		cd.due = map[string]dueLease{}
		cd.expiry.Stop()
		if cd.suspect {
			// A deputy whose coordinator stopped takes the leases it watched
			// stand still the moment they expire, as the coordinator would,
			// the first one (and with it coordination) included.
			sc.scheduleExpiry(in, readable, now)
		}
		return
	}
	cd.deputyRow = ""
	sc.scheduleExpiry(in, readable, now)
	deputyRow := sc.nameDeputy(ctx, in, readable, first)
	sc.wakeBelowShare(ctx, in, readable, p, held, deputyRow, now)
}

// mayTakeSoon reports whether a worker below its ceiling (and its
// WithMaxLeases cap) sees a lease it may take after more listings: one left
// free, or one whose counter stood still longer than a renewal (it may
// expire, and expiry is judged from this worker's own listings). Such a
// worker keeps listing: a worker woken because the coordinator could not
// take a lease would otherwise stop before the lease expired for it.
func (sc *scheduler) mayTakeSoon(in balance.Listing, readable []Lease, p balance.Plan, now time.Time) bool {
	mine := 0
	for _, l := range readable {
		if in.Held[l.Key.Shard] {
			mine++
		}
	}
	if mine >= p.Ceiling || in.MaxLeases > 0 && mine >= in.MaxLeases {
		return false
	}
	for _, l := range readable {
		id := l.Key.Shard
		if in.Held[id] || in.Skip[id] || in.Refused[id] || l.Owner == in.Me {
			continue
		}
		if l.Owner == "" || now.Sub(sc.obs[id].changed) >= sc.stall(l) {
			return true
		}
	}
	return false
}

// scheduleExpiry arms the coordinator's timer for the leases of others whose
// lease duration, timed from when it first saw their counter, runs out
// before its next listing: each is taken at that moment instead.
func (sc *scheduler) scheduleExpiry(in balance.Listing, readable []Lease, now time.Time) {
	cd := &sc.cd
	c := sc.c
	next := now.Add(c.cfg.takeInterval)
	cd.due = map[string]dueLease{}
	var earliest time.Time
	for _, l := range readable {
		id := l.Key.Shard
		if l.Owner == "" || l.Owner == in.Me || in.Held[id] || in.Skip[id] || in.Expired[id] || in.Refused[id] {
			continue
		}
		at := sc.obs[id].changed.Add(expiresAfter(l, c.cfg.leaseDuration))
		if !at.Before(next) {
			continue
		}
		cd.due[id] = dueLease{lease: l, at: at}
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	cd.expiry.Stop()
	if !earliest.IsZero() {
		cd.expiry.Reset(time.Until(earliest))
	}
}

// takeExpired takes the due leases whose lease duration has run out, each
// with an acquire on the counter the coordinator saw stand still: a holder
// that renewed meanwhile makes it fail.
func (sc *scheduler) takeExpired(ctx context.Context) error {
	cd := &sc.cd
	if !cd.leading && !cd.suspect {
		return nil
	}
	now := time.Now()
	stuck := sc.c.stuckSet()
	byShard := make(map[string]Lease, len(cd.recent))
	for _, l := range cd.recent {
		byShard[l.Key.Shard] = l
	}
	var rest time.Time
	var now2 []string
	for id, d := range cd.due {
		if d.at.After(now) {
			if rest.IsZero() || d.at.Before(rest) {
				rest = d.at
			}
			continue
		}
		now2 = append(now2, id)
	}
	// The first lease first (whoever holds it coordinates), then by shard;
	// never beyond WithMaxLeases.
	slices.SortFunc(now2, func(a, b string) int {
		if (a == cd.first) != (b == cd.first) {
			if a == cd.first {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, id := range now2 {
		d := cd.due[id]
		delete(cd.due, id)
		if limit := sc.c.cfg.maxLeases; limit > 0 && sc.c.heldCount() >= limit {
			continue
		}
		if o, ok := sc.obs[id]; !ok || o.counter != d.lease.Counter || stuck[id] {
			continue
		}
		if _, err := sc.take(ctx, d.lease, byShard, now); err != nil || ctx.Err() != nil {
			return err
		}
	}
	if !rest.IsZero() {
		cd.expiry.Reset(time.Until(rest))
	}
	return nil
}

// hasDeputyFor reports whether a row names a deputy for the first lease.
func hasDeputyFor(leases []Lease, first string) bool {
	for _, l := range leases {
		if f, ok := deputyFirst(l.Note); ok && f == first && l.Owner != "" {
			return true
		}
	}
	return false
}

// nameDeputy makes sure one live worker other than the coordinator watches
// the first lease: it keeps a deputy named for the current first lease and
// names one (on its lowest running lease) when there is none.
func (sc *scheduler) nameDeputy(ctx context.Context, in balance.Listing, readable []Lease, first Lease) (noted string) {
	var stale, cands []Lease
	for _, l := range readable {
		if l.Owner == "" || l.Owner == in.Me || in.Held[l.Key.Shard] || in.Expired[l.Key.Shard] || l.HandoffTo != "" {
			continue
		}
		if f, ok := deputyFirst(l.Note); ok {
			if f == first.Key.Shard {
				return "" // a deputy watches the first lease
			}
			stale = append(stale, l)
			continue
		}
		cands = append(cands, l)
	}
	// A deputy of an earlier first lease watches this one instead. Rows
	// renewed since they were taken go first: a row handed over but not yet
	// adopted shows no expiry, and its adoption would clear the note.
	if len(stale) > 0 {
		cands = stale
	}
	if renewed := slices.DeleteFunc(slices.Clone(cands), func(l Lease) bool { return l.Expiry.IsZero() }); len(renewed) > 0 {
		cands = renewed
	}
	if len(cands) == 0 {
		return ""
	}
	l := slices.MinFunc(cands, func(a, b Lease) int { return strings.Compare(a.Key.Shard, b.Key.Shard) })
	sc.note(ctx, l, fmt.Sprintf("%s %s %x", noteDeputy, first.Key.Shard, sc.nextNonce()))
	return l.Key.Shard
}

// wakeBelowShare wakes each worker that runs leases but fewer than its
// share, while another runs at least two more or a lease is left free or
// expired that the coordinator could not take (WithMaxLeases), once a lease
// duration at most. held is what the coordinator runs after its round.
func (sc *scheduler) wakeBelowShare(ctx context.Context, in balance.Listing, readable []Lease, p balance.Plan, held map[string]bool, deputyRow string, now time.Time) {
	cd := &sc.cd
	load := maps.Clone(p.Load)
	mine, open := 0, 0
	for _, l := range readable {
		id := l.Key.Shard
		switch {
		case held[id]:
			mine++
		case (l.Owner == "" || in.Expired[id]) && !in.Refused[id] && !in.Skip[id]:
			open++
		}
	}
	load[in.Me] = mine
	most := 0
	for _, n := range load {
		most = max(most, n)
	}
	rows := map[string][]Lease{}
	for _, l := range readable {
		if l.Owner != "" && l.Owner != in.Me && l.HandoffTo == "" && !in.Expired[l.Key.Shard] {
			if _, dep := deputyFirst(l.Note); !dep && l.Key.Shard != deputyRow {
				// Not on the deputy's row: the note would replace its naming.
				rows[l.Owner] = append(rows[l.Owner], l)
			}
		}
	}
	for owner, n := range load {
		if owner == in.Me || len(rows[owner]) == 0 || open == 0 && most < n+2 {
			continue
		}
		// Its own cap, if it has one, is not known here: it finds out when
		// it lists.
		if target, _ := balance.Share(owner, load, len(readable), 0); n >= target {
			continue
		}
		L := sc.c.cfg.leaseDuration
		ws, ok := cd.woken[owner]
		if ok && now.Sub(ws.at) < ws.wait {
			continue
		}
		wait := L
		if ok && ws.load == n {
			wait = min(2*ws.wait, 32*L)
		}
		cd.woken[owner] = wakeState{at: now, load: n, wait: wait}
		// A row renewed since taken first: one handed over but not yet
		// adopted would lose the note to the adoption.
		l := rows[owner][0]
		for _, r := range rows[owner] {
			if !r.Expiry.IsZero() {
				l = r
				break
			}
		}
		sc.note(ctx, l, fmt.Sprintf("%s %x", noteWake, sc.nextNonce()))
	}
	for owner := range cd.woken {
		if _, ok := load[owner]; !ok {
			delete(cd.woken, owner)
		}
	}
}

func (sc *scheduler) nextNonce() uint64 {
	sc.cd.nonce++
	return sc.cd.nonce<<16 | uint64(rand.N(1<<16))
}

// note writes a note; a failure is logged (the next listing tries again).
func (sc *scheduler) note(ctx context.Context, l Lease, text string) {
	c := sc.c
	nctx, cancel := c.storeCtx(ctx)
	_, err := sc.cd.ns.Note(nctx, l, text)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.log.Debug("writing a note failed", "shard", l.Key.Shard, "holder", l.Owner, "err", err)
		}
		return
	}
	c.log.Debug("note written", "shard", l.Key.Shard, "holder", l.Owner, "note", text)
}

// backstopFactor sets how rarely quiet workers look at the first lease
// while no deputy may be watching it (named too late, or crashed with the
// coordinator): each looks every backstopFactor take intervals times the
// number of readable leases per lease it holds, so that the fleet looks
// about once every backstopFactor take intervals, however many workers.
const backstopFactor = 8

// backstop is a quiet worker's occasional look at the first lease, so that
// a coordinator that left no deputy behind is noticed: a row with no owner,
// or a counter that stood still since this worker's previous look, makes
// it list.
func (sc *scheduler) backstop(ctx context.Context) {
	cd := &sc.cd
	if cd.ns == nil || cd.first == "" || sc.isDeputy() {
		return
	}
	c := sc.c
	now := time.Now()
	h := max(1, c.heldCount())
	period := c.cfg.takeInterval * time.Duration(backstopFactor*max(cd.readable, h)/h)
	if cd.lookAt.IsZero() {
		cd.lookAt = now.Add(period/2 + rand.N(period))
		return
	}
	if now.Before(cd.lookAt) {
		return
	}
	cd.lookAt = now.Add(period/2 + rand.N(period))
	sc.lookAtFirst(ctx)
}

// passLead is a leaving coordinator's last act: it tells another worker
// (its deputy if it named one) to list, so that the leases it is about to
// release are taken even when the deputy had not learnt of its naming yet.
func (sc *scheduler) passLead(ctx context.Context) {
	cd := &sc.cd
	if cd.ns == nil || !cd.leading {
		return
	}
	me := sc.c.cfg.identity
	var to *Lease
	for i, l := range cd.recent {
		if l.Owner == "" || l.Owner == me || l.HandoffTo != "" || l.Checkpoint == ShardEnd {
			continue
		}
		if f, ok := deputyFirst(l.Note); ok && f == cd.first {
			to = &cd.recent[i]
			break
		}
		if to == nil {
			to = &cd.recent[i]
		}
	}
	if to != nil {
		sc.note(ctx, *to, fmt.Sprintf("%s %x", noteLead, sc.nextNonce()))
	}
}
