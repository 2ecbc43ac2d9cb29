package shardlease

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/session"
)

// A worker with sessions on (WithSessions) keeps one session on its worker
// row (lease_session.go). The sessionKeeper owns it: it opens the session
// when Run starts, keeps it every renew interval on a goroutine of its own,
// and closes it when Run ends. Every lease the worker takes names the
// session's generation; a runner of such a lease stops at the session's
// cut-off, timed from the send of the last keep that succeeded, and at once
// when the session ends (a keep refused: another worker fenced it). The
// keeper then opens a new session (a new generation), so that leases of the
// old one read as gone to every observer, and this worker takes its share
// again like any other.
//
//	opening ──► kept ──(keep refused, or the cut-off passes)──► ended ──► opening
//	                └──(Run ends)──► closed: the row is deleted

// sessionKeeper is a worker's session. Fields marked (mu) are written by the
// keeper goroutine (and by open, before it starts) and read by the runners
// and the scheduler; the others are set by newSessionKeeper.
type sessionKeeper struct {
	store  SessionStore
	domain string // the worker row's stream part: a Consumer's stream, a Group's name
	owner  string // this run's identity
	cfg    *config
	log    *slog.Logger
	count  func(e event)
	// kept records how long a keep that landed took, and how many
	// checkpoints it carried (the renew histogram, session=true).
	kept func(took time.Duration, checkpoints int)
	// deliver hands the mail a keep returned (lease row keys) to the
	// runners of those leases.
	deliver func(keys []string)
	// pack holds the checkpoints the keeps carry; nil when the store
	// carries none (it is no PackedCheckpointStore).
	pack *checkpointPack

	mu         sync.Mutex
	row        Worker        // (mu) the session as the last open or keep left it
	validUntil time.Time     // (mu) the cut-off of row.Gen on this machine's monotonic clock
	ended      chan struct{} // (mu) closed once row.Gen ends
	open       bool          // (mu) whether row.Gen is a session not known to have ended
	// doubt is set when the last session ended for want of a keep that
	// succeeded (a throttled or hung worker row), until a keep of the next
	// succeeds: no lease is taken in it meanwhile, so that a worker whose
	// keeps cannot land does not take leases only to drop them at each
	// cut-off, making the others wait a lease duration every time. (mu)
	doubt bool
	// retired is set once the worker drained (retire): no keep, and no new
	// session, until Run ends. (mu)
	retired bool
}

func newSessionKeeper(c *Consumer) *sessionKeeper {
	return &sessionKeeper{
		store: c.caps.sessions, domain: c.stream, owner: c.cfg.identity, cfg: &c.cfg, log: c.log,
		count: func(e event) { c.count(e, 1) },
		kept: func(took time.Duration, checkpoints int) {
			c.ins.renewDuration.Record(bg, seconds(took), c.ins.attrs(attribute.Bool("session", true), attribute.Bool("checkpoint", checkpoints > 0)))
		},
		deliver: func(keys []string) { pollRunners(c, keys) },
		ended:   closedChan(),
		// A checkpoint interval shorter than the renew interval asks for
		// checkpoints sooner than keeps come: each goes to its lease row.
		pack: packOf(c.caps.packed, c.cfg.unpacked || c.cfg.checkpointFlush < c.cfg.renewInterval),
	}
}

// packOf returns the pack of a session on store; nil when store is nil or
// packing is off (WithPackedCheckpoints).
func packOf(store PackedCheckpointStore, off bool) *checkpointPack {
	if store == nil || off {
		return nil
	}
	return newCheckpointPack(store)
}

// closedChan returns a closed channel.
func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// start opens the session; Run calls it before it takes any lease.
func (s *sessionKeeper) start(ctx context.Context) error {
	sent := time.Now()
	octx, cancel := context.WithTimeout(WithHolderLeaseDuration(ctx, s.cfg.leaseDuration), s.cfg.callTimeout())
	w, err := s.store.OpenSession(octx, s.domain, s.owner)
	cancel()
	if err != nil {
		return err
	}
	if s.pack != nil {
		s.pack.reset(w.Gen)
	}
	s.mu.Lock()
	s.row, s.validUntil, s.ended, s.open = w, session.Cutoff(sent, s.cfg.leaseDuration), make(chan struct{}), true
	s.mu.Unlock()
	s.log.Debug("session opened", "gen", w.Gen, "counter", w.Counter)
	return nil
}

