package shardlease

// The MemoryStore's sessions (see lease_session.go): the worker rows with
// their sessions, and the SessionStore methods.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"maps"
	"slices"
	"time"
)

var _ SessionStore = (*MemoryStore)(nil)

// memWorker is a worker row of a MemoryStore: its counter and, while a
// session is open on it, the session's generation, the holder's lease
// duration and the mail left for the holder (lease keys, as a set); the
// packed checkpoints it carries, by lease key, and whether its session
// ended with some (see lease_packed.go).
type memWorker struct {
	counter  int64
	gen      int64
	duration time.Duration
	mail     map[string]bool
	packed   map[string]PackedCheckpoint
	ended    bool
}

// worker is the row as the store returns it.
func (r memWorker) worker(stream, owner string) Worker {
	return Worker{Stream: stream, Owner: owner, Counter: r.counter, Gen: r.gen, Duration: r.duration}
}

// putWorker writes owner's worker row of stream, under the lock.
func (m *MemoryStore) putWorker(stream, owner string, row memWorker) {
	if m.workers[stream] == nil {
		m.workers[stream] = make(map[string]memWorker)
	}
	m.workers[stream][owner] = row
}

// wroteWorker reports a session write to owner's worker row of stream to
// the OnWrite hook, under the lock; a row that is gone after is reported as
// the zero Lease of its key.
func (m *MemoryStore) wroteWorker(op, stream, owner string, before memWorker, existed bool, after memWorker, exists bool) {
	if m.hook == nil {
		return
	}
	as := func(r memWorker, there bool) Lease {
		l := Lease{Key: workerKey(Worker{Stream: stream, Owner: owner}), SubSequence: -1}
		if there {
			l.Owner, l.Counter, l.SessionGen, l.Duration = owner, r.counter, r.gen, r.duration
		}
		return l
	}
	m.hook(op, as(before, existed), as(after, exists))
}

// newSessionGen returns a random generation: positive, never 0, so that
// two opens of one row never share one.
func newSessionGen() int64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if g := int64(binary.BigEndian.Uint64(b[:]) >> 1); g != 0 {
			return g
		}
	}
}

// checkSession checks the arguments of a write to an open session.
func checkSession(ctx context.Context, s Worker) error {
	if err := checkWorker(ctx, s); err != nil {
		return err
	}
	if s.Gen == 0 {
		return errorf("%w: session of worker row %q has generation 0; pass a Worker returned by OpenSession or KeepSession, or read by ReadSession", ErrInvalidConfig, s.Key())
	}
	return nil
}

// sessionLost is the error of a keep of s refused because its row is gone
// or holds another generation (found reports whether the row is there).
func sessionLost(s Worker, found bool, gen int64) error {
	if !found {
		return errorf("%w: worker row %q is gone: another worker fenced the session (generation %d) after seeing it stand still; stop handing records of its leases and open a new session", ErrLeaseLost, s.Key(), s.Gen)
	}
	return errorf("%w: worker row %q holds generation %d, not %d: the session was fenced and opened again, or reopened under the same owner id; stop handing records of its leases and open a new session", ErrLeaseLost, s.Key(), gen, s.Gen)
}

// OpenSession implements SessionStore.
func (m *MemoryStore) OpenSession(ctx context.Context, stream, owner string) (Worker, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return Worker{}, memErr("open session", workerKey(w), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	before, existed := m.workers[stream][owner]
	// Entries of earlier generations stay for the claims of their leases.
	row := memWorker{counter: before.counter + 1, gen: newSessionGen(), duration: HolderLeaseDuration(ctx), packed: before.packed}
	m.putWorker(stream, owner, row)
	m.wroteWorker("open session", stream, owner, before, existed, row, true)
	return row.worker(stream, owner), nil
}

// KeepSession implements SessionStore.
func (m *MemoryStore) KeepSession(ctx context.Context, s Worker) (Worker, []string, error) {
	if err := checkSession(ctx, s); err != nil {
		return Worker{}, nil, memErr("keep session", workerKey(s), err)
	}
	return m.keep(ctx, s, nil, nil)
}

// keep is KeepSession that also puts and drops packed checkpoints
// (KeepPacked), under the lock.
func (m *MemoryStore) keep(ctx context.Context, s Worker, put []PackedCheckpoint, drop []LeaseKey) (Worker, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	before, ok := m.workers[s.Stream][s.Owner]
	if ok && before.ended {
		ok = false // an ended session's row reads as gone
	}
	if !ok || before.gen != s.Gen {
		return Worker{}, nil, memErr("keep session", workerKey(s), sessionLost(s, ok, before.gen))
	}
	row := before
	row.counter++
	if d := HolderLeaseDuration(ctx); d > 0 {
		row.duration = d
	}
	row.mail = nil
	row.packed = packedAfter(before.packed, put, drop)
	m.putWorker(s.Stream, s.Owner, row)
	m.wroteWorker("keep session", s.Stream, s.Owner, before, true, row, true)
	return row.worker(s.Stream, s.Owner), sortedMail(before.mail), nil
}

// sortedMail is a mail set as the sorted lease keys; nil when empty.
func sortedMail(mail map[string]bool) []string {
	if len(mail) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(mail))
}

// ReadSession implements SessionStore. A MemoryStore is always current.
func (m *MemoryStore) ReadSession(ctx context.Context, stream, owner string) (Worker, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return Worker{}, memErr("read session", workerKey(w), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.workers[stream][owner]
	if !ok || row.ended {
		return Worker{}, memErr("read session", workerKey(w), ErrLeaseNotFound)
	}
	return row.worker(stream, owner), nil
}

// FenceSession implements SessionStore.
func (m *MemoryStore) FenceSession(ctx context.Context, s Worker) (bool, error) {
	if err := checkSession(ctx, s); err != nil {
		return false, memErr("fence session", workerKey(s), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.workers[s.Stream][s.Owner]
	switch {
	case !ok || row.gen != s.Gen || row.ended:
		return true, nil // gone, or another generation: over already
	case row.counter != s.Counter:
		return false, nil // kept since: the session lives
	}
	m.endWorker("fence session", s.Stream, s.Owner, row)
	return true, nil
}

// MailSession implements SessionStore.
func (m *MemoryStore) MailSession(ctx context.Context, s Worker, lease LeaseKey) (bool, error) {
	if err := checkSession(ctx, s); err != nil {
		return false, memErr("mail session", workerKey(s), err)
	}
	if err := lease.Validate(); err != nil {
		return false, memErr("mail session", workerKey(s), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	before, ok := m.workers[s.Stream][s.Owner]
	if !ok || before.gen != s.Gen || before.ended {
		return false, nil
	}
	row := before
	row.mail = maps.Clone(before.mail)
	if row.mail == nil {
		row.mail = make(map[string]bool)
	}
	row.mail[lease.String()] = true
	m.putWorker(s.Stream, s.Owner, row)
	m.wroteWorker("mail session", s.Stream, s.Owner, before, true, row, true)
	return true, nil
}

// AcquireInSession implements SessionStore: Acquire, recording s on the
// row.
func (m *MemoryStore) AcquireInSession(ctx context.Context, key LeaseKey, s Worker, observed int64) (Lease, error) {
	if err := checkSession(ctx, s); err != nil {
		return Lease{}, memErr("acquire", key, err)
	}
	return m.acquire(ctx, key, s.Owner, observed, &s)
}
