package shardlease

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/balance"
	"go.opentelemetry.io/otel/attribute"
)

// observation is what the take loop last saw of a lease or worker row, with
// when its counter last moved on this machine's monotonic clock, and since
// when this worker has been watching the row.
type observation struct {
	counter int64
	owner   string
	changed time.Time
	since   time.Time
}

// observeRow records that row key was seen at now with counter and owner, and
// returns the observation: changed is when either last moved.
func observeRow(obs map[string]observation, key string, counter int64, owner string, now time.Time) observation {
	o, ok := obs[key]
	if !ok {
		o.since = now
	}
	if !ok || o.counter != counter || o.owner != owner {
		o = observation{counter: counter, owner: owner, changed: now, since: o.since}
		obs[key] = o
	}
	return o
}

// forgetUnseen drops the observations of rows that are gone.
func forgetUnseen(obs map[string]observation, seen map[string]bool) {
	for key := range obs {
		if !seen[key] {
			delete(obs, key)
		}
	}
}

// The first take round waits takeInterval/settleDivisor after the worker
// wrote its row.
const settleDivisor = 4

func ownerSeed(owner string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(owner))
	return h.Sum64()
}

// scheduler is Run's own state: one goroutine lists and takes leases and
// starts and stops the lease runners.
type scheduler struct {
	c      *Consumer
	obs    map[string]observation
	exited chan *leaseRunner
	wake   chan struct{} // run a take round now
	resync chan struct{} // list shards now
	wg     sync.WaitGroup
	// pending handoff requests this worker made, by row key, with when.
	pending map[string]time.Time
	rng     *rand.Rand
	// refused holds shards the store refused to hand out until an operator
	// acts (an unattributed legacy row), with when; retried after a shard
	// sync interval.
	refused map[string]time.Time
	// takable holds the shards free or expired at the last take round, with
	// when this worker first saw them so: one still there a take interval
	// later was left over by the workers below their share, and any worker
	// below the ceiling may take it.
	takable map[string]time.Time

	// Worker rows, when the store keeps them (caps.workers).
	wobs map[string]observation // other workers' rows, by owner
	row  *Worker                // this worker's row as last written; nil when it has none
	beat time.Time              // when row was written
	// corruptSeen holds the rows already reported as corrupt.
	corruptSeen map[string]bool
	// corrupt holds the shards whose rows the last listing could not decode.
	corrupt map[string]bool
	// unsure is set while a heartbeat's outcome is unknown (it failed or
	// was cancelled): the row may exist with a counter this worker never
	// saw.
	unsure bool

	// listed holds the shards the last shard sync listed, by id.
	listed map[string]types.Shard
	// cd is the coordination state (consumer_coordination.go).
	cd coordination
	// handedBack is set once handBack ran (a drain): shutdown then has
	// nothing left to do.
	handedBack bool
	// removed settles the rows of the streams that left a Group's set
	// (nil for a Consumer, whose set never signals a poll).
	removed *removals
	// sessions is what this worker read of the sessions that keep the
	// leases it lists (consumer_sessionview.go).
	sessions *sessionView
}

// heartbeat writes this worker's row (see WorkerStore). A failure other than
// a missing or misconfigured table is logged: the worker is then seen late,
// which costs a correcting handoff, nothing more.
func (sc *scheduler) heartbeat(ctx context.Context) error {
	if sc.c.caps.workers == nil || sc.c.sess != nil {
		// With a session, the session keeps the row (consumer_session.go).
		return nil
	}
	c := sc.c
	sent := time.Now()
	hctx, cancel := c.storeCtx(ctx)
	w, err := sc.c.caps.workers.Heartbeat(hctx, c.stream, c.cfg.identity)
	cancel()
	if err != nil {
		sc.unsure = true
		if ctx.Err() != nil {
			return nil
		}
		if isFatal(err) {
			return errorf("shardlease: stream %s: %w", c.stream, err)
		}
		c.log.Warn("writing the worker row failed; retrying at the next take round", "err", err)
		return nil
	}
	sc.row, sc.beat, sc.unsure = &w, sent, false
	return nil
}