// begin opens the session and starts keeping it on a goroutine of its own;
// end stops the keeping and closes the session, once every runner stopped
// (Run defers it). An open that fails is Run's error, naming the stream;
// one cancelled by ctx is none.
func (s *sessionKeeper) begin(ctx context.Context) (end func(), err error) {
	if err := s.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, errorf("shardlease: %s: opening this worker's session: %w", s.domain, err)
	}
	keepCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		s.run(keepCtx)
	}()
	return func() {
		stop()
		<-kept
		s.close(context.WithoutCancel(ctx))
	}, nil
}

// current returns the session leases are taken in now; ok is false while
// there is none that is surely live (before a new one is opened), and
// while a session opened after one that could not be kept has not been
// kept yet (doubt).
func (s *sessionKeeper) current() (w Worker, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.row, s.open && !s.doubt && time.Now().Before(s.validUntil)
}

// cutoff returns when leases of generation gen stop being surely this
// worker's: the session's cut-off while gen is the session's, else a time
// long past.
func (s *sessionKeeper) cutoff(gen int64) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open || gen != s.row.Gen {
		return time.Time{}
	}
	return s.validUntil
}

// endedOf returns a channel closed once generation gen has ended.
func (s *sessionKeeper) endedOf(gen int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open || gen != s.row.Gen {
		return closedChan()
	}
	return s.ended
}

// end marks generation gen ended, if it is the current one.
func (s *sessionKeeper) end(gen int64, why string, err error) {
	s.mu.Lock()
	if !s.open || gen != s.row.Gen {
		s.mu.Unlock()
		return
	}
	s.open = false
	close(s.ended)
	s.mu.Unlock()
	s.count(evSessionLost)
	s.log.Error("session ended: "+why+"; every lease it kept is lost, opening a new session", "gen", gen, "err", err)
}

// run keeps the session every renew interval (less up to a twentieth,
// so that a fleet started together spreads its writes), counted from the
// send of the last keep so that a slow one does not slow the beat, until
// ctx ends. A keep that fails is retried with backoff within the renew
// interval; one refused ends the session, as does the cut-off passing with
// no keep succeeding; a new session is then opened.
func (s *sessionKeeper) run(ctx context.Context) {
	cfg := s.cfg
	bo := backoff.Backoff{Min: min(cfg.retryMin, cfg.renewInterval/4), Max: cfg.renewInterval / 3}
	t := time.NewTimer(s.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		if s.step(ctx, sent) {
			bo.Reset()
			t.Reset(max(0, s.interval()-time.Since(sent)))
		} else {
			t.Reset(bo.Next())
		}
	}
}

// interval is the wait before the next keep: the renew interval less up to
// a twentieth, at random. The jitter spreads the writes of a fleet started
// together; never more than R, so that a crash repeats at most a renew
// interval of records (what the last keep's checkpoints did not cover), and
// little less, so that a worker writes barely more than 60/R keeps a
// minute (the bill).
func (s *sessionKeeper) interval() time.Duration {
	r := s.cfg.renewInterval
	return r - time.Duration(rand.Int64N(int64(r/20)+1))
}

// step makes one keep, sent at sent, or opens a new session when the last
// one ended; it reports whether it succeeded.
func (s *sessionKeeper) step(ctx context.Context, sent time.Time) bool {
	s.mu.Lock()
	row, open, until, retired := s.row, s.open, s.validUntil, s.retired
	s.mu.Unlock()
	if retired {
		return true
	}
	if !open {
		if err := s.start(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("opening a new session failed; retrying", "err", err)
			}
			return false
		}
		return true
	}
	kctx, cancel := context.WithTimeout(WithHolderLeaseDuration(ctx, s.cfg.leaseDuration), s.cfg.renewInterval)
	kept, mail, carried, err := s.keep(kctx, row)
	cancel()
	switch {
	case err == nil:
		s.kept(time.Since(sent), carried)
		s.mu.Lock()
		if s.open && s.row.Gen == row.Gen {
			s.row, s.validUntil, s.doubt = kept, session.Cutoff(sent, s.cfg.leaseDuration), false
		}
		s.mu.Unlock()
		if len(mail) > 0 {
			s.deliver(mail)
		}
		return true
	case ctx.Err() != nil:
		return false
	case errors.Is(err, ErrLeaseLost):
		s.end(row.Gen, "another worker fenced it (it judged this worker gone)", err)
	case !time.Now().Before(until):
		s.mu.Lock()
		s.doubt = true
		s.mu.Unlock()
		s.end(row.Gen, "no keep succeeded for almost a lease duration", err)
	default:
		s.log.Warn("keeping the session failed; retrying", "err", err)
	}
	return false
}

