package shardlease

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardlease/shardlease/internal/balance"
)

// Liveness: no single worker holds the fleet's liveness.
//
// Coordination has one worker list; these rules keep every failover bound
// when any two workers fail together, whatever their roles, and when a
// worker renews but cannot list (docs/coordination.md#liveness has the
// arithmetic):
//
//   - two deputies (balance.Deputies), on rows of two owners, watch the
//     first lease; a leaving coordinator writes lead on both, so a joint
//     crash or leave of the coordinator and one deputy leaves one watching;
//   - a deputy whose naming row moved watches on for R + T, until the
//     coordinator has named another;
//   - a worker asked to lead (a lead note) or alarmed takes as the
//     coordinator does in its round: released leases up to half again its
//     ceiling (balance.LeadCeiling), expired and left-over ones all;
//   - an alarmed worker at its cap wakes the workers that may take the
//     leases instead of listing for nothing, and does not raise the same
//     alarm again;
//   - a coordinator whose listings fail for L hands the first lease to a
//     deputy (a fenced handoff), which adopts it from its look, without a
//     listing; a worker handed the role so does not hand it on;
//   - a worker that holds nothing lists every idleFactor take intervals
//     times the number of such workers, so idle workers cost the fleet a
//     quarter listing per take interval, however many;
//   - a stall no worker can end (listings failing for L, the first lease
//     standing still for 2 L with nobody able to take it) is logged at
//     Error and counted (Stats().CoordinationStalls, the
//     shardlease.coordination.stalls metric).
//
// All of it is Run's goroutine's: the state is coordination.live.

// idleFactor: a worker that holds nothing lists every idleFactor take
// intervals times the number of workers holding nothing, give or take half.
const idleFactor = 4

// liveness is the state of these rules, written by Run's goroutine only.
type liveness struct {
	// failingSince is when this worker's listings began to fail; zero
	// while they succeed. reported is set once that was logged.
	failingSince time.Time
	reported     bool
	// yield is the first lease as this worker last saw it when it stopped
	// listing for it (it may hold no more); woken its wake backoff.
	yield yieldMark
	woken map[string]balance.Woken
	// listUntil keeps a woken worker listing for a stall and a take
	// interval, long enough to judge for itself which leases stand still.
	listUntil time.Time
	// idle times the listings of a worker that holds nothing; idlers is
	// how many live owners held nothing at the last listing.
	idle   backstop
	idlers int
}

// yieldMark is a row this worker gave up listing for, as it saw it.
type yieldMark struct {
	shard, owner string
	counter      int64
	at           time.Time
	reported     bool
}

// leads reports whether this worker takes as the coordinator does in its
// round: it coordinates, was alarmed, or was asked to lead.
func (cd *coordination) leads() bool {
	r := cd.role
	return r == coordinator || r == alarmed || cd.led
}

// woken is a note that wakes this worker (a wake, a lead, a deputy naming
// with a wake): it lists now, and a lead asks it to take as the
// coordinator does in its round. When the note says watch (a lead, or a
// wake for leases that must expire) it goes on for a renewal and a take
// interval, so that it sees for itself which leases stand still (and then
// lists on until they expire); otherwise it stops once a round leaves it
// nothing to do.
func (cd *coordination) woken(now time.Time, note balance.Note) {
	if note.Watch {
		cd.live.listUntil = now.Add(cd.c.cfg.renewInterval + cd.c.cfg.takeInterval)
	}
	e := balance.WokenUp
	if note.Kind == balance.NoteLead {
		e = balance.Led
	}
	cd.on(e, balance.RoleFacts{})
	poke(cd.wake)
}

// suspect returns tl with every row of the first lease's holder judged as
// standing still, for an alarmed worker's wakes: the alarm is that holder
// stopping, whose other rows this worker has not watched long enough to
// judge yet.
func suspect(tl *takeListing) *takeListing {
	if tl.first.Owner == "" {
		return tl
	}
	out := *tl
	out.in.Stalled = maps.Clone(tl.in.Stalled)
	for _, l := range tl.in.Rows {
		if l.Owner == tl.first.Owner {
			out.in.Stalled[l.Shard] = true
		}
	}
	return &out
}