// removeRow deletes this worker's row, if it has one: once it holds a lease
// (its leases show it), and when Run returns.
func (sc *scheduler) removeRow(ctx context.Context) {
	if sc.row == nil && !sc.unsure {
		return
	}
	c := sc.c
	ctx, cancel := context.WithTimeout(ctx, c.cfg.renewInterval)
	defer cancel()
	const gaveUp = "removing the worker row failed; other workers remove it once it stops changing"
	if sc.unsure {
		// Learn the counter with one more heartbeat: the delete is
		// conditional on it.
		w, err := sc.c.caps.workers.Heartbeat(ctx, c.stream, c.cfg.identity)
		if err != nil {
			c.log.Warn(gaveUp, "err", err)
			return
		}
		sc.row, sc.unsure = &w, false
	}
	if _, err := sc.c.caps.workers.RemoveWorker(ctx, *sc.row); err != nil {
		c.log.Warn(gaveUp, "err", err)
		return
	}
	sc.row = nil
}

// idleBeat keeps the worker row of a worker that holds nothing moving
// between its listings.
func (sc *scheduler) idleBeat(ctx context.Context) {
	if sc.c.heldCount() > 0 || sc.row != nil && time.Since(sc.beat) < sc.c.cfg.renewInterval {
		return
	}
	if err := sc.heartbeat(ctx); err != nil {
		sc.c.log.Error("writing the worker row failed", "err", err)
	}
}

// loop is the worker's Run loop, until ctx ends: take rounds at each take
// tick (or a resting role's look, see onTakeTick), when woken and as a
// follow-up of pending requests; the coordination role's timers and notes;
// shard syncs; runners that ended. It returns an error that must end Run.
func (sc *scheduler) loop(ctx context.Context) error {
	c := sc.c
	take := time.NewTicker(c.cfg.takeInterval)
	defer take.Stop()
	syncTick := time.NewTicker(c.cfg.shardSync)
	defer syncTick.Stop()
	var followUp <-chan time.Time
	round := func() error {
		err := sc.takeRound(ctx)
		followUp = sc.followUp()
		return err
	}
	// Workers started together see each other's rows only once each has
	// written its own: let the others' land before the first round.
	if sc.c.caps.workers != nil && !backoff.Wait(ctx, c.cfg.takeInterval/settleDivisor) {
		return nil
	}
	if err := round(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-sc.exited:
			sc.forget(r)
		case <-take.C:
			if !sc.cd.listsNow() {
				sc.idleBeat(ctx)
				sc.cd.onTakeTick(ctx)
				continue
			}
			if err := round(); err != nil {
				return err
			}
		case n := <-c.notes:
			if balance.IsDrainNote(n.text) { // asked through the table (shardlease drain)
				return c.drain.drain(ctx, sc, nil)
			}
			sc.cd.onNote(n)
		case reply := <-c.drain.requests:
			return c.drain.drain(ctx, sc, reply)
		case <-sc.cd.lookTimer.C:
			sc.cd.onLook(ctx)
		case <-sc.cd.rota.C:
			sc.cd.onRota(ctx)
		case <-sc.cd.expiry.C:
			if err := sc.cd.onExpiry(ctx); err != nil {
				return err
			}
		case <-followUp:
			if err := round(); err != nil {
				return err
			}
		case <-sc.wake:
			if err := round(); err != nil {
				return err
			}
		case <-syncTick.C:
			if err := sc.onSyncTick(ctx); err != nil {
				return err
			}
		case <-sc.resync:
			if err := sc.boundedSync(ctx); err != nil && ctx.Err() == nil && isFatal(err) {
				return err
			}
			poke(sc.wake)
		case <-c.set.changed:
			if err := sc.onSetChanged(ctx); err != nil {
				return err
			}
		case <-c.set.polled:
			sc.removed.settle(ctx)
		}
	}
}

