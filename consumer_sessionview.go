package shardlease

import (
	"context"
	"errors"
	"time"

	"github.com/shardlease/shardlease/internal/session"
)

// sessionView is what this worker read of the sessions that keep the leases
// it watches (lease_session.go): the worker rows of its listings, and one
// eventually consistent read of each other session a listed lease names (a
// Group's session keeping a lease of a Consumer's stream, say). A lease a
// session keeps is observed through its mark (session.Mark), which moves
// while the session is kept, so the take rounds, the expiry deadlines and
// the deputies' watches judge it as they judge a renewed lease. Run's
// goroutine alone uses it.
type sessionView struct {
	store SessionStore // nil when the store keeps no sessions
	// rows holds the sessions' rows as last read, by key; one gone reads
	// as the zero Worker.
	rows map[string]Worker
	// gens holds what this worker learnt of each session generation that
	// keeps a listed lease, by key and generation.
	gens map[sessionGen]genSeen
	// reminded holds when this worker last mailed the holder of a lease it
	// asked for again, by row key.
	reminded map[string]time.Time
	// watched holds the kept rows this worker watches (the first leases),
	// as last read, by row key (see cachedWatch).
	watched map[string]watchedRow
	// kept holds the rows the last listing showed kept by a session, by
	// row key (see tellMoved).
	kept map[string]Lease
}

// watchedRow is a watched kept row as last read, and how many more looks
// may use it instead of reading it again.
type watchedRow struct {
	l      Lease
	reuse  int
	readAt time.Time
}

// watchReuse is how many looks in a row use a kept row read once: a row a
// session keeps changes only when its owner does, so a look reads its
// session's row alone, and the lease row every watchReuse+1 looks, when
// the read is older than a take interval (the looks of one rota turn share
// a read, never those of two), and whenever the session no longer reads
// live: a first lease handed to another worker is watched a take interval
// late at worst.
const watchReuse = session.RotaTurn - 1

// sessionGen names one generation of a session.
type sessionGen struct {
	key string
	gen int64
}

// genSeen is what a worker learnt of one session generation.
type genSeen struct {
	// last is the counter it was last seen live at (session.Seen.Last);
	// lastAt is when this worker first saw that counter, by any read.
	last   int64
	lastAt time.Time
	// ended is set once this worker's fence ended it.
	ended bool
	// longest is the longest lease duration its row showed: a row gone
	// (an operator's tool ended the session) still holds its leases for
	// that long.
	longest time.Duration
}

func newSessionView(store SessionStore) *sessionView {
	return &sessionView{store: store, rows: make(map[string]Worker), gens: make(map[sessionGen]genSeen), reminded: make(map[string]time.Time), watched: make(map[string]watchedRow)}
}

// update learns the sessions that keep leases from a listing: its worker
// rows, and a read of each session a held lease names that the listing does
// not hold. A read that fails leaves what was seen before.
func (v *sessionView) update(ctx context.Context, c *Consumer, leases []Lease, workers []Worker) {
	if v.store == nil {
		return
	}
	listed := make(map[string]Worker, len(workers))
	for _, w := range workers {
		listed[w.Key()] = w
	}
	rows := make(map[string]Worker)
	for _, l := range leases {
		if l.Owner == "" || l.Session == "" {
			continue
		}
		if _, done := rows[l.Session]; done {
			continue
		}
		if w, ok := listed[l.Session]; ok {
			rows[l.Session] = w
			continue
		}
		if w, ok := v.read(ctx, c, l); ok {
			rows[l.Session] = w
		} else if w, ok := v.rows[l.Session]; ok {
			rows[l.Session] = w
		}
	}
	v.rows = rows
	clear(v.watched) // the listing is newer than every row read for a look
	byKey := make(map[string]Lease, len(leases))
	for _, l := range leases {
		byKey[l.Key.String()] = l
	}
	v.tellMoved(ctx, c, byKey, listed)
	pollMoved(c, byKey)
	for k := range v.gens {
		if _, ok := rows[k.key]; !ok {
			delete(v.gens, k)
		}
	}
}

