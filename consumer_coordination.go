package shardlease

import (
	"context"
	"errors"
	"math/rand/v2"
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
	// dueLeases holds their rows as listed.
	due       []balance.Deadline
	dueLeases map[string]Lease
	expiry    *time.Timer
	// woken is the wake backoff of each owner (balance.Wakes).
	woken map[string]balance.Woken
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

func newCoordination(c *Consumer) coordination {
	cd := coordination{catchUp: true, woken: map[string]balance.Woken{}}
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
		if _, ok := balance.DeputyFirst(n.text); !ok {
			sc.c.log.Debug("no longer the deputy")
			cd.deputyRow = ""
			cd.lookTimer.Stop()
		}
	}
	switch f := strings.Fields(n.text); {
	case len(f) == 0:
	case f[0] == balance.NoteWake || f[0] == balance.NoteLead:
		sc.c.log.Debug("woken by the coordinator: listing", "shard", n.shard, "note", f[0])
		cd.catchUp = true
		sc.poke(sc.wake)
	case f[0] == balance.NoteDeputy && len(f) >= 2:
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

// afterRound updates the roles from a take round: tl is its listing, r the
// round as carried out.
func (sc *scheduler) afterRound(ctx context.Context, tl *takeListing, r *balance.Round, now time.Time) {
	cd := &sc.cd
	if cd.ns == nil {
		return
	}
	c := sc.c
	in, first := tl.in, tl.first
	cd.catchUp = r.Busy() || len(sc.pending) > 0 || balance.MayTakeSoon(in, r.Plan())
	if in.First == "" {
		cd.leading = false
		c.stats.coordinating.Store(false)
		return
	}
	cd.first, cd.readable = in.First, len(in.Rows)
	held := c.heldSet()
	was := cd.leading
	cd.leading = held[in.First]
	c.stats.coordinating.Store(cd.leading)
	if cd.leading != was {
		if cd.leading {
			c.log.Info("coordinating the stream's leases", "lease", in.First)
		} else {
			c.log.Info("no longer coordinating", "lease", in.First, "holder", first.Owner)
		}
	}
	// The first readable lease moved to a worker that may not list (the
	// shard before it finished, or the deputy's alarm was false): tell it.
	handOver := was && !cd.leading
	if cd.suspect {
		switch {
		case cd.leading || first.Owner != "" && !in.Expired[in.First] && !in.Stalled[in.First]:
			cd.suspect = false
			handOver = !cd.leading
		case first.Owner == "" && in.MaxLeases > 0 && len(held) >= in.MaxLeases:
			// Free, but this worker may hold no more (WithMaxLeases): the
			// alarm would keep it listing for nothing.
			cd.suspect = false
		}
	}
	if it, ok := balance.HandOverLead(in, rowOf(first)); ok && handOver {
		sc.writeNote(ctx, tl, it)
	}
	// A worker that stops listing while no deputy is named for the first
	// lease watches it in the meantime: a coordinator that crashes in its
	// first moments is then noticed as quickly as later on.
	if !cd.leading && !cd.catchUp && cd.deputyRow == "" && first.Owner != "" && !balance.HasDeputyFor(in.Rows, in.First) {
		cd.watchUntil = now.Add(c.cfg.renewInterval + c.cfg.takeInterval)
		sc.armWatch()
	}
	if !cd.leading {
		cd.due = nil
		cd.expiry.Stop()
		if cd.suspect {
			// A deputy whose coordinator stopped takes the leases it watched
			// stand still the moment they expire, as the coordinator would,
			// the first one (and with it coordination) included.
			sc.scheduleExpiry(tl, now)
		}
		return
	}
	cd.deputyRow = ""
	sc.scheduleExpiry(tl, now)
	notes, woken := balance.CoordinatorNotes(in, r.Plan(), held, cd.woken, now, c.cfg.leaseDuration)
	cd.woken = woken
	for _, it := range notes {
		sc.writeNote(ctx, tl, it)
	}
}

// scheduleExpiry arms the expiry timer for the leases of others whose
// lease duration, timed from when this worker first saw their counter,
// runs out before its next listing: each is taken at that moment instead.
func (sc *scheduler) scheduleExpiry(tl *takeListing, now time.Time) {
	cd := &sc.cd
	cd.due = balance.DueBefore(tl.in, tl.expiresAt, now.Add(sc.c.cfg.takeInterval))
	cd.dueLeases = make(map[string]Lease, len(cd.due))
	for _, d := range cd.due {
		cd.dueLeases[d.Row.Shard] = tl.byShard[d.Row.Shard]
	}
	cd.expiry.Stop()
	if at, ok := balance.Earliest(cd.due); ok {
		cd.expiry.Reset(time.Until(at))
	}
}

// takeExpired takes the due leases whose lease duration has run out, each
// with an acquire on the counter this worker saw stand still: a holder
// that renewed meanwhile makes it fail.
func (sc *scheduler) takeExpired(ctx context.Context) error {
	cd := &sc.cd
	if !cd.leading && !cd.suspect {
		return nil
	}
	now := time.Now()
	skip := sc.c.stuckSet()
	for _, d := range cd.due {
		if o, ok := sc.obs[d.Row.Shard]; !ok || o.counter != d.Row.Counter {
			skip[d.Row.Shard] = true // the row moved since
		}
	}
	byShard := make(map[string]Lease, len(cd.recent))
	for _, l := range cd.recent {
		byShard[l.Key.Shard] = l
	}
	takes, ahead := balance.TakeDue(cd.due, now, cd.first, skip, sc.c.heldCount(), sc.c.cfg.maxLeases)
	cd.due = ahead
	for {
		row, ok := takes.Next()
		if !ok {
			break
		}
		l := cd.dueLeases[row.Shard]
		_, asked := sc.pending[row.Shard]
		took, err := sc.take(ctx, l, asked, byShard, now)
		if err != nil || ctx.Err() != nil {
			return err
		}
		takes.Done(took)
	}
	if at, ok := balance.Earliest(ahead); ok {
		cd.expiry.Reset(time.Until(at))
	}
	return nil
}

func (sc *scheduler) nextNonce() uint64 {
	sc.cd.nonce++
	return sc.cd.nonce<<16 | uint64(rand.N(1<<16))
}

// writeNote carries out a note intent on the row of tl it names.
func (sc *scheduler) writeNote(ctx context.Context, tl *takeListing, it balance.Intent) {
	sc.note(ctx, tl.byShard[it.Row.Shard], balance.NoteText(it.Kind, sc.cd.first, sc.nextNonce()))
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
	rows := make([]balance.Row, 0, len(cd.recent))
	byShard := make(map[string]Lease, len(cd.recent))
	for _, l := range cd.recent {
		rows = append(rows, rowOf(l))
		byShard[l.Key.Shard] = l
	}
	if it, ok := balance.PassLead(rows, sc.c.cfg.identity, cd.first); ok {
		sc.writeNote(ctx, &takeListing{byShard: byShard}, it)
	}
}