// followUp returns a channel that fires half a take interval from now while
// handoffs this worker asked for are pending, and nil otherwise: a holder
// answers in its own take round, which may fall just after this worker's,
// and the lease would otherwise wait a whole interval more. Only requests
// younger than a lease duration count: a holder that has not answered by
// then is busy (it keeps its lease), and listing twice as often would not
// hurry it.
func (sc *scheduler) followUp() <-chan time.Time {
	for _, since := range sc.pending {
		if time.Since(since) < sc.c.cfg.leaseDuration {
			return time.After(sc.c.cfg.takeInterval / 2)
		}
	}
	return nil
}

// onSyncTick is the periodic shard sync; it returns an error that must end
// Run, and logs any other.
func (sc *scheduler) onSyncTick(ctx context.Context) error {
	err := sc.boundedSync(ctx)
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case isFatal(err):
		return err
	}
	sc.c.log.Warn("shard sync failed; retrying at the next interval", "err", err)
	return nil
}

// poke asks for what ch stands for (a take round, a shard sync); one asked
// for already is enough.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (sc *scheduler) forget(r *leaseRunner) {
	c := sc.c
	c.mu.Lock()
	if c.held[r.id] == r {
		delete(c.held, r.id)
	}
	c.mu.Unlock()
	if r.rejected.Load() {
		sc.refused[r.id] = time.Now()
	}
	if cause := r.end.get(); cause == stopShardEnd {
		// The children's rows are made and taken now, not at the
		// coordinator's next shard sync: this worker lists until done.
		sc.cd.catchUp()
		poke(sc.resync)
	} else if cause == stopLost {
		poke(sc.wake)
	}
}

// shutdown hands every lease back (handBack) within the shutdown timeout,
// unless a drain did already.
func (sc *scheduler) shutdown(ctx context.Context) {
	c := sc.c
	if !sc.handedBack {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.shutdownTimeout)
		defer cancel()
		c.stats.coordinating.Store(false)
		sc.handBack(ctx)
	}
	c.log.Info("stopped")
}

// handBack withdraws the handoff requests this worker made, stops every
// runner and waits for them (abandoning handlers that do not return within
// the grace period), passes the lead on if it coordinated and wakes the
// coordinator if not (after the releases: the told worker lists and finds
// them free), releases rows handed to this worker too late to be run, and
// removes its worker row. Shutdown and drain both end with it.
func (sc *scheduler) handBack(ctx context.Context) {
	sc.withdraw(ctx)
	sc.stopRunners()
	sc.cd.passLead(ctx)
	sc.cd.wakeCoordinator(ctx)
	sc.cd.on(balance.Stopped, balance.RoleFacts{})
	sc.releaseLate(ctx)
	sc.removeRow(ctx)
	sc.handedBack = true
}

// stopRunners stops every runner and waits until each has exited,
// abandoning the handlers still running after the grace period.
func (sc *scheduler) stopRunners() {
	c := sc.c
	c.mu.Lock()
	runners := make([]*leaseRunner, 0, len(c.held))
	for _, r := range c.held {
		runners = append(runners, r)
	}
	c.mu.Unlock()
	for _, r := range runners {
		r.stop()
	}
	done := make(chan struct{})
	go func() { sc.wg.Wait(); close(done) }()
	timer := time.NewTimer(c.cfg.grace())
	defer timer.Stop()
	for {
		select {
		case r := <-sc.exited:
			sc.forget(r)
		case <-timer.C:
			// Each runner abandoned logs it, naming its shard.
			for _, r := range runners {
				r.abandon()
			}
		case <-done:
			return
		}
	}
}

// withdraw removes the handoff requests this worker made that are still
// pending, so that no holder hands a lease to a worker that is gone.
func (sc *scheduler) withdraw(ctx context.Context) {
	c := sc.c
	hw := c.caps.withdraws
	if hw == nil {
		return
	}
	for id := range sc.pending {
		cctx, cancel := c.storeCtx(ctx)
		withdrawn, err := hw.WithdrawHandoff(cctx, keyOf(id), c.cfg.identity)
		cancel()
		switch {
		case err != nil:
			c.log.Warn("withdrawing a handoff request failed; the lease waits a lease duration for this worker", "shard", id, "err", err)
		case withdrawn:
			c.log.Info("handoff request withdrawn", "shard", id)
		}
		delete(sc.pending, id)
	}
}