// unnamed is a deputy's naming that ended (its row moved, or the note
// changed): it watches on for R + T, time for the coordinator to name
// another deputy and for it to read its naming.
func (cd *coordination) unnamed(now time.Time) {
	cd.watch.row = ""
	cd.watch.until = now.Add(cd.c.cfg.renewInterval + cd.c.cfg.takeInterval)
	cd.on(balance.Unnamed, balance.RoleFacts{})
	cd.armWatch()
}

// idleLists reports whether a resting worker that holds nothing lists at
// this take tick (see idleFactor).
func (cd *coordination) idleLists(now time.Time) bool {
	live := &cd.live
	period := cd.c.cfg.takeInterval * time.Duration(idleFactor*max(1, live.idlers))
	if live.idle.lookAt.IsZero() {
		live.idle.lookAt = now.Add(rand.N(period))
	}
	return live.idle.due(now, period, true)
}

// countIdlers records how many live owners held nothing at a listing, and
// which (the rota's idle candidates).
func (cd *coordination) countIdlers(p balance.Plan) {
	var idle []string
	for owner, load := range p.Load {
		if load == 0 {
			idle = append(idle, owner)
		}
	}
	slices.Sort(idle)
	cd.live.idlers = len(idle)
	cd.rota.idle = idle
}

// listingWorked records a listing that succeeded.
func (cd *coordination) listingWorked() {
	live := &cd.live
	live.failingSince, live.reported = time.Time{}, false
}

// listFailed records a listing that failed. Once they have failed for a
// lease duration it is a stall: logged at Error and counted; a coordinator
// then gives its role up. A worker handed the role by one that gave it up
// does not hand it on while it cannot list: it coordinates only from the
// end of a round, whose listing worked.
func (cd *coordination) listFailed(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	live, c := &cd.live, cd.c
	now := time.Now()
	if live.failingSince.IsZero() {
		live.failingSince = now
	}
	if live.reported || now.Sub(live.failingSince) < c.cfg.leaseDuration {
		return
	}
	live.reported = true
	c.log.Error("listing the stream's rows has failed for a lease duration: this worker takes no lease and coordinates nothing until it lists again; check the table's read capacity and dynamodb:Scan permission",
		"since", now.Sub(live.failingSince).Round(time.Millisecond), "role", cd.role.String())
	c.count(evStall, 1, attribute.String("why", "listing"))
	if cd.role == coordinator {
		cd.giveUp(ctx)
	}
}

// giveUp hands the first lease, and with it coordination, to a deputy (or
// another worker) with a fenced handoff, and tells it to lead. The request
// is written on the row when the last listing showed it this worker's.
// When that listing is older than this worker's take of the lease (it
// could not list since), the runner releases the lease (no taker is on the
// row) and the lead note makes the worker it names list and take it; so
// too when that listing showed nobody to hand it to. A worker whose
// listing showed it the first lease's holder and nobody else keeps reading
// (it is alone).
func (cd *coordination) giveUp(ctx context.Context) {
	c := cd.c
	to := balance.PassLead(cd.recentRows(), c.cfg.identity, cd.first)
	if !c.holds(cd.first) {
		return
	}
	first, listed := cd.recentByShard[cd.first]
	ours := listed && first.Owner == c.cfg.identity
	if len(to) == 0 {
		if ours {
			c.log.Warn("cannot hand coordination over: this worker cannot list, and its last listing showed no other worker", "lease", cd.first)
			return
		}
		c.log.Warn("releasing the coordinator's lease: this worker cannot list, and its only listing was made before it took the lease", "lease", cd.first)
		c.answerHandoff(cd.first, "")
		cd.on(balance.GaveUp, balance.RoleFacts{})
		return
	}
	taker := to[0].Row.Owner
	if ours {
		rctx, cancel := c.storeCtx(ctx)
		_, err := c.store.RequestHandoff(rctx, first, taker)
		cancel()
		if err != nil {
			c.log.Warn("handing the coordinator's lease over failed", "lease", cd.first, "to", taker, "err", err)
			return
		}
	}
	c.log.Warn("handing coordination over: this worker cannot list", "lease", cd.first, "to", taker)
	c.answerHandoff(cd.first, taker)
	cd.writeNote(ctx, cd.recentByShard, to[0])
	cd.on(balance.GaveUp, balance.RoleFacts{})
}