// read reads the session that keeps l; a row not found reads as the zero
// Worker (gone). ok is false when the read failed otherwise.
func (v *sessionView) read(ctx context.Context, c *Consumer, l Lease) (Worker, bool) {
	s, ok := l.KeptBy()
	if !ok || v.store == nil {
		return Worker{}, false
	}
	rctx, cancel := c.storeCtx(ctx)
	w, err := v.store.ReadSession(rctx, s.Stream, s.Owner)
	cancel()
	switch {
	case err == nil:
		return w, true
	case errors.Is(err, ErrLeaseNotFound):
		return Worker{}, true
	}
	if ctx.Err() == nil {
		c.log.Debug("reading a session failed", "session", l.Session, "lease", l.Key.String(), "err", err)
	}
	return Worker{}, false
}

// cachedWatch returns the watched row key as last read, when this look may
// use it instead of reading it (see watchReuse).
func (v *sessionView) cachedWatch(key string, now time.Time, take time.Duration) (Lease, bool) {
	w, ok := v.watched[key]
	if !ok || w.reuse <= 0 || now.Sub(w.readAt) > take+take/4 {
		return Lease{}, false
	}
	w.reuse--
	v.watched[key] = w
	return w.l, true
}

// watchRead remembers l, the watched row key as just read, for the next
// looks; a row that no session keeps is read at every look.
func (v *sessionView) watchRead(key string, l Lease, now time.Time) {
	if v.store == nil || l.Owner == "" || l.Session == "" {
		delete(v.watched, key)
		return
	}
	v.watched[key] = watchedRow{l: l, reuse: watchReuse, readAt: now}
}

// watchSeen forgets the watched row l of key once its session no longer
// reads live: the next look reads the row.
func (v *sessionView) watchSeen(key string, l Lease) {
	if l.Session != "" && !v.seen(l).Lives() {
		delete(v.watched, key)
	}
}

// seen returns l and its session as session.Seen, and remembers the
// counter of a session seen live.
func (v *sessionView) seen(l Lease) session.Seen {
	s := session.Seen{Owner: l.Owner, Counter: l.Counter, Session: l.Session, Gen: l.SessionGen}
	if l.Session == "" {
		return s
	}
	if w, ok := v.rows[l.Session]; ok && w.Owner != "" {
		s.Found, s.RowGen, s.RowCounter = true, w.Gen, w.Counter
	}
	g := sessionGen{l.Session, l.SessionGen}
	known := v.gens[g]
	if s.Lives() {
		if known.last != s.RowCounter || known.lastAt.IsZero() {
			known.lastAt = time.Now()
		}
		known.last, known.longest = s.RowCounter, max(known.longest, v.rows[l.Session].Duration)
		v.gens[g] = known
	}
	s.Last, s.Ended = known.last, known.ended
	return s
}

// mark returns what an observer of l watches stand still.
func (v *sessionView) mark(l Lease) string { return session.Mark(v.seen(l)) }

// observe records l, the row key as read at now, in obs (observeRow) and
// returns the observation. When only its session's counter moved since
// the last observation (the same holder, counter and session), the mark
// changed when this worker first saw the session at that counter, by any
// read (a look at another lease the session keeps, say), if that came
// after the last observation: the session proved its holder alive then,
// not at this read. So a worker that watched a coordinator's session stand
// still times the session's other leases from then when it lists them.
func (v *sessionView) observe(obs map[string]observation, key string, l Lease, now time.Time) observation {
	prev, had := obs[key]
	mark := v.mark(l)
	o := observeRow(obs, key, l.Counter, mark, now)
	if !had || !o.changed.Equal(now) || prev.counter != l.Counter || !session.SameHolder(prev.owner, mark) {
		return o
	}
	at := v.gens[sessionGen{l.Session, l.SessionGen}].lastAt
	if at.IsZero() || at.Before(prev.changed) || !at.Before(now) {
		return o
	}
	o.changed = at
	obs[key] = o
	return o
}