// releaseLate frees the rows naming this worker that it does not run
// (releaseUnrun), of the streams of the set and of those that left it:
// leases handed over to it after its loop ended, or as their stream left.
func (sc *scheduler) releaseLate(ctx context.Context) {
	c := sc.c
	names := c.set.names()
	for stream := range c.set.left() {
		names = append(names, stream)
	}
	lctx, cancel := c.storeCtx(ctx)
	leases, err := c.reader.rowsOf(lctx, names)
	cancel()
	if err != nil {
		c.log.Warn("listing leases at shutdown failed; leases handed to this worker late expire after a lease duration", "err", err)
		return
	}
	releaseUnrun(ctx, c, leases)
}

// releaseUnrun releases the rows of leases that name c's worker but that it
// does not run: handed over to it after its loop ended, or as their stream
// left a Group's set, so that nobody waits a lease duration for them. It
// is the one path that frees such rows. A row whose abandoned handler
// still runs is left to expire. Run's goroutine calls it, so a lease taken
// this moment has its runner already.
func releaseUnrun(ctx context.Context, c *Consumer, leases []Lease) {
	held, stuck := c.heldSet(), c.stuckSet()
	var live Worker
	if c.sess != nil {
		live, _ = c.sess.current()
	}
	for _, l := range leases {
		id := l.Key.String()
		if l.Owner != c.cfg.identity || held[id] || stuck[id] {
			continue
		}
		if l.Session != "" && (l.Session != live.Key() || l.SessionGen != live.Gen) {
			// Kept by a session of this worker that ended (fenced, or not
			// kept): no write of that incarnation may land; the others
			// claim the lease once they confirm the session over.
			continue
		}
		rctx, cancel := c.storeCtx(ctx)
		_, err := c.store.Release(rctx, l)
		cancel()
		if err != nil {
			c.log.Warn("releasing a lease handed to this worker that it does not run failed; it expires after a lease duration", "lease", id, "err", err)
			continue
		}
		c.count(evReleased, 1, c.set.attrs(id)...)
		c.log.Info("lease handed to this worker that it does not run released", "lease", id, "counter", l.Counter)
	}
}

// takeRound is one take round: it lists the stream's rows, observes their
// counters on this worker's clock, converts what it judged into a
// balance.Listing, carries out the intents balance.Round gives for it (each
// a write conditional on the counter the listing showed), and updates the
// coordination role.
func (sc *scheduler) takeRound(ctx context.Context) error {
	c := sc.c
	leases, workers, ok, err := sc.list(ctx)
	if !ok {
		sc.cd.listFailed(ctx)
		return err
	}
	sc.sessions.update(ctx, c, leases, workers)
	now := time.Now()
	sc.cd.listingWorked()
	c.count(evListed, 1)
	sc.observe(leases, now)
	// Workers that hold nothing yet count too, while their rows move.
	live := sc.liveWorkers(ctx, workers, now)
	tl := sc.listingOf(leases, live, now)
	sc.cd.recent, sc.cd.recentByShard, sc.cd.recentAt = leases, tl.byShard, now
	asked := sc.settleRequests(tl.in.Pending)
	sc.sessions.remind(ctx, c, sc.pending, tl.byShard, now)
	r := balance.NewRound(tl.in, sc.rng)
	defer sc.rememberTakable(r.Plan(), now)
	p := r.Plan()
	sc.cd.countIdlers(p)
	c.log.Debug("take round", "leases", len(tl.in.Rows), "owners", len(p.Load), "target", p.Target, "ceiling", p.Ceiling, "held", len(tl.in.Held))
	if done, err := sc.carryOut(ctx, r, tl, asked, now); !done {
		return err
	}
	sc.sessions.fenceLeftOver(ctx, c, tl, sc.obs, now)
	sc.cd.afterRound(ctx, tl, r, now)
	// A worker that holds a lease is seen through it; one that holds none
	// keeps its row moving.
	switch {
	case r.Mine() > 0:
		sc.removeRow(ctx)
	case sc.row == nil || now.Sub(sc.beat) >= c.cfg.renewInterval:
		return sc.heartbeat(ctx)
	}
	return nil
}

