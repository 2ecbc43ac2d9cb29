package shardlease

import (
	"context"
	"math/rand/v2"
	"slices"
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
//   - the deputies: two workers the coordinator names with a note (one in
//     a fleet of two). Each reads the coordinator's lease row once a take
//     interval (one eventually consistent GetItem), and once more the
//     moment it would have stood still long enough, and starts listing when
//     the row stands still longer than a renewal or shows no owner,
//     so that it takes the lease (and with it coordination) when the
//     coordinator is gone; two, so that any two workers failing together
//     leave one watching (consumer_liveness.go).
//   - workers that hold nothing, were woken, wait for a handoff they asked
//     for, or took something in their last round: until a round leaves them
//     nothing to do.
//
// Every other worker only renews: it sees handoff requests and notes in the
// rows its renewals return. Every decision is still a conditional write on
// the counter a listing showed, so a coordinator that is wrong, late or two
// at once costs writes that fail, never a second reader.
//
// The role (type role) is one explicit state of Run's goroutine, kept by
// the coordination type, which the scheduler holds and calls; quiet,
// watching and deputy are the resting roles:
//
//	catchingUp  -> resting       a round left nothing to do (the watch picks which)
//	resting     -> catchingUp    a wake or lead note; a shard of its own ended; the first lease adopted
//	resting     -> deputy        a deputy note names it
//	deputy      -> resting       its naming ended (it watches on for R + T)
//	watching    -> quiet         the watch ran out
//	any         -> alarmed       a look saw the first row stand still or free
//	alarmed     -> catchingUp    a round saw the first row move again (or resting)
//	any         -> coordinator   a round ended with it holding the first lease
//	coordinator -> catchingUp    a round ended with the first lease elsewhere (or resting)
//	coordinator -> resting       it gave the first lease up (it cannot list)
//	any         -> quiet         it stopped (shutdown or drain)
//
// uncoordinated (no notes) never changes. The transition is a pure
// function, balance.NextRole, with its table test; every event reaches it
// through on, and only become writes the role. What differs by role is in
// one function per event: onTakeTick (and listsNow), onLook, onExpiry,
// onNote and afterRound. The state a role keeps is rebuilt by become as the
// role is entered: the coordinator's wake backoff (leadState), and a watch
// it starts without; the deadlines of the roles that take on expiry; the
// ask to lead (led), which lasts until the next round's end. The deputy's
// naming (watch) outlives catching up and the alarm. Notes are read only
// through balance.ParseNote. Package balance makes every pick.

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

// role is what this worker does for coordination (see the top of this
// file, and balance.Role for the transitions). It changes only in become,
// on the events of Run's loop: a take round's end, a note, a look at the
// first lease, a runner that ended its shard, a stop.
type role = balance.Role

// The roles, as this file names them (see balance.Role for each).
const (
	uncoordinated = balance.RoleUncoordinated
	quiet         = balance.RoleQuiet
	watching      = balance.RoleWatching
	deputy        = balance.RoleDeputy
	catchingUp    = balance.RoleCatchingUp
	alarmed       = balance.RoleAlarmed
	coordinator   = balance.RoleCoordinator
)

// coordination is this worker's part in coordinating the stream's leases:
// its role, the role's state and the events that change them (see the top
// of this file). Run's goroutine alone calls its methods and reads and
// writes its fields. The scheduler holds it and lends it what it needs:
// the observations of the rows' counters, the handoffs asked for, the take
// and the channel that asks for a take round.
type coordination struct {
	c *Consumer
	// obs is the scheduler's observations of the rows' counters, which
	// lookAtFirst adds to; pending is the scheduler's handoff requests,
	// read only.
	obs     map[string]observation
	pending map[string]time.Time
	// take takes one lease (scheduler.take); wake asks Run's loop for a
	// take round.
	take func(ctx context.Context, l Lease, asked bool, byShard map[string]Lease, now time.Time) (bool, error)
	wake chan struct{}
	// ns is the store's notes; nil when it has none (uncoordinated).
	ns NoteStore
	// sessions is the scheduler's view of the sessions that keep leases,
	// through which a watched lease's mark is read.
	sessions *sessionView
	role     role
	// first is the first readable lease's shard, as the last listing or a
	// deputy note showed it; firsts is how many first leases (one a
	// stream) the last listing showed (see offRota).
	first  string
	firsts int
	// The state of the role being played, rebuilt by become as it enters
	// a role (see become):
	//
	// watch is the deputy's naming and the watch of a worker that saw no
	// deputy, kept in every role but the coordinator's, which starts
	// without one; lookTimer fires its looks.
	watch     watch
	lookTimer *time.Timer
	// side are the deputy namings beyond the watch's, by other
	// coordinators (consumer_sidewatch.go); the lookTimer fires their looks
	// too. Kept as the watch is.
	side sideWatches
	// lead is the coordinator's own state, made anew each time this worker
	// becomes the coordinator; nil in every other role.
	lead *leadState
	// led is set while a lead note asks this worker to take as the
	// coordinator does in its round: until its next round ends or its
	// role changes (balance.AskedToLead).
	led bool
	// expiry takes leases at their deadline, as the coordinator or an
	// alarmed worker; emptied as either role is entered or left.
	expiry deadlines
	nonce  uint64
	// backstop times a resting worker's looks at the first lease;
	// readable is how many leases the last listing could read.
	backstop backstop
	readable int
	// rota times this worker's looks at the first lease in a fleet with
	// sessions, in place of the deputies' and the backstop's (see rota).
	rota rota
	// recent is the last listing's rows (also by row key) and when it was
	// made, for shard syncs to reuse instead of listing again, and for the
	// notes and takes made between listings.
	recent        []Lease
	recentByShard map[string]Lease
	recentAt      time.Time
	// live is the liveness rules' state (consumer_liveness.go).
	live liveness
	// suspect is the holder of the lease whose standing still raised the
	// alarm ("" when it was free): when another worker takes that lease,
	// this one lists on while the listing shows the suspect's rows.
	suspect string
	// firstRow is the first lease's row as the last listing or look
	// showed it: a look that finds it moved from a holder whose session
	// is over lists for that holder's other leases.
	firstRow Lease
}

// recentRows returns the last listing's rows as balance sees them,
// finished ones included.
func (cd *coordination) recentRows() []balance.Row {
	rows := make([]balance.Row, 0, len(cd.recent))
	for _, l := range cd.recent {
		rows = append(rows, rowOf(l))
	}
	return rows
}

// leadState is what only the coordinator keeps.
type leadState struct {
	// woken is the wake backoff of each owner (balance.Wakes).
	woken map[string]balance.Woken
}

// watch is the deputy's rule. While a deputy note names this worker on a
// row it holds (row), or until a moment after a listing showed no deputy
// for the first lease (until: long enough for the coordinator to name one
// and for it to read its naming), it looks at the first lease every take
// interval, less up to a fifth (lookTimer), and lists as soon as that row
// shows no owner or a counter that stood still longer than a renewal and
// half a take interval. A look comes sooner when that moment (stallAt, as
// the last look showed the row) falls before: the alarm is raised at it,
// not up to a period later.
type watch struct {
	row     string
	until   time.Time
	stallAt time.Time
}

// looks reports whether the rule looks at the first lease at now; holds
// tells whether this worker runs a shard.
func (w watch) looks(now time.Time, holds func(string) bool) bool {
	if w.row == "" {
		return now.Before(w.until)
	}
	return holds(w.row)
}

// deadlines is the rule of the expiry timer: the leases held by others
// whose lease duration, timed from when this worker first saw their
// counter, runs out before its next listing (due, with their rows as
// listed); the timer fires at the first, and each is taken then.
type deadlines struct {
	*time.Timer
	due    []balance.Deadline
	leases map[string]Lease
}

// clear forgets every deadline and stops the timer.
func (d *deadlines) clear() {
	d.due, d.leases = nil, nil
	d.Stop()
}

// arm sets the timer to the first of the deadlines, if any.
func (d *deadlines) arm() {
	if at, ok := balance.Earliest(d.due); ok {
		d.Reset(time.Until(at))
	}
}

// backstopFactor sets how rarely quiet workers look at the first lease
// while no deputy may be watching it (named too late, or crashed with the
// coordinator): each looks every backstopFactor take intervals times the
// number of readable leases per lease it holds, so that the fleet looks
// about once every backstopFactor take intervals, however many workers.
const backstopFactor = 8

// sessionLooks is how many looks at the first lease the quiet workers of a
// fleet with sessions make between them each take interval (each looks
// every sessionLooks-th of a take interval times the number of readable
// leases per lease it holds), and a look that finds the lease's mark moved
// is confirmed a stall later: so that when the coordinator and its
// deputies fail together (a zone, whichever workers are in it) some
// survivor's pair of looks starts within a take interval or two, whatever
// the fleet's size, at reads that do not grow with it.
const sessionLooks = 3

// backstopPeriod is how long a quiet worker that holds held of readable
// leases waits between its looks at the first lease.
func backstopPeriod(take time.Duration, readable, held int, sessions bool) time.Duration {
	held = max(1, held)
	if sessions {
		return max(take, take*time.Duration(max(readable, held))/time.Duration(sessionLooks*held))
	}
	return take * time.Duration(backstopFactor*max(readable, held)/held)
}

// backstop is the rule of a resting worker's occasional look at the first
// lease, so that a coordinator that left no deputy behind is noticed: at
// each take tick, once lookAt has passed, it looks and sets the next look
// a period later, give or take half (see due for the first).
type backstop struct {
	lookAt time.Time
	// confirm is set while the next look confirms one that found the mark
	// moved (confirmBy): that look schedules no confirmation of its own.
	confirm bool
}

// confirmBy brings the next look forward to at, if it is later, as the
// confirmation of the look just made.
func (b *backstop) confirmBy(at time.Time) {
	if b.lookAt.After(at) {
		b.lookAt, b.confirm = at, true
	}
}

// due reports whether the look is due at now, and if so (or at the first
// call) sets the next one. With spread, the first call sets it anywhere
// within a period, so that the looks of workers that turned quiet together
// are spread over it from the start (the role-free looks of a fleet with
// sessions); without, a period later give or take half, as every later
// one.
func (b *backstop) due(now time.Time, period time.Duration, spread bool) bool {
	if b.lookAt.IsZero() {
		b.lookAt = now.Add(period/2 + rand.N(period))
		if spread {
			b.lookAt = now.Add(rand.N(period))
		}
		return false
	}
	if now.Before(b.lookAt) {
		return false
	}
	b.lookAt = now.Add(period/2 + rand.N(period))
	return true
}

// newCoordination returns the coordination of sc's worker, in the role it
// starts in.
func newCoordination(sc *scheduler) coordination {
	c := sc.c
	cd := coordination{c: c, obs: sc.obs, pending: sc.pending, take: sc.take, wake: sc.wake, ns: c.caps.notes, sessions: sc.sessions, role: catchingUp}
	if cd.ns == nil {
		cd.role = uncoordinated
	}
	cd.lookTimer = stoppedTimer()
	cd.rota = newRota()
	cd.expiry = deadlines{Timer: stoppedTimer()}
	return cd
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// on is an event of Run's loop that may change the role: balance.NextRole
// picks the role it leaves this worker in, from the watch as it is now and
// f (which on fills in with the watch).
func (cd *coordination) on(e balance.RoleEvent, f balance.RoleFacts) { cd.onAt(e, f, time.Now()) }

// onAt is on with the watch judged at now: a round's end judges it at the
// round's time, as its listing does.
func (cd *coordination) onAt(e balance.RoleEvent, f balance.RoleFacts, now time.Time) {
	f.Named, f.Watching = cd.watch.row != "", now.Before(cd.watch.until)
	cd.become(balance.NextRole(cd.role, e, f), e)
}

// become moves this worker to role r on event e, rebuilding the state of
// the role it enters: the coordinator's wake backoff, and a watch it
// starts without; the deadlines of the roles that take on expiry; the ask
// to lead, which a lead note sets and a round's end or a role change
// clears. Stats().Coordinating follows. It is the only writer of role.
func (cd *coordination) become(r role, e balance.RoleEvent) {
	cd.c.seeRole(r, cd.recent, cd.recentAt)
	was := cd.role
	cd.led = balance.AskedToLead(was, r, e, cd.led)
	if r == was {
		return
	}
	cd.role = r
	cd.c.log.Debug("coordination role", "was", was.String(), "now", r.String())
	if was.TakesOnExpiry() || r.TakesOnExpiry() {
		cd.expiry.clear()
	}
	cd.lead = nil
	if r == coordinator {
		cd.lead = &leadState{woken: map[string]balance.Woken{}}
		cd.watch = watch{}
		cd.side.clear()
	}
	cd.c.stats.coordinating.Store(r == coordinator)
}

// catchUp makes a resting worker list until a round leaves it nothing to
// do (a shard of its own ended, it adopted the first lease); a worker that
// lists already goes on as it is.
func (cd *coordination) catchUp() {
	cd.on(balance.WokenUp, balance.RoleFacts{})
}

// listsNow reports whether this worker lists the table at a take tick: a
// resting worker lists only while it holds nothing, and then rarely (see
// idleLists).
func (cd *coordination) listsNow() bool {
	return !cd.role.Resting() || cd.c.heldCount() == 0 && cd.idleLists(time.Now())
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
func (cd *coordination) onNote(n noteSeen) {
	note := balance.ParseNote(n.text)
	if note.Kind != balance.NoteDeputy {
		cd.side.unname(n.shard)
	}
	if n.shard == cd.watch.row && note.Kind != balance.NoteDeputy {
		cd.c.log.Debug("no longer the deputy")
		cd.unnamed(time.Now())
	}
	switch note.Kind {
	case balance.NoteWake, balance.NoteLead:
		cd.c.log.Debug("woken by the coordinator: listing", "shard", n.shard, "note", n.text)
		cd.woken(time.Now(), note)
	case balance.NoteDeputy:
		if cd.role == uncoordinated {
			return // it cannot read the coordinator's row
		}
		cd.named(n.shard, note.FirstsOn(keyOf(n.shard).Stream))
		cd.on(balance.Named, balance.RoleFacts{})
		cd.armWatch()
		if note.Wake {
			cd.c.log.Debug("woken by the coordinator: listing", "shard", n.shard, "note", n.text)
			cd.woken(time.Now(), note)
		}
	}
}

// named follows a deputy note on row naming firsts: the first naming this
// worker has (or the one on row) is the watch's, and the lease it watched
// stays its own if named still; every other lease named, here or on
// another row (by another stream's coordinator), it watches as a side
// watch.
func (cd *coordination) named(row string, firsts []string) {
	cd.side.unname(row)
	if cd.watch.row == "" || row == cd.watch.row {
		first := firsts[0]
		if slices.Contains(firsts, cd.first) {
			first = cd.first
		}
		if cd.watch.row == "" {
			cd.c.log.Info("named deputy: watching the coordinator's lease", "lease", first)
		}
		cd.watch.row, cd.first = row, first
	}
	for _, f := range firsts {
		if (row != cd.watch.row || f != cd.first) && cd.side.name(row, f) {
			cd.c.log.Info("named deputy by another coordinator: watching its lease too", "lease", f)
		}
	}
}

// armWatch schedules the next look at the coordinator's row: a take
// interval, less up to a fifth so that deputies do not move in step, or
// the moment the row as last seen would have stood still long enough for
// the alarm (watch.stallAt), if that comes first.
func (cd *coordination) armWatch() {
	t := cd.c.cfg.takeInterval
	d := t - rand.N(t/5+1)
	for _, at := range []time.Time{cd.watch.stallAt, cd.side.nextStall()} {
		if until := time.Until(at); until > 0 {
			d = min(d, until)
		}
	}
	cd.lookTimer.Reset(d)
}

// watches reports whether this worker watches the coordinator now (see
// watch): never as the coordinator, nor before it knows the first lease.
// A worker named by a second coordinator watches while either naming
// lasts.
func (cd *coordination) watches() bool {
	if cd.role == coordinator {
		return false
	}
	side := cd.side.prune(cd.c.holds)
	return side || cd.first != "" && cd.watch.looks(time.Now(), cd.c.holds)
}

// onTakeTick is a take tick for a worker that does not list now: a
// resting role's look at the first lease, when its rule says so (the
// rota's, with sessions, when it has candidates).
func (cd *coordination) onTakeTick(ctx context.Context) {
	rota := cd.armRota(time.Time{})
	switch cd.role {
	case watching:
		if !cd.watches() {
			cd.on(balance.WatchEnded, balance.RoleFacts{}) // the watch ran out
			if !rota {
				cd.lookNowAndThen(ctx)
			}
		}
	case deputy:
		if !cd.watches() {
			cd.unnamed(time.Now()) // the row that named it moved on
		}
	case quiet:
		if !rota {
			cd.lookNowAndThen(ctx)
		}
	}
}

// rotaLooks reports whether the rota looks at the first lease for this
// worker: sessions on, a resting role, and a last listing that shows the
// first lease held and some lease held by another worker.
func (cd *coordination) rotaLooks() ([]string, bool) {
	if cd.c.sess == nil || !cd.role.Resting() || cd.first == "" {
		return nil, false
	}
	cands := rotaCandidates(cd.recent, cd.first, cd.rota.idle)
	return cands, len(cands) > 0
}

// armRota sets the rota's timer (see rota.arm; confirm is when a look that
// found the first lease standing still looks again) and reports whether
// the rota looks for this worker; when it does not, its timer is stopped.
func (cd *coordination) armRota(confirm time.Time) bool {
	cands, ok := cd.rotaLooks()
	if !ok {
		cd.rota.stop()
		return false
	}
	me := idleCandidate(cd.c.cfg.identity)
	mine := func(k string) bool { return k == me || cd.c.holds(k) }
	cd.rota.arm(time.Now(), cd.c.cfg.takeInterval, cands, mine, confirm)
	return true
}

// onRota is the rota's timer: this worker's turn at the first lease. A
// look that finds its mark unchanged since an earlier one looks again the
// moment it would have stood still long enough: that look raises the alarm.
func (cd *coordination) onRota(ctx context.Context) {
	cd.rota.fired()
	if _, ok := cd.rotaLooks(); !ok {
		return
	}
	l, o, ok := cd.lookAtFirst(ctx)
	confirm := time.Time{}
	if ok && o.changed.Before(o.seen) {
		confirm = o.changed.Add(cd.stall(l))
	}
	cd.armRota(confirm)
}

// lookNowAndThen is the backstop's look at the first lease, when due.
func (cd *coordination) lookNowAndThen(ctx context.Context) {
	if cd.first == "" {
		return
	}
	c := cd.c
	period := backstopPeriod(c.cfg.takeInterval, cd.readable, c.heldCount(), c.sess != nil)
	confirming := cd.backstop.confirm
	if !cd.backstop.due(time.Now(), period, c.sess != nil) {
		return
	}
	cd.backstop.confirm = false
	l, o, ok := cd.lookAtFirst(ctx)
	if ok && !confirming && c.sess != nil && l.Owner != "" && l.Owner != c.cfg.identity && o.changed.Equal(o.seen) {
		// The mark moved since this worker's last look: one look cannot
		// tell a live coordinator from a stopped one, a second a stall
		// later can. That second look confirms nothing further: a live
		// coordinator's mark always moves.
		cd.backstop.confirmBy(o.seen.Add(cd.stall(l)))
	}
}

// onLook is the look timer: the watch's look at the coordinator's row
// (see lookAtFirst), every half take interval while it watches.
func (cd *coordination) onLook(ctx context.Context) {
	if cd.role == uncoordinated {
		return
	}
	if cd.watch.row != "" && !cd.c.holds(cd.watch.row) {
		cd.unnamed(time.Now()) // the row that named it moved on
	}
	if !cd.watches() {
		cd.on(balance.WatchEnded, balance.RoleFacts{})
		return
	}
	defer cd.armWatch()
	looked := ""
	if _, rota := cd.rotaLooks(); (!rota || cd.offRota()) && cd.first != "" && cd.watch.looks(time.Now(), cd.c.holds) {
		cd.lookAtFirst(ctx)
		looked = cd.first
	}
	if stopped, ok := cd.side.look(ctx, cd.c, cd.sessions, cd.obs, cd.stall, looked); ok {
		cd.suspect = stopped
		cd.on(balance.Alarm, balance.RoleFacts{})
		poke(cd.wake)
	}
}

// offRota reports whether this worker is a deputy whose last listing
// showed the first leases of several streams (a Group's): each stream's
// coordinator names deputies of its own, and the rota's turns, spread over
// every lease listed, fall mostly to workers that watch another stream's
// first lease (the stream sets of a Group's workers may differ, and each
// watches one). Such a deputy looks itself every take interval too, as
// without sessions, so that every coordinator is watched whatever the
// rota's draw: reads grow with the streams, not the workers. A
// Consumer's fleet, with one first lease, leaves the looks to the rota.
func (cd *coordination) offRota() bool {
	return cd.watch.row != "" && cd.firsts > 1
}

// onExpiry is the expiry timer: the coordinator and an alarmed worker take
// the leases whose deadline passed.
func (cd *coordination) onExpiry(ctx context.Context) error {
	if !cd.role.TakesOnExpiry() {
		return nil
	}
	return cd.takeExpired(ctx)
}

// lookAtFirst reads the first lease's row, eventually consistent, and
// raises the alarm (this worker lists at once) when the row shows no owner
// (or is gone: its shard finished and was cleaned up), this worker (it
// holds the lease without coordinating yet), or a counter that stood still
// longer than a renewal. A read that fails otherwise changes nothing
// (ok is false). It returns the row and the observation it read.
func (cd *coordination) lookAtFirst(ctx context.Context) (l Lease, o watchedRead, ok bool) {
	c := cd.c
	l, o, ok = readWatched(ctx, c, cd.sessions, cd.obs, cd.first)
	if !ok {
		return l, o, false
	}
	now := o.seen
	prev := cd.firstRow
	cd.firstRow = l
	cd.watch.stallAt = o.changed.Add(cd.stall(l))
	if cd.adoptFirst(ctx, l) || cd.yielded(l, now) {
		return l, o, true
	}
	if left, ok := cd.sessions.leftBy(ctx, c, prev, l); ok {
		// Taken from a holder whose session is over: its other leases,
		// in streams the taker may not read, are this worker's to list.
		cd.suspect = left
		if cd.role != alarmed {
			c.log.Info("the coordinator's lease was taken from a worker whose session is over: listing for its other leases", "lease", cd.first, "from", left, "owner", l.Owner)
		}
		cd.on(balance.Alarm, balance.RoleFacts{})
		poke(cd.wake)
		return l, o, true
	}
	if l.Owner == "" || l.Owner == c.cfg.identity || now.Sub(o.changed) >= cd.stall(l) {
		if l.Owner != c.cfg.identity {
			cd.suspect = l.Owner
		}
		if cd.role != alarmed {
			c.log.Info("the coordinator's lease stands still or is free: listing", "lease", cd.first, "owner", l.Owner, "counter", l.Counter)
		}
		cd.on(balance.Alarm, balance.RoleFacts{})
		poke(cd.wake)
	}
	return l, o, true
}

// stall is how long a lease's counter may stand still before its holder
// looks late: a renewal interval (the longer of this worker's and a third of
// the holder's lease duration) and half a take interval.
func (cd *coordination) stall(l Lease) time.Duration {
	cfg := cd.c.cfg
	return max(cfg.renewInterval, cd.sessions.wait(l, cfg.leaseDuration)/3) + cfg.takeInterval/2
}

// afterRound updates the role from a take round: tl is its listing, r the
// round as carried out. The coordinator then writes its notes.
func (cd *coordination) afterRound(ctx context.Context, tl *takeListing, r *balance.Round, now time.Time) {
	if cd.role == uncoordinated {
		return
	}
	defer cd.armRota(time.Time{}) // a worker that rests from here on takes its turns from now
	c := cd.c
	in := tl.in
	moreToDo := r.Busy() || len(cd.pending) > 0 || balance.MayTakeSoon(in, r.Plan()) || balance.Uncoordinated(in) || cd.judging(tl, now) || now.Before(cd.live.listUntil)
	was := cd.role
	if in.First == "" {
		cd.onAt(balance.RoundEnded, balance.RoleFacts{Alarm: was == alarmed, MoreToDo: moreToDo}, now)
		return
	}
	held := c.heldSet()
	cd.firsts = len(in.Firsts)
	leading := cd.focus(tl, held)
	in, first := tl.in, tl.first
	cd.first, cd.readable, cd.firstRow = in.First, len(in.Rows), first
	switch {
	case leading && was != coordinator:
		c.log.Info("coordinating the stream's leases", "lease", in.First)
	case !leading && was == coordinator:
		c.log.Info("no longer coordinating", "lease", in.First, "holder", first.Owner)
	}
	// The first readable lease moved to a worker that may not list (the
	// shard before it finished, or the deputy's alarm was false): tell it.
	handOver := was == coordinator && !leading
	alarm := was == alarmed
	if alarm {
		switch {
		case cd.side.alarming(in, tl.byShard) && (in.MaxLeases == 0 || len(held) < in.MaxLeases):
			// A lease another coordinator named it to watch is free or
			// stands still: it lists on, and takes it when it expires.
		case leading || first.Owner != "" && !in.Expired[in.First] && !in.Stalled[in.First]:
			alarm = false
			handOver = !leading
			if !leading && ownsRows(in, cd.suspect) {
				// Another worker took the lease it watched: the stopped
				// holder's other leases, of streams that worker may not
				// read, expire for this one a lease duration after it
				// first saw them. It lists on until then.
				cd.live.listUntil = later(cd.live.listUntil, now.Add(c.cfg.leaseDuration))
				moreToDo = true
			}
			cd.suspect = ""
		case in.MaxLeases > 0 && len(held) >= in.MaxLeases:
			// Free or standing still, but this worker may hold no more
			// (WithMaxLeases): the alarm would keep it listing for
			// nothing. It wakes workers that may take the leases instead.
			alarm = false
			cd.yieldAlarm(ctx, suspect(tl), r, held, now)
		}
	}
	if it, ok := balance.HandOverLead(in, rowOf(first)); ok && handOver {
		cd.writeNote(ctx, tl.byShard, it)
	}
	// A worker that stops listing while no deputy is named for the first
	// lease watches it in the meantime: a coordinator that crashes in its
	// first moments is then noticed as quickly as later on.
	if !leading && !moreToDo && cd.watch.row == "" && first.Owner != "" && len(balance.DeputiesFor(in.Rows, in.First)) == 0 {
		cd.watch.until = now.Add(c.cfg.renewInterval + c.cfg.takeInterval)
		cd.armWatch()
	}
	cd.onAt(balance.RoundEnded, balance.RoleFacts{Leading: leading, Alarm: alarm, MoreToDo: moreToDo}, now)
	if cd.role != coordinator && cd.side.watchUnnamed(balance.Unwatched(in)) {
		cd.armWatch()
	}
	switch cd.role {
	case coordinator:
		cd.coordinate(ctx, tl, r, held, now)
	case alarmed:
		// A deputy whose coordinator stopped takes the leases it watched
		// stand still the moment they expire, as the coordinator would,
		// the first one (and with it coordination) included; the workers
		// that may take those it has no room for are woken now.
		cd.scheduleExpiry(tl, now)
		cd.alarmWakes(ctx, suspect(tl), r, held, now)
	}
}

// focus points tl at the first lease this worker minds after its round,
// and reports whether it coordinates: the lowest first lease it holds
// (balance.Anchor), which its deputies watch, when it holds the first
// lease of a stream; else, for a deputy, the lease its naming asks it to
// watch, while it is a first lease this worker can read; else the
// listing's lowest first lease. Namings by other coordinators of leases
// that are not such first leases (a stream this worker does not read, or
// that Kinesis no longer has, or a lease no longer first) are dropped.
// Where workers read different streams, each stream's first lease makes a
// coordinator of its own, and a deputy watches its coordinator's.
func (cd *coordination) focus(tl *takeListing, held map[string]bool) bool {
	anchor, leading := balance.Anchor(tl.in.Firsts, held)
	cd.side.keep(tl.in.Firsts)
	switch {
	case leading:
	case cd.watch.row != "" && tl.in.Firsts[cd.first]:
		anchor = cd.first
	default:
		return false
	}
	tl.in.First, tl.first = anchor, tl.byShard[anchor]
	return leading
}

// coordinate is the coordinator's work after its round: it takes the
// leases of others at their deadline, keeps a deputy named, and wakes the
// workers below their share. held is what it runs after the round.
func (cd *coordination) coordinate(ctx context.Context, tl *takeListing, r *balance.Round, held map[string]bool, now time.Time) {
	cd.scheduleExpiry(tl, now)
	notes, woken := balance.CoordinatorNotes(tl.in, r.Plan(), held, cd.lead.woken, now, cd.c.cfg.leaseDuration)
	cd.lead.woken = woken
	for _, it := range notes {
		cd.writeNote(ctx, tl.byShard, it)
	}
}

// scheduleExpiry arms the expiry timer for the leases of others whose
// lease duration, timed from when this worker first saw their counter,
// runs out before its next listing: each is taken at that moment instead.
func (cd *coordination) scheduleExpiry(tl *takeListing, now time.Time) {
	d := &cd.expiry
	d.clear()
	d.due = balance.DueBefore(tl.in, tl.expiresAt, now.Add(cd.c.cfg.takeInterval))
	d.leases = make(map[string]Lease, len(d.due))
	for _, due := range d.due {
		d.leases[due.Row.Shard] = tl.byShard[due.Row.Shard]
	}
	d.arm()
}

// takeExpired takes the due leases whose lease duration has run out, each
// with an acquire on the counter this worker saw stand still: a holder
// that renewed meanwhile makes it fail.
func (cd *coordination) takeExpired(ctx context.Context) error {
	d := &cd.expiry
	now := time.Now()
	skip := cd.c.stuckSet()
	for _, due := range d.due {
		if o, ok := cd.obs[due.Row.Shard]; !ok || o.counter != due.Row.Counter {
			skip[due.Row.Shard] = true // the row moved since
		}
	}
	takes, ahead := balance.TakeDue(d.due, now, cd.first, skip, cd.c.heldCount(), cd.c.cfg.maxLeases)
	d.due = ahead
	for {
		row, ok := takes.Next()
		if !ok {
			break
		}
		_, asked := cd.pending[row.Shard]
		took, err := cd.take(ctx, d.leases[row.Shard], asked, cd.recentByShard, now)
		if err != nil || ctx.Err() != nil {
			return err
		}
		takes.Done(took)
	}
	d.arm()
	return nil
}

func (cd *coordination) nextNonce() uint64 {
	cd.nonce++
	return cd.nonce<<16 | uint64(rand.N(1<<16))
}

// writeNote carries out a note intent on the row of tl it names.
func (cd *coordination) writeNote(ctx context.Context, byShard map[string]Lease, it balance.Intent) {
	names := it.Names
	if names == "" {
		names = cd.first
	}
	// A lease of the row's own stream by its shard id alone, as earlier
	// releases wrote and read it.
	names = balance.Compact(names, keyOf(it.Row.Shard).Stream)
	cd.note(ctx, byShard[it.Row.Shard], balance.NoteText(it, names, cd.nextNonce()))
}

// note writes a note; a failure is logged (the next listing tries again).
func (cd *coordination) note(ctx context.Context, l Lease, text string) {
	c := cd.c
	nctx, cancel := c.storeCtx(ctx)
	_, err := cd.ns.Note(nctx, l, text)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.log.Debug("writing a note failed", "lease", l.Key.String(), "holder", l.Owner, "err", err)
		}
		return
	}
	mail(ctx, c, l)
	c.log.Debug("note written", "lease", l.Key.String(), "holder", l.Owner, "note", text)
}

// passLead is a leaving coordinator's last act, once its runners have
// released their leases: it tells two other workers (its deputies if it
// named them) to list, so that those leases are taken even when a deputy
// had not learnt of its naming yet, or leaves at the same time.
func (cd *coordination) passLead(ctx context.Context) {
	if cd.role != coordinator {
		return
	}
	for _, it := range balance.PassLead(cd.recentRows(), cd.c.cfg.identity, cd.first) {
		cd.writeNote(ctx, cd.recentByShard, it)
	}
}

// wakeCoordinator tells the coordinator, when this worker is not it, that
// the leases it released are free: a wake note on the first lease's row,
// which the coordinator's next renewal returns (within a renew interval),
// makes it list then rather than at its next take tick. A note that finds
// the row moved on is dropped; the coordinator's next listing takes the
// leases anyway.
func (cd *coordination) wakeCoordinator(ctx context.Context) {
	me := cd.c.cfg.identity
	if cd.ns == nil || cd.role == coordinator || cd.first == "" {
		return
	}
	for _, l := range cd.recent {
		if l.Key.String() == cd.first && l.Owner != "" && l.Owner != me && l.HandoffTo == "" {
			cd.note(ctx, l, balance.NoteText(balance.Intent{Kind: balance.Wake}, cd.first, cd.nextNonce()))
			return
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ownsRows reports whether owner ("" never) holds a row in's listing can
// read.
func ownsRows(in balance.Listing, owner string) bool {
	if owner == "" {
		return false
	}
	for _, l := range in.Rows {
		if l.Owner == owner {
			return true
		}
	}
	return false
}

// judging reports whether this worker has watched a stream's first lease,
// held by another, for less than a stall and a take interval: it cannot
// judge yet whether that stream's coordinator stands still (see
// balance.Uncoordinated), and lists on until it can. A worker just
// started, or a stream just added, is so for a few take intervals; where
// the workers that watched a stream's coordinator are all gone, this is
// how a worker that reads it finds out.
func (cd *coordination) judging(tl *takeListing, now time.Time) bool {
	me := cd.c.cfg.identity
	for id := range tl.in.Firsts {
		l, ok := tl.byShard[id]
		if !ok || l.Owner == "" || l.Owner == me || tl.in.Held[id] {
			continue
		}
		if o, seen := cd.obs[id]; seen && now.Sub(o.since) < cd.stall(l)+cd.c.cfg.takeInterval {
			return true
		}
	}
	return false
}