// leftBy reports the holder of prev, the watched row key as this worker
// last saw it, when l, the row as just read, shows it moved to another
// holder or session and prev's session no longer reads live (one read of
// it): fenced by the worker that took the row, or closed. That holder's
// other leases, in streams the taker may not read, wait for a worker that
// lists them. A handoff by a live holder, a read that fails, or a row no
// session kept reports nothing.
func (v *sessionView) leftBy(ctx context.Context, c *Consumer, prev, l Lease) (string, bool) {
	switch {
	case v.store == nil, prev.Key != l.Key, prev.Owner == "", prev.Session == "", prev.Owner == c.cfg.identity:
		return "", false
	case l.Owner == prev.Owner && l.Session == prev.Session && l.SessionGen == prev.SessionGen:
		return "", false
	}
	w, ok := v.read(ctx, c, prev)
	if !ok || w.Owner != "" && w.Gen == prev.SessionGen {
		return "", false
	}
	return prev.Owner, true
}

// reread reads the session that keeps l again (a deputy's look, between
// listings).
func (v *sessionView) reread(ctx context.Context, c *Consumer, l Lease) {
	if l.Owner != "" && l.Session != "" {
		if w, ok := v.read(ctx, c, l); ok {
			v.rows[l.Session] = w
		}
	}
}

// wait is how long a taker whose lease duration is own waits, with l's mark
// standing still, before it may take l: the longer of own and the holder's
// lease duration, which the session's row carries for a lease it keeps.
func (v *sessionView) wait(l Lease, own time.Duration) time.Duration {
	d := expiresAfter(l, own)
	if l.Session == "" {
		return d
	}
	if w, ok := v.rows[l.Session]; ok && w.Gen == l.SessionGen {
		d = max(d, w.Duration)
	}
	return max(d, v.gens[sessionGen{l.Session, l.SessionGen}].longest)
}

// mayClaim carries out what session.Judge says of l, a lease held by
// another worker whose mark stood still for still: for a lease a session
// keeps, a fence first (conditional on the counter the view shows), or a
// confirmation that the session is over when the view shows it gone. It
// reports whether l may be claimed now.
func (v *sessionView) mayClaim(ctx context.Context, c *Consumer, l Lease, still time.Duration) bool {
	seen := v.seen(l)
	step := session.Judge(seen, still, v.wait(l, c.cfg.leaseDuration))
	switch step {
	case session.Wait:
		c.log.Debug("not taken: its session may be alive", "lease", l.Key.String(), "session", l.Session)
		return false
	case session.Claim:
		return true
	}
	if v.store == nil {
		c.log.Error("a lease kept by a session stands still, and this worker's store cannot fence sessions (it is no SessionStore): it leaves the lease to workers whose store can", "lease", l.Key.String(), "session", l.Session)
		return false
	}
	s, _ := l.KeptBy()
	s.Counter = session.FenceAt(seen)
	fctx, cancel := c.storeCtx(ctx)
	ended, err := v.store.FenceSession(fctx, s)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			c.log.Warn("fencing a session failed; its leases are not taken this round", "session", l.Session, "lease", l.Key.String(), "err", err)
		}
		return false
	case !ended:
		c.log.Debug("not taken: its session lives", "lease", l.Key.String(), "session", l.Session, "step", step.String())
		return false
	}
	g := sessionGen{l.Session, l.SessionGen}
	known := v.gens[g]
	known.ended = true
	v.gens[g] = known
	if step == session.Fence {
		c.count(evSessionFenced, 1)
		c.log.Info("fenced the session of a worker judged gone", "session", l.Session, "gen", s.Gen, "counter", s.Counter)
	}
	return true
}