// list reads the stream's lease rows, and its worker rows when the store
// keeps them. ok is false when the round cannot go on; err is then one
// that must end Run, or nil.
func (sc *scheduler) list(ctx context.Context) (leases []Lease, workers []Worker, ok bool, err error) {
	c := sc.c
	// Every decision is carried out by a conditional write on the counter
	// the listing shows, and expiry is timed from the first listing that
	// showed a counter: a listing a moment old is safe, and costs half.
	lctx, cancel := c.storeCtx(ctx)
	leases, workers, err = c.reader.forRound(lctx)
	cancel()
	if sc.tolerateCorrupt(ctx, err) {
		err = nil
	}
	switch {
	case err == nil:
		return leases, workers, true, nil
	case ctx.Err() != nil:
		return nil, nil, false, nil
	case isFatal(err):
		return nil, nil, false, err
	}
	c.log.Warn("listing leases failed; retrying at the next take round", "err", err)
	return nil, nil, false, nil
}

// observe records the listed rows' counters, with when each last moved on
// this machine's monotonic clock, and forgets the rows that are gone.
func (sc *scheduler) observe(leases []Lease, now time.Time) {
	seen := make(map[string]bool, len(leases))
	for _, l := range leases {
		id := l.Key.String()
		seen[id] = true
		sc.sessions.observe(sc.obs, id, l, now)
	}
	forgetUnseen(sc.obs, seen)
}

// takeListing is one take round's listing as the scheduler converted it:
// the balance.Listing, and the rows it came from.
type takeListing struct {
	in balance.Listing
	// byShard holds every listed row.
	byShard map[string]Lease
	// first is the lease of in.First; zero when in.First is "". Once the
	// round is carried out, coordination focuses both on the first lease
	// this worker minds (see coordination.focus).
	first Lease
	// expiresAt is when each readable row's lease duration runs out, as
	// this worker timed it from when it first saw the row's counter.
	expiresAt map[string]time.Time
}