// keep makes one keep of row, carrying the pack's checkpoints when there
// is a pack.
func (s *sessionKeeper) keep(ctx context.Context, row Worker) (kept Worker, mail []string, carried int, err error) {
	if s.pack == nil {
		kept, mail, err = s.store.KeepSession(ctx, row)
		return kept, mail, 0, err
	}
	put, drop, landed := s.pack.batch(row.Gen)
	kept, mail, err = s.pack.store.KeepPacked(ctx, row, put, drop)
	if err == nil {
		landed()
	}
	return kept, mail, len(put), err
}

// retire ends the session for good before Run ends: a drained worker holds
// nothing and takes nothing, and its row, deleted, no longer counts it
// among the owners that share the leases (a session kept on would keep it
// counted, and leases free beyond the others' shares).
func (s *sessionKeeper) retire(ctx context.Context) {
	s.mu.Lock()
	s.retired = true
	s.mu.Unlock()
	s.close(ctx)
}

// close ends the session when Run ends, once every runner stopped: its row
// is deleted, so that the others neither count this worker nor wait for
// leases it could not release.
func (s *sessionKeeper) close(ctx context.Context) {
	s.mu.Lock()
	row, open := s.row, s.open
	s.open = false
	if open {
		close(s.ended)
	}
	s.mu.Unlock()
	if row.Gen == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.callTimeout())
	defer cancel()
	if s.pack != nil && open {
		// Every runner stopped: one last keep removes their entries, so
		// that the fence deletes the row.
		if kept, _, _, err := s.keep(WithHolderLeaseDuration(cctx, s.cfg.leaseDuration), row); err == nil {
			row = kept
		}
	}
	// The row may have moved since (a keep in flight): read it once more.
	for range 2 {
		ended, err := s.store.FenceSession(cctx, row)
		if err != nil || ended {
			if err != nil {
				s.log.Warn("deleting this worker's session row failed; others judge it gone after a lease duration", "err", err)
			}
			return
		}
		if row, err = s.store.ReadSession(cctx, s.domain, s.owner); err != nil {
			return
		}
	}
}

// pollRunners has the runners of the leases keys name read their rows
// (a write, as a renewal's), which carry the handoff request or the note
// another worker left for them.
func pollRunners(c *Consumer, keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range keys {
		if r := c.held[id]; r != nil {
			poke(r.k.poll)
		}
	}
}

// pollMoved has this worker's runners of session-kept leases whose rows a
// listing shows moved read their rows (a write, as pollRunners'): a row
// taken or freed by hand, or turned corrupt, which the runner, writing
// nothing while its lease is idle, would not notice. The write is refused
// and the runner stops. The listing may be older than a take: a row it
// shows at a lower counter than the runner's is not judged. byKey holds
// the listing's rows by row key.
func pollMoved(c *Consumer, byKey map[string]Lease) {
	c.mu.Lock()
	runners := make([]*leaseRunner, 0, len(c.held))
	for _, r := range c.held {
		if r.k.gen != 0 {
			runners = append(runners, r)
		}
	}
	c.mu.Unlock()
	for _, r := range runners {
		r.k.mu.Lock()
		held := r.k.lease
		r.k.mu.Unlock()
		listed, ok := byKey[held.Key.String()]
		if rowMoved(held, listed, ok) {
			r.log.Debug("a listing shows this worker's row moved: reading it", "owner", listed.Owner, "counter", listed.Counter)
			poke(r.k.poll)
		}
	}
}

// rowMoved reports whether a listing that shows listed (ok false: not at
// all) says the row held, as its holder last wrote it, moved: gone, at a
// higher counter, or at the same counter with another owner or session.
func rowMoved(held, listed Lease, ok bool) bool {
	switch {
	case !ok:
		return true
	case listed.Counter != held.Counter:
		return listed.Counter > held.Counter
	}
	return listed.Owner != held.Owner || listed.Session != held.Session
}
