package shardlease

// This file is the one fenced edit that operators' tools make to a lease
// row while consumers may be running: Rewind, ImportCheckpoints and
// ResetCheckpoint (and so the CLI's reset, rewind, import and release
// -force) all make it, with leaseEdit.
//
// An edit takes the row on the counter it read (an acquire under the
// tool's own identity), changes it with the holder's fenced writes, and
// then frees it or leaves it held:
//
//   - A row that was free when taken is released at once: no handler was
//     running on it.
//   - A row taken from a holder is left held by the tool's identity, its
//     last write carrying the lease duration the holder's row carried.
//
// Why the second rule keeps one handler per shard: the holder may be alive.
// Its writes fail from the tool's acquire on, so it stops at its next
// renewal, and at the latest at its cut-off, which comes less than its lease
// duration after its last successful write; that write came before the
// tool's acquire. Consumers take the left row as any expired lease: once its
// counter stood still, by their own clocks, for the longer of their lease
// duration and the row's, counted from the tool's last write at the
// earliest. So the next holder starts after the old one stopped. Releasing
// the row instead let a worker start at once, beside the old holder's
// handler. A dead holder costs the same one lease duration it would have
// cost without the edit.
//
// A write that fails leaves the row by the same rule: released unchanged
// when it was free, held unchanged when it was taken from a holder.
//
// A row a session keeps (Lease.Session) is not written by its holder, so an
// acquire alone would not stop it: the edit first ends the session
// (FenceSession, on the generation the row names), and the holder stops at
// its cut-off, within its lease duration of its last keep, which came
// before the fence. The row is then left held for the session's lease
// duration, and the rule above holds as for a holder that renews. Ending
// the session stops every lease of that holder, not this one alone: the
// price of taking a lease from a live holder without its handoff.

import (
	"context"
	"errors"
	"time"

	"github.com/shardlease/shardlease/internal/session"
)

// editWriteTimeout bounds the writes that finish an edit once the tool
// holds the row; they run even when the caller's context ends, so as not to
// leave a free row held.
const editWriteTimeout = 30 * time.Second

// editTakeAttempts is how often an edit with handover reads a row again
// whose holder wrote to it between the read and the acquire.
const editTakeAttempts = 5

// editExpiryFallback is the expiry written, for operators to read, on a row
// left held whose holder wrote no lease duration: the consumers' default.
const editExpiryFallback = 10 * time.Second

// counterAcquirer is implemented by stores that acquire a row only on its
// exact counter, free or held (DynamoStore.AcquireAt).
type counterAcquirer interface {
	AcquireAt(ctx context.Context, key LeaseKey, owner string, counter int64) (Lease, error)
}

// leaseEdit is one tool's fenced edits of lease rows (see the design note).
// One goroutine, the tool's, uses it.
type leaseEdit struct {
	store LeaseStore
	owner string // the tool's identity
	// handover lets the edit take a row from its holder; without it a held
	// row is refused with ErrLeaseHeld.
	handover bool
	// at, when set (the store's counterAcquirer, for an exact edit),
	// acquires a free row only on the counter read too: a row a consumer
	// wrote meanwhile is left alone.
	at counterAcquirer
}

// editHold is a row an edit holds.
type editHold struct {
	lease Lease // the handle for the next write
	read  Lease // the row as read just before the acquire; its owner is the holder the row was taken from ("" for a free row)
}

// resumeAfter is how long the row left held stands still before consumers
// take it: the taken holder's lease duration, or 0 when its row carried
// none (the consumers' own then) or the row was free.
func (h *editHold) resumeAfter() time.Duration {
	if h.read.Owner == "" {
		return 0
	}
	return h.read.Duration
}

// take acquires key's row, read as seen (the zero Lease for a row just
// made), on its counter. A row a worker took meanwhile is refused with
// ErrLeaseHeld, or with handover read again and taken from its holder.
func (e leaseEdit) take(ctx context.Context, key LeaseKey, seen Lease) (*editHold, error) {
	for attempt := 1; ; attempt++ {
		if seen.Owner != "" && !e.handover {
			return nil, errorf("%w: held by %s at counter %d", ErrLeaseHeld, seen.Owner, seen.Counter)
		}
		if seen.Owner != "" && seen.Session != "" {
			var err error
			if seen, err = e.endSession(ctx, seen); err != nil {
				return nil, err
			}
		}
		held, err := e.acquire(ctx, key, seen)
		switch {
		case err == nil:
			return &editHold{lease: held, read: seen}, nil
		case !errors.Is(err, ErrLeaseHeld) || !e.handover:
			return nil, err
		case attempt == editTakeAttempts:
			return nil, errorf("its holder kept writing to it between read and acquire %d times: %w", editTakeAttempts, err)
		}
		if seen, err = e.store.Get(ctx, key); err != nil {
			return nil, errorf("read the row again: %w", err)
		}
	}
}