// listingOf converts a listing into what balance decides from: the rows
// that can be read now, and this worker's judgements of them on its own
// clock (expired, stalled, left over, refused, pending).
func (sc *scheduler) listingOf(leases []Lease, live []string, now time.Time) *takeListing {
	c := sc.c
	me := c.cfg.identity
	tl := &takeListing{byShard: make(map[string]Lease, len(leases)), expiresAt: make(map[string]time.Time)}
	for _, l := range leases {
		tl.byShard[l.Key.String()] = l
	}
	in := balance.Listing{
		Me: me, Held: c.heldSet(), Skip: c.stuckSet(), Workers: live,
		Expired: make(map[string]bool), Stalled: make(map[string]bool),
		Pending:  make(map[string]bool, len(sc.pending)),
		Leftover: make(map[string]bool), Refused: make(map[string]bool),
		MaxLeases: c.cfg.maxLeases, MaxSteals: c.cfg.maxStealsPerTake,
		Coordinated: sc.cd.leads(),
	}
	// Work that can be read now: not finished, every parent finished, and
	// of a stream Kinesis has (the rows of one it says it does not have are
	// nobody's to take, so nobody lists on for them).
	for _, l := range leases {
		id := l.Key.String()
		if l.Checkpoint == ShardEnd || !parentsDone(l, tl.byShard, sc.listed, sc.corrupt) || c.set.of(id).isGone() {
			continue
		}
		in.Rows = append(in.Rows, rowOf(l))
		// A lease is expired once its counter stood still for the longer
		// of this worker's lease duration and the holder's, written on the
		// row.
		tl.expiresAt[id] = sc.obs[id].changed.Add(sc.sessions.wait(l, c.cfg.leaseDuration))
		in.Expired[id] = l.Owner != "" && l.Owner != me && !now.Before(tl.expiresAt[id])
		in.Stalled[id] = l.Owner != "" && now.Sub(sc.obs[id].changed) >= sc.cd.stall(l)
		if since, ok := sc.takable[id]; ok && now.Sub(since) >= c.cfg.takeInterval {
			in.Leftover[id] = true
		}
		if at, ok := sc.refused[id]; ok && now.Sub(at) < c.cfg.shardSync {
			in.Refused[id] = true
		}
	}
	// Requests still pending (not answered or withdrawn) count as waiting
	// while they are younger than a lease duration.
	for id, since := range sc.pending {
		if l, ok := tl.byShard[id]; !ok || in.Held[id] || l.HandoffTo != me {
			continue
		}
		in.Pending[id] = true
		if now.Sub(since) < c.cfg.leaseDuration {
			in.Waiting++
		}
	}
	// A free row the store refused to hand out to this worker (until an
	// operator acts) is nobody's to coordinate from: the first lease is the
	// first of the others, so that the fleet does not list every take
	// interval for a row no worker may take. Once somebody holds it again,
	// it counts again.
	takable := slices.DeleteFunc(slices.Clone(in.Rows), func(r balance.Row) bool {
		_, refused := sc.refused[r.Shard]
		return refused && r.Owner == ""
	})
	if first, ok := balance.FirstReadable(takable); ok && sc.cd.ns != nil {
		in.First, tl.first = first.Shard, tl.byShard[first.Shard]
		in.Firsts = balance.Firsts(takable)
	}
	tl.in = in
	return tl
}

// settleRequests forgets the handoff requests this worker made that were
// answered or withdrawn (not in pending), and returns every request it had
// made: a row handed over in answer to one is told from the rest.
func (sc *scheduler) settleRequests(pending map[string]bool) map[string]bool {
	asked := make(map[string]bool, len(sc.pending))
	for id := range sc.pending {
		asked[id] = true
		if !pending[id] {
			delete(sc.pending, id)
		}
	}
	return asked
}

// rememberTakable keeps the leases the plan found free or expired, with
// when this worker first saw them so: one still there a take interval
// later is left over (Listing.Leftover); one still there a lease duration
// later is shown in Status.Untaken.
func (sc *scheduler) rememberTakable(p balance.Plan, now time.Time) {
	was := sc.takable
	sc.takable = make(map[string]time.Time, len(p.Free)+len(p.Stale))
	untaken := []string{}
	for _, l := range p.Takable() {
		since, ok := was[l.Shard]
		if !ok {
			since = now
		}
		sc.takable[l.Shard] = since
		if now.Sub(since) >= sc.c.cfg.leaseDuration {
			untaken = append(untaken, sc.c.set.publicID(l.Shard))
		}
	}
	slices.Sort(untaken)
	sc.c.view.untaken.Store(&untakenSeen{leases: untaken, at: now})
}

// carryOut performs the round's intents in order and reports each one's
// outcome to it. done is false when the round stopped early: err is then
// one that must end Run, or nil (ctx was cancelled).
func (sc *scheduler) carryOut(ctx context.Context, r *balance.Round, tl *takeListing, asked map[string]bool, now time.Time) (done bool, err error) {
	// The round's takes share one fence floor reservation per stream, made
	// at the first take, after the listing they come from.
	p := r.Plan()
	ctx = withReservations(ctx, newReservations(len(p.Adopt)+len(p.Free)+len(p.Stale)))
	for {
		it, ok := r.Next()
		if !ok {
			return true, nil
		}
		switch it.Kind {
		case balance.Answer:
			// A handoff asked of this worker shows in the listing before the
			// next renewal would return it: answer it now.
			sc.c.answerHandoff(it.Row.Shard, it.Row.HandoffTo)
			r.Done(true)
		case balance.Adopt, balance.TakeFirst, balance.Take:
			// Rows that name this worker are taken with a write of their
			// own too, so the lease is timed from that write, as other
			// workers time it, and a runner that gave the lease up cannot
			// write to it again.
			took, err := sc.take(ctx, tl.byShard[it.Row.Shard], asked[it.Row.Shard], tl.byShard, now)
			if err != nil || ctx.Err() != nil {
				return false, err
			}
			r.Done(took)
		case balance.Ask:
			made, stop := sc.ask(ctx, tl.byShard[it.Row.Shard], now)
			if stop {
				return false, nil
			}
			r.Done(made)
		}
	}
}