// tellMoved mails the holder of each row the previous listing showed kept
// by a session that this listing shows still live, when the row changed
// hands since (another owner or session), or is free, gone or unreadable:
// a row edited by hand, which its holder, writing nothing while the lease
// is idle, would not notice. The mail makes its runner write the row; the
// write is refused and the runner stops. A row that moved through its
// holder (a handoff, a release) costs a mail no runner acts on; one whose
// session is over (fenced, closed) none. A session is judged by the row
// this listing read for the leases it keeps or, when it keeps none of them
// now (its only row was taken by hand), by its worker row in listed. Then
// it remembers this listing's kept rows. now holds the listing's rows by
// row key.
func (v *sessionView) tellMoved(ctx context.Context, c *Consumer, now map[string]Lease, listed map[string]Worker) {
	for key, was := range v.kept {
		l, ok := now[key]
		if ok && l.Owner == was.Owner && l.Session == was.Session && l.SessionGen == was.SessionGen {
			continue
		}
		w, ok := v.rows[was.Session]
		if !ok {
			w = listed[was.Session]
		}
		if w.Owner == "" || w.Gen != was.SessionGen {
			continue // the session is over: nobody to tell
		}
		c.log.Debug("a row kept by a live session changed hands: telling its holder", "lease", key, "session", was.Session, "owner", l.Owner)
		mail(ctx, c, was)
	}
	v.kept = make(map[string]Lease)
	for key, l := range now {
		if l.Owner != "" && l.Session != "" {
			v.kept[key] = l
		}
	}
}

// mail tells the session that keeps l, if one does, that its row carries a
// handoff request or a note: the holder reads it after its next keep. A
// failure is logged; the requester asks again.
func mail(ctx context.Context, c *Consumer, l Lease) {
	s, ok := l.KeptBy()
	if !ok || c.caps.sessions == nil {
		return
	}
	mctx, cancel := c.storeCtx(ctx)
	_, err := c.caps.sessions.MailSession(mctx, s, l.Key)
	cancel()
	if err != nil && ctx.Err() == nil {
		c.log.Warn("telling a session of a request on its lease failed", "session", l.Session, "lease", l.Key.String(), "err", err)
	}
}

// remind mails again the holder of each lease this worker asked for (pending,
// with when) that still names it as the taker a renew interval and a take
// interval after the last mail: a keep whose reply was lost takes its mail
// with it, and a session-kept lease moves away from a live holder only
// through the holder.
func (v *sessionView) remind(ctx context.Context, c *Consumer, pending map[string]time.Time, byShard map[string]Lease, now time.Time) {
	wait := c.cfg.renewInterval + c.cfg.takeInterval
	for id := range v.reminded {
		if _, ok := pending[id]; !ok {
			delete(v.reminded, id)
		}
	}
	for id, since := range pending {
		l, ok := byShard[id]
		if !ok || l.Session == "" || l.HandoffTo != c.cfg.identity {
			continue
		}
		if last, ok := v.reminded[id]; ok {
			since = last
		}
		if now.Sub(since) >= wait {
			mail(ctx, c, l)
			v.reminded[id] = now
		}
	}
}

// fenceLeftOver fences the sessions of the expired leases a round left to
// others (this worker at its cap, or beyond its share): the session can
// then never be kept again, whatever becomes of this worker, and the
// workers that take its leases confirm it over once they have timed them.
func (v *sessionView) fenceLeftOver(ctx context.Context, c *Consumer, tl *takeListing, obs map[string]observation, now time.Time) {
	if v.store == nil {
		return
	}
	me := c.cfg.identity
	for id, expired := range tl.in.Expired {
		l := tl.byShard[id]
		if !expired || l.Owner == me || l.Session == "" || tl.in.Held[id] {
			continue
		}
		if session.Judge(v.seen(l), now.Sub(obs[id].changed), v.wait(l, c.cfg.leaseDuration)) == session.Fence {
			v.mayClaim(ctx, c, l, now.Sub(obs[id].changed))
		}
	}
}