// adoptFirst takes the first lease when its row names this worker but this
// worker does not run it (a coordinator that could not list handed it
// over), with an acquire on the counter the look showed. It reports
// whether it did.
func (cd *coordination) adoptFirst(ctx context.Context, l Lease) bool {
	c := cd.c
	if l.Owner != c.cfg.identity || l.HandoffTo != "" || c.holds(l.Key.String()) || cd.role == uncoordinated {
		return false
	}
	took, err := cd.take(ctx, l, true, cd.recentByShard, time.Now())
	if err != nil || !took {
		return false
	}
	cd.catchUp()
	poke(cd.wake)
	return true
}

// yieldAlarm is an alarmed worker at its cap (WithMaxLeases): instead of
// listing until a lease it cannot take expires, it wakes the workers below
// their share, which list and take it, and remembers the first lease as
// it saw it so that its looks do not raise the same alarm again.
func (cd *coordination) yieldAlarm(ctx context.Context, tl *takeListing, r *balance.Round, held map[string]bool, now time.Time) {
	live := &cd.live
	if m := live.yield; m.shard != tl.first.Key.String() || m.counter != tl.first.Counter || m.owner != tl.first.Owner {
		live.yield = yieldMark{shard: tl.first.Key.String(), owner: tl.first.Owner, counter: tl.first.Counter, at: now}
	}
	n := cd.alarmWakes(ctx, tl, r, held, now)
	cd.c.log.Info("the coordinator's lease stands still or is free, and this worker may hold no more: waking others", "lease", tl.first.Key.String(), "woken", n)
}

// alarmWakes is an alarmed worker with a cap: it wakes the workers below
// their share for the leases it will have no room for, as the coordinator
// does (balance.Wakes), so that they watch those leases from now on and
// take them when they expire. It returns how many it woke.
func (cd *coordination) alarmWakes(ctx context.Context, tl *takeListing, r *balance.Round, held map[string]bool, now time.Time) int {
	live := &cd.live
	if tl.in.MaxLeases == 0 {
		return 0
	}
	if live.woken == nil {
		live.woken = map[string]balance.Woken{}
	}
	wakes, woken := balance.Wakes(tl.in, r.Plan(), held, nil, live.woken, now, cd.c.cfg.leaseDuration)
	live.woken = woken
	for _, it := range wakes {
		cd.writeNote(ctx, tl.byShard, it)
	}
	return len(wakes)
}

// yielded reports whether l is the first lease as this worker saw it when
// it yielded its alarm: the same stall, so no new alarm. Once it has
// stood so for two lease durations it is a stall nobody ends: logged at
// Error and counted.
func (cd *coordination) yielded(l Lease, now time.Time) bool {
	m := &cd.live.yield
	if m.shard != l.Key.String() || m.counter != l.Counter || m.owner != l.Owner {
		*m = yieldMark{}
		return false
	}
	if !m.reported && now.Sub(m.at) >= 2*cd.c.cfg.leaseDuration {
		m.reported = true
		cd.c.log.Error("the coordinator's lease has stood still or free for two lease durations and no worker took it: raise WithMaxLeases or add workers", "lease", l.Key.String(), "owner", l.Owner)
		cd.c.count(evStall, 1, attribute.String("why", "untaken"))
	}
	return true
}