// ask requests that the holder of l hand it over to this worker. made is
// false when the store refused (another worker asked first, or the lease
// moved since the listing); stop is set when ctx was cancelled.
func (sc *scheduler) ask(ctx context.Context, l Lease, now time.Time) (made, stop bool) {
	c := sc.c
	id := l.Key.String()
	if !c.set.readable(id) {
		c.log.Debug("handoff not requested: the lease's stream left the set, or is not ready to read", "lease", id)
		return false, false
	}
	rctx, cancel := c.storeCtx(ctx)
	_, err := c.store.RequestHandoff(rctx, l, c.cfg.identity)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false, true
		}
		c.log.Debug("handoff request refused", "lease", id, "holder", l.Owner, "err", err)
		return false, false
	}
	mail(ctx, c, l)
	c.log.Info("handoff requested", "lease", id, "holder", l.Owner, "counter", l.Counter)
	c.count(evHandoffAsked, 1, c.set.attrs(id)...)
	sc.pending[id] = now
	return true, false
}

// workerSeen is what an observer of worker row w watches stand still
// besides its counter: its owner and its session's generation.
func workerSeen(w Worker) string { return w.Owner + "|" + strconv.FormatInt(w.Gen, 10) }

// liveWorkers returns the owners of the worker rows that moved within a
// lease duration, as this worker has watched them; a row of another worker
// that stood still that long is deleted (its worker is gone).
func (sc *scheduler) liveWorkers(ctx context.Context, workers []Worker, now time.Time) []string {
	c := sc.c
	var live []string
	seen := make(map[string]bool, len(workers))
	for _, w := range workers {
		seen[w.Owner] = true
		if w.Owner == c.cfg.identity {
			continue
		}
		// The generation is part of what moves: a session opened again on
		// a row a fence deleted starts at the counter an older generation
		// was seen at, and is not the row that stood still.
		if o := observeRow(sc.wobs, w.Owner, w.Counter, workerSeen(w), now); now.Sub(o.changed) < max(c.cfg.leaseDuration, w.Duration) {
			live = append(live, w.Owner)
			continue
		}
		rctx, cancel := c.storeCtx(ctx)
		removed, err := sc.c.caps.workers.RemoveWorker(rctx, w)
		cancel()
		if err != nil {
			c.log.Debug("removing a gone worker's row failed", "worker", w.Owner, "err", err)
		} else if removed {
			c.log.Info("removed the row of a worker that stopped", "worker", w.Owner, "counter", w.Counter)
			if w.Gen != 0 {
				// The row held a session: removing it fenced the session.
				c.count(evSessionFenced, 1)
			}
		}
	}
	forgetUnseen(sc.wobs, seen)
	return live
}