// endSession ends the session that keeps seen's lease (see the design
// note) and returns seen with the session's lease duration, which the row
// is left held for (none when the session had ended already). The fence is
// on the generation the row names, and on the counter an eventually
// consistent read shows, read again while the session is kept between the
// read and the fence; a read that shows the row gone or of another
// generation is checked by the fence itself, on a counter no row has.
func (e leaseEdit) endSession(ctx context.Context, seen Lease) (Lease, error) {
	ss, ok := e.store.(SessionStore)
	if !ok {
		return seen, errorf("%w: the row is kept by session %s, which this store cannot end (it does not implement SessionStore); take the lease with the store the consumers use", ErrInvalidConfig, seen.Session)
	}
	named, _ := seen.KeptBy()
	for attempt := 1; ; attempt++ {
		sess := named
		sess.Counter = session.NoCounter
		read, err := ss.ReadSession(ctx, named.Stream, named.Owner)
		switch {
		case err == nil && read.Gen == seen.SessionGen:
			sess = read
		case err != nil && !errors.Is(err, ErrLeaseNotFound):
			return seen, errorf("read session %s: %w", seen.Session, err)
		}
		ended, err := ss.FenceSession(ctx, sess)
		switch {
		case err != nil:
			return seen, errorf("end session %s: %w", seen.Session, err)
		case ended:
			seen.Duration = max(seen.Duration, sess.Duration)
			return seen, nil
		case attempt == editTakeAttempts:
			return seen, errorf("%w: session %s (generation %d) was kept between each read and fence, %d times", ErrLeaseHeld, seen.Session, seen.SessionGen, editTakeAttempts)
		}
	}
}

// acquire makes the tool the holder of key's row on seen's counter. A row
// taken from a holder gets the holder's lease duration.
func (e leaseEdit) acquire(ctx context.Context, key LeaseKey, seen Lease) (Lease, error) {
	if seen.Owner != "" && seen.Duration > 0 {
		ctx = WithHolderLeaseDuration(ctx, seen.Duration)
	}
	if e.at != nil {
		return e.at.AcquireAt(ctx, key, e.owner, seen.Counter)
	}
	return e.store.Acquire(ctx, key, e.owner, seen.Counter)
}

// finish runs write (what names it in errors; nil writes nothing) on the
// held row, then frees the row or leaves it held (see the design note), and
// returns the row as left. Its writes outlive ctx for editWriteTimeout. A
// failed write leaves the row unchanged, by the same rule; the error says
// what became of it, and matches write's.
func (e leaseEdit) finish(ctx context.Context, h *editHold, what string, write func(ctx context.Context, held Lease) (Lease, error)) (Lease, error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), editWriteTimeout)
	defer cancel()
	if d := h.resumeAfter(); d > 0 {
		fctx = WithHolderLeaseDuration(fctx, d)
	}
	held := h.lease
	var wErr error
	if write != nil {
		var wrote Lease
		if wrote, wErr = write(fctx, held); wErr == nil {
			held = wrote
		}
	}
	left, lErr := e.leave(fctx, h, held)
	stays := "the lease stays with " + held.Owner + " until a consumer takes it after its lease duration"
	switch {
	case wErr != nil && lErr != nil:
		return held, errorf("%s: %w; then %s: %w (%s)", what, wErr, e.leaving(h), lErr, stays)
	case wErr != nil && h.read.Owner == "":
		return left, errorf("%s: %w (the lease was released unchanged)", what, wErr)
	case wErr != nil:
		return left, errorf("%s: %w (the row is unchanged, and %s)", what, wErr, stays)
	case lErr != nil:
		return held, errorf("%s done, but %s failed: %w (%s)", what, e.leaving(h), lErr, stays)
	}
	return left, nil
}

// leave frees the row of h, held as held, or leaves it held (see the design
// note) with one renewal: the tool's last write, which carries the holder's
// lease duration and an expiry for operators to read.
func (e leaseEdit) leave(ctx context.Context, h *editHold, held Lease) (Lease, error) {
	if h.read.Owner == "" {
		return e.store.Release(ctx, held)
	}
	d := h.resumeAfter()
	if d <= 0 {
		d = editExpiryFallback
	}
	return e.store.Renew(ctx, held, time.Now().Add(d))
}

// leaving names what leave does with h, for errors.
func (e leaseEdit) leaving(h *editHold) string {
	if h.read.Owner == "" {
		return "release the row"
	}
	return "leave the row held for the holder's lease duration"
}