// take acquires l on the counter seen in the listing and starts its
// runner; asked is whether this worker asked for l to be handed over. It reports whether this worker holds l now; the error is one that
// must end Run. Rows naming this worker are taken the same way (leases
// handed over to it, or given up by an earlier runner of it), so that every
// lease is timed from a write of this worker's, as other workers time it.
func (sc *scheduler) take(ctx context.Context, l Lease, asked bool, byShard map[string]Lease, now time.Time) (bool, error) {
	c := sc.c
	me := c.cfg.identity
	id := l.Key.String()
	if !c.set.readable(id) {
		// Decided from a listing or a deadline older than a change of the
		// set, or before Kinesis said the stream is gone: start no reader.
		c.log.Debug("not taken: the lease's stream left the set, or is not ready to read", "lease", id)
		return false, nil
	}
	if l.Owner != "" && l.Owner != me && l.Session != "" && !sc.sessions.mayClaim(ctx, c, l, now.Sub(sc.obs[id].changed)) {
		return false, nil
	}
	sent := time.Now()
	actx, cancel := c.storeCtx(withObservedRow(withKnownEpoch(WithHolderLeaseDuration(ctx, c.cfg.leaseDuration), c.set.of(id).learntEpoch()), l))
	got, err := sc.acquire(actx, l)
	cancel()
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case isFatal(err):
			return false, err
		case errors.Is(err, ErrLegacyRow) || errors.Is(err, ErrCorruptLease):
			sc.refused[id] = now
			c.log.Error("shard not read until an operator acts", "lease", id, "err", err)
		case !errors.Is(err, ErrLeaseHeld) && !errors.Is(err, ErrLeaseNotFound):
			c.log.Warn("acquire failed", "lease", id, "err", err)
		default:
			c.log.Debug("lease taken by another worker first", "lease", id, "err", err)
		}
		return false, nil
	}
	delete(sc.pending, id)
	how, kind := "taken", "free"
	switch {
	case l.Owner == me && asked && l.HandoffTo == "" && l.Expiry.IsZero():
		how, kind = "handed over", "handoff"
	case l.Owner == me && l.Expiry.IsZero():
		// This worker's own acquire whose reply was lost: what it took
		// before, it takes again.
		how, kind = "taken again (the reply to its acquire was lost)", "free"
	case l.Owner == me:
		how, kind = "taken back", "expired"
	case l.Owner != "":
		how, kind = "taken over from "+l.Owner, "expired"
	}
	ev := evTaken
	if kind == "handoff" {
		ev = evHandedIn
	}
	c.count(ev, 1, append(c.set.attrs(id), attribute.String("how", kind))...)
	sc.launch(ctx, got, how, hasTrackedParent(l, byShard), sent)
	return true, nil
}

// acquire acquires l on the counter the listing showed: in this worker's
// session when it has one (none live just now: nothing is taken).
func (sc *scheduler) acquire(ctx context.Context, l Lease) (Lease, error) {
	c := sc.c
	if c.sess == nil {
		return c.store.Acquire(ctx, l.Key, c.cfg.identity, l.Counter)
	}
	s, ok := c.sess.current()
	if !ok {
		return Lease{}, errorf("%w: this worker's session is not live (a new one is being opened)", ErrLeaseHeld)
	}
	return c.caps.sessions.AcquireInSession(ctx, l.Key, s, l.Counter)
}

// rowOf returns the plan's view of l. A row a session keeps counts as
// renewed: its holder's keeps stand for the renewals it does not write.
func rowOf(l Lease) balance.Row {
	renewed := !l.Expiry.IsZero() || l.Session != ""
	return balance.Row{Shard: l.Key.String(), Owner: l.Owner, Counter: l.Counter, HandoffTo: l.HandoffTo, Note: l.Note, Renewed: renewed, Finished: l.Finished()}
}

// hasTrackedParent reports whether any parent of l has a row: the parent was
// read by this application, so l must be read from its start.
func hasTrackedParent(l Lease, byShard map[string]Lease) bool {
	for _, p := range parentIDs(l) {
		if _, ok := byShard[p]; ok {
			return true
		}
	}
	return false
}

// launch launches a runner for a lease this worker now holds.
//
// written is when the acquire that made this worker the holder was sent.
func (sc *scheduler) launch(ctx context.Context, l Lease, how string, fromStart bool, written time.Time) {
	c := sc.c
	r := newLeaseRunner(c, l, fromStart, written)
	c.mu.Lock()
	c.held[r.id] = r
	c.mu.Unlock()
	r.log.Info("lease "+how, "counter", l.Counter, "checkpoint", l.Checkpoint)
	sc.wg.Go(func() {
		r.run(ctx)
		sc.exited <- r
	})
}
