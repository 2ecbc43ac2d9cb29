package shardlease

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryStore is a LeaseStore kept in process memory. It keeps the same
// contract as DynamoStore and serves tests, single-process services and the
// quickstart. The zero value is not usable; call NewMemoryStore.
type MemoryStore struct {
	mu   sync.Mutex
	rows map[LeaseKey]Lease
	// workers holds the worker rows, by owner, by stream: their counters
	// and sessions (see memory_session.go).
	workers map[string]map[string]memWorker
	// identities holds the stream identities, by stream.
	identities map[string]StreamIdentity
	// floors holds the fence floors, by stream (see lease_floor.go); no
	// deletion removes one.
	floors map[string]fenceFloor
	// hook, when set, sees every successful write (for tests that audit who
	// wrote what).
	hook func(op string, before, after Lease)
}

var (
	_ LeaseStore    = (*MemoryStore)(nil)
	_ WorkerStore   = (*MemoryStore)(nil)
	_ LineageStore  = (*MemoryStore)(nil)
	_ IdentityStore = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{rows: make(map[LeaseKey]Lease), workers: make(map[string]map[string]memWorker), identities: make(map[string]StreamIdentity), floors: make(map[string]fenceFloor)}
}

// OnWrite is a test hook: services do not need it. It registers fn to be
// called, under the store's lock, after every successful write with the row
// before and after it, so that a test can audit that only a lease's holder
// ever writes to it. fn must not call the store. AcquireInSession is
// reported as "acquire" (its row names the session). The session writes to
// worker rows are reported too, as "open session", "keep session", "fence
// session" and "mail session", with a Lease whose Key is the worker row's
// ("stream:@owner"), Owner the worker's, Counter the row's counter and
// SessionGen its generation (a fenced row after is the zero Lease of that
// key); Heartbeat and RemoveWorker are not reported.
func (m *MemoryStore) OnWrite(fn func(op string, before, after Lease)) {
	m.mu.Lock()
	m.hook = fn
	m.mu.Unlock()
}

func (m *MemoryStore) wrote(op string, before, after Lease) {
	m.rows[after.Key] = after
	if m.hook != nil {
		m.hook(op, cloneLease(before), cloneLease(after))
	}
}

func cloneLease(l Lease) Lease {
	l.Parents = slices.Clone(l.Parents)
	if l.Lag != nil {
		lag := *l.Lag
		l.Lag = &lag
	}
	return l
}

func memErr(op string, key LeaseKey, err error) error {
	return &LeaseError{Op: op, Key: key, Err: err}
}

// Create implements LeaseStore.
func (m *MemoryStore) Create(ctx context.Context, key LeaseKey, parents []string) (bool, error) {
	return m.CreateAt(ctx, key, parents, Start{})
}

// Get implements LeaseStore.
func (m *MemoryStore) Get(ctx context.Context, key LeaseKey) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("get", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[key]
	if !ok {
		return Lease{}, memErr("get", key, ErrLeaseNotFound)
	}
	return cloneLease(row), nil
}

// List implements LeaseStore: ListWithWorkers without the worker rows.
func (m *MemoryStore) List(ctx context.Context, stream string) ([]Lease, error) {
	leases, _, err := m.ListWithWorkers(ctx, stream)
	return leases, err
}

// ListWithWorkersEventually implements EventualLister. A MemoryStore is
// always current: it returns what ListWithWorkers returns.
func (m *MemoryStore) ListWithWorkersEventually(ctx context.Context, stream string) ([]Lease, []Worker, error) {
	return m.ListWithWorkers(ctx, stream)
}

// ListWithWorkers implements WorkerStore. Leases and worker rows are read
// under one hold of the lock, so a worker that acquires a lease and then
// removes its row is seen in one or the other, never in neither.
func (m *MemoryStore) ListWithWorkers(ctx context.Context, stream string) ([]Lease, []Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, errorf("shardlease: list stream %s: %w", stream, err)
	}
	if err := ValidateStreamName(stream); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var leases []Lease
	for k, row := range m.rows {
		if k.Stream == stream {
			leases = append(leases, cloneLease(row))
		}
	}
	slices.SortFunc(leases, func(a, b Lease) int { return strings.Compare(a.Key.Shard, b.Key.Shard) })
	leases = m.mergeLocked(leases)
	var workers []Worker
	for owner, row := range m.workers[stream] {
		if listedWorker(row) {
			workers = append(workers, row.worker(stream, owner))
		}
	}
	slices.SortFunc(workers, func(a, b Worker) int { return strings.Compare(a.Owner, b.Owner) })
	return leases, workers, nil
}

// ListStreams implements GroupLister under one hold of the lock. A
// MemoryStore is always current: consistent makes no difference.
func (m *MemoryStore) ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]Lease, []Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, errorf("shardlease: list streams %s: %w", strings.Join(streams, ","), err)
	}
	want := make(map[string]bool, len(streams))
	for _, st := range streams {
		if err := ValidateStreamName(st); err != nil {
			return nil, nil, err
		}
		want[st] = true
	}
	if err := ValidateStreamName(workersOf); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var leases []Lease
	for k, row := range m.rows {
		if want[k.Stream] {
			leases = append(leases, cloneLease(row))
		}
	}
	slices.SortFunc(leases, func(a, b Lease) int {
		return cmp.Or(strings.Compare(a.Key.Stream, b.Key.Stream), strings.Compare(a.Key.Shard, b.Key.Shard))
	})
	leases = m.mergeLocked(leases)
	var workers []Worker
	for owner, row := range m.workers[workersOf] {
		if listedWorker(row) {
			workers = append(workers, row.worker(workersOf, owner))
		}
	}
	slices.SortFunc(workers, func(a, b Worker) int { return strings.Compare(a.Owner, b.Owner) })
	return leases, workers, nil
}

// Heartbeat implements WorkerStore.
func (m *MemoryStore) Heartbeat(ctx context.Context, stream, owner string) (Worker, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return Worker{}, memErr("heartbeat", workerKey(w), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row := m.workers[stream][owner] // a session on it is left as it is
	row.counter++
	m.putWorker(stream, owner, row)
	return row.worker(stream, owner), nil
}

// RemoveWorker implements WorkerStore.
func (m *MemoryStore) RemoveWorker(ctx context.Context, w Worker) (bool, error) {
	if err := checkWorker(ctx, w); err != nil {
		return false, memErr("remove worker", workerKey(w), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.workers[w.Stream][w.Owner]
	if !ok || row.counter != w.Counter {
		return false, nil
	}
	// A row with packed checkpoints ends rather than goes (lease_packed.go).
	m.endWorker("remove worker", w.Stream, w.Owner, row)
	return true, nil
}

// Acquire implements LeaseStore. The counter it writes is reserved from the
// stream's fence floor (see lease_floor.go): above every counter an earlier
// acquire of any row of the stream wrote, and above the row's own.
func (m *MemoryStore) Acquire(ctx context.Context, key LeaseKey, owner string, observed int64) (Lease, error) {
	return m.acquire(ctx, key, owner, observed, nil)
}

// acquire is Acquire, which records on the row that session keeps the
// lease when session is not nil (AcquireInSession) and clears any such
// record otherwise.
func (m *MemoryStore) acquire(ctx context.Context, key LeaseKey, owner string, observed int64, session *Worker) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("acquire", key, err)
	}
	if owner == "" {
		return Lease{}, memErr("acquire", key, errorf("%w: owner id is empty", ErrInvalidConfig))
	}
	// A take round's block of counters is reserved before the lock (it
	// takes the lock itself); the row must still be below its counter.
	var fromRound *fenceFloor
	if rs := reservationsOf(ctx); rs != nil {
		f, err := rs.next(ctx, key.Stream, observed, m.reserveBlock)
		if err != nil {
			return Lease{}, memErr("acquire", key, err)
		}
		fromRound = &f
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[key]
	if !ok {
		return Lease{}, memErr("acquire", key, ErrLeaseNotFound)
	}
	if row.Owner != "" && row.Counter != observed {
		return Lease{}, memErr("acquire", key, errorf("%w: held by %q at counter %d, observed %d", ErrLeaseHeld, row.Owner, row.Counter, observed))
	}
	if inc, ok := observedIncarnation(ctx); ok && inc != row.incarnation {
		return Lease{}, memErr("acquire", key, errorf("%w: the row was made again since it was read", ErrLeaseHeld))
	}
	if fromRound != nil && row.Counter >= fromRound.counter {
		return Lease{}, memErr("acquire", key, errorf("%w: the row's counter %d passed the one reserved, %d", ErrLeaseHeld, row.Counter, fromRound.counter))
	}
	before := row
	m.carryPacked(&row)
	f := fromRound
	if f == nil {
		own := m.reserve(ctx, key.Stream, row.Counter)
		f = &own
	}
	row.Owner = owner
	row.Counter = f.counter
	row.fenceEpoch = f.epoch
	row.HandoffTo = ""
	row.Note = ""
	row.Expiry = time.Time{}
	row.Duration = HolderLeaseDuration(ctx)
	row.Session, row.SessionGen = "", 0
	if session != nil {
		// A kept row carries the holder's duration too (DynamoStore in
		// "session:<ms>"), so that a taker that never saw the session's
		// row still waits it out.
		row.Session, row.SessionGen = session.Key(), session.Gen
	}
	row.Lag = nil
	m.wrote("acquire", before, row)
	return cloneLease(row), nil
}

// reserve reserves, under the lock, the counter an acquire of a row of
// stream at counter writes: above the stream's fence floor and the row's
// counter. The floor's epoch is raised first to what the acquiring worker
// knows, or, while it is zero, to the recorded identity's.
func (m *MemoryStore) reserve(ctx context.Context, stream string, counter int64) fenceFloor {
	f := m.floors[stream]
	want := knownEpoch(ctx)
	if id, ok := m.identities[stream]; ok && want == 0 && f.epoch == 0 {
		want = epochOf(id)
	}
	f.epoch = max(f.epoch, want)
	f.counter = max(f.counter, counter) + 1
	m.floors[stream] = f
	return f
}

// reserveBlock reserves n counters of stream's floor for rows observed at
// counters up to observed (see reservations); it takes the lock.
func (m *MemoryStore) reserveBlock(ctx context.Context, stream string, n, observed int64) (fenceFloor, error) {
	if err := ctx.Err(); err != nil {
		return fenceFloor{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	first := m.reserve(ctx, stream, observed) // above the floor and observed
	f := m.floors[stream]
	f.counter = first.counter + n - 1
	m.floors[stream] = f
	return f, nil
}

// raiseEpoch raises stream's floor epoch to epoch, under the lock.
func (m *MemoryStore) raiseEpoch(stream string, epoch int64) {
	f := m.floors[stream]
	f.epoch = max(f.epoch, epoch)
	m.floors[stream] = f
}

// holds checks the renew/checkpoint/release condition under the lock.
func (m *MemoryStore) holds(op string, held Lease) (Lease, error) {
	row, ok := m.rows[held.Key]
	if !ok {
		return Lease{}, memErr(op, held.Key, errorf("%w: %w", ErrLeaseLost, ErrLeaseNotFound))
	}
	if row.Owner != held.Owner || row.Counter != held.Counter || held.Owner == "" {
		return row, memErr(op, held.Key, errorf("%w: row has owner %q counter %d, handle has owner %q counter %d", ErrLeaseLost, row.Owner, row.Counter, held.Owner, held.Counter))
	}
	return row, nil
}

// own reports whether row may be the result of a write made under held
// (the next counter), so that a write sent again after its reply was lost
// is recognised as the holder's own, as DynamoStore does.
func own(row, held Lease) bool {
	return held.Owner != "" && row.Key == held.Key && row.Counter == held.Counter+1
}

// Renew implements LeaseStore.
func (m *MemoryStore) Renew(ctx context.Context, held Lease, expiry time.Time) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("renew", held.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, err := m.holds("renew", held)
	if err != nil {
		if own(row, held) && row.Owner == held.Owner && row.Expiry.UnixMilli() == expiry.UnixMilli() {
			return cloneLease(row), nil // this very renewal, sent again
		}
		return Lease{}, err
	}
	before := row
	row.Counter++
	row.Expiry = expiry
	if d := HolderLeaseDuration(ctx); d > 0 && row.Session == "" {
		row.Duration = d // a kept row's duration is its session's
	}
	row.Lag = holderLag(ctx)
	m.wrote("renew", before, row)
	return cloneLease(row), nil
}

// Checkpoint implements LeaseStore.
func (m *MemoryStore) Checkpoint(ctx context.Context, held Lease, checkpoint string, subSequence int64, expiry time.Time) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("checkpoint", held.Key, err)
	}
	if err := validCheckpoint(checkpoint, subSequence); err != nil {
		return Lease{}, memErr("checkpoint", held.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, err := m.holds("checkpoint", held)
	if err != nil {
		if own(row, held) && row.Owner == held.Owner && row.Checkpoint == checkpoint && row.SubSequence == subSequence && row.Expiry.UnixMilli() == expiry.UnixMilli() {
			return cloneLease(row), nil // this very checkpoint, sent again
		}
		return Lease{}, err
	}
	before := row
	row.Counter++
	row.Checkpoint = checkpoint
	row.SubSequence = subSequence
	row.Expiry = expiry
	if d := HolderLeaseDuration(ctx); d > 0 && row.Session == "" {
		row.Duration = d // a kept row's duration is its session's
	}
	row.Lag = holderLag(ctx)
	m.wrote("checkpoint", before, row)
	return cloneLease(row), nil
}

// Release implements LeaseStore.
func (m *MemoryStore) Release(ctx context.Context, held Lease) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("release", held.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, err := m.holds("release", held)
	if err != nil {
		if own(row, held) && row.Owner == held.HandoffTo && held.HandoffTo != "" {
			return cloneLease(row), nil // this very handoff, sent again
		}
		if row.Key == held.Key && row.Owner == "" {
			return cloneLease(row), nil // free already: releasing twice is harmless
		}
		return Lease{}, err
	}
	before := row
	row.Counter++
	row.Owner = ""
	if held.HandoffTo != "" {
		// To the taker the row names now: a request withdrawn meanwhile
		// frees the lease, as DynamoStore does.
		row.Owner = row.HandoffTo
	}
	row.HandoffTo = ""
	row.Note = ""
	row.Expiry = time.Time{}
	row.Lag = nil
	if row.Session != "" {
		// The record named the holder's session, which keeps the lease no
		// more (nor the taker's, after a handoff).
		row.Session, row.SessionGen, row.Duration = "", 0, 0
	}
	m.wrote("release", before, row)
	return cloneLease(row), nil
}

// RequestHandoff implements LeaseStore.
func (m *MemoryStore) RequestHandoff(ctx context.Context, current Lease, taker string) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("request handoff", current.Key, err)
	}
	if taker == "" {
		return Lease{}, memErr("request handoff", current.Key, errorf("%w: taker owner id is empty", ErrInvalidConfig))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[current.Key]
	if !ok {
		return Lease{}, memErr("request handoff", current.Key, ErrLeaseNotFound)
	}
	if row.Owner == "" || row.Owner != current.Owner || row.HandoffTo != "" {
		return Lease{}, memErr("request handoff", current.Key, errorf("%w: row has owner %q, handoff to %q; expected owner %q and no handoff", ErrLeaseHeld, row.Owner, row.HandoffTo, current.Owner))
	}
	before := row
	row.HandoffTo = taker
	m.wrote("request handoff", before, row)
	return cloneLease(row), nil
}

// Note implements NoteStore.
func (m *MemoryStore) Note(ctx context.Context, current Lease, note string) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("note", current.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[current.Key]
	if !ok {
		return Lease{}, memErr("note", current.Key, ErrLeaseNotFound)
	}
	if row.Owner == "" || row.Owner != current.Owner {
		return Lease{}, memErr("note", current.Key, errorf("%w: row has owner %q, expected %q", ErrLeaseHeld, row.Owner, current.Owner))
	}
	before := row
	row.Note = note
	m.wrote("note", before, row)
	return cloneLease(row), nil
}

// GetEventually implements NoteStore. A MemoryStore is always current: it
// returns what Get returns.
func (m *MemoryStore) GetEventually(ctx context.Context, key LeaseKey) (Lease, error) {
	return m.Get(ctx, key)
}

// WithdrawHandoff implements HandoffWithdrawer.
func (m *MemoryStore) WithdrawHandoff(ctx context.Context, key LeaseKey, taker string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, memErr("withdraw handoff", key, err)
	}
	if taker == "" {
		return false, memErr("withdraw handoff", key, errorf("%w: taker owner id is empty", ErrInvalidConfig))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[key]
	if !ok || row.HandoffTo != taker {
		return false, nil
	}
	before := row
	row.HandoffTo = ""
	m.wrote("withdraw handoff", before, row)
	return true, nil
}

// CreateAt implements LineageStore.
func (m *MemoryStore) CreateAt(ctx context.Context, key LeaseKey, parents []string, start Start) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, memErr("create", key, err)
	}
	if err := key.Validate(); err != nil {
		return false, memErr("create", key, err)
	}
	if err := start.validate(); err != nil {
		return false, memErr("create", key, err)
	}
	ps, err := normalParents(parents)
	if err != nil {
		return false, memErr("create", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[key]; ok {
		return false, nil
	}
	row := Lease{Key: key, SubSequence: -1, Parents: ps, Start: normalStart(start), incarnation: newRowIncarnation()}
	m.wrote("create", Lease{Key: key}, row)
	return true, nil
}

// SetLineage implements LineageStore.
func (m *MemoryStore) SetLineage(ctx context.Context, l Lease, parents []string, start Start) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("set lineage", l.Key, err)
	}
	if err := start.validate(); err != nil {
		return Lease{}, memErr("set lineage", l.Key, err)
	}
	ps, err := normalParents(parents)
	if err != nil {
		return Lease{}, memErr("set lineage", l.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[l.Key]
	if !ok {
		return Lease{}, memErr("set lineage", l.Key, ErrLeaseNotFound)
	}
	if row.Owner != "" || row.Checkpoint != "" || row.Counter != l.Counter {
		return Lease{}, memErr("set lineage", l.Key, errorf("%w: row has owner %q counter %d checkpoint %q; expected a free row at counter %d without a checkpoint", ErrLeaseHeld, row.Owner, row.Counter, row.Checkpoint, l.Counter))
	}
	before := row
	row.Parents = ps
	row.Start = normalStart(start)
	row.Counter++
	m.wrote("set lineage", before, row)
	return cloneLease(row), nil
}

// DeleteFinished implements LineageStore.
func (m *MemoryStore) DeleteFinished(ctx context.Context, l Lease) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, memErr("delete finished", l.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[l.Key]
	if !ok || row.Checkpoint != ShardEnd || row.Counter != l.Counter {
		return false, nil
	}
	delete(m.rows, l.Key)
	if m.hook != nil {
		m.hook("delete finished", cloneLease(row), Lease{Key: l.Key})
	}
	return true, nil
}

// Delete removes a row without any condition, as an operator editing the
// table by hand would. It reports whether the row existed.
func (m *MemoryStore) Delete(key LeaseKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.rows[key]
	delete(m.rows, key)
	return ok
}

// StreamIdentity implements IdentityStore.
func (m *MemoryStore) StreamIdentity(ctx context.Context, stream string) (StreamIdentity, error) {
	key := identityKey(stream)
	if err := ctx.Err(); err != nil {
		return StreamIdentity{}, memErr("get stream identity", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.identities[stream]
	if !ok {
		return StreamIdentity{}, memErr("get stream identity", key, ErrLeaseNotFound)
	}
	return id, nil
}

// RecordStreamIdentity implements IdentityStore.
func (m *MemoryStore) RecordStreamIdentity(ctx context.Context, id StreamIdentity) (StreamIdentity, bool, error) {
	key := identityKey(id.Stream)
	if err := ctx.Err(); err != nil {
		return StreamIdentity{}, false, memErr("record stream identity", key, err)
	}
	if err := validIdentity(id); err != nil {
		return StreamIdentity{}, false, memErr("record stream identity", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if have, ok := m.identities[id.Stream]; ok {
		m.raiseEpoch(id.Stream, epochOf(have))
		return have, false, nil
	}
	m.identities[id.Stream] = id
	m.raiseEpoch(id.Stream, epochOf(id))
	return id, true, nil
}

// ResetStream implements IdentityStore.
func (m *MemoryStore) ResetStream(ctx context.Context, id StreamIdentity) (int, error) {
	key := identityKey(id.Stream)
	if err := ctx.Err(); err != nil {
		return 0, memErr("reset stream", key, err)
	}
	if err := validIdentity(id); err != nil {
		return 0, memErr("reset stream", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k := range m.rows {
		if k.Stream == id.Stream {
			delete(m.rows, k)
			n++
		}
	}
	delete(m.workers, id.Stream)
	m.identities[id.Stream] = id
	m.raiseEpoch(id.Stream, epochOf(id))
	return n, nil
}

// DeleteStreamRows implements StreamRemover.
func (m *MemoryStore) DeleteStreamRows(ctx context.Context, stream string, stale map[string]int64) (deleted, held int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, memErr("delete stream rows", identityKey(stream), err)
	}
	if err := ValidateStreamName(stream); err != nil {
		return 0, 0, memErr("delete stream rows", identityKey(stream), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, row := range m.rows {
		switch {
		case k.Stream != stream:
		case row.Owner != "" && !hasCounter(stale, k.Shard, row.Counter):
			held++
		default:
			delete(m.rows, k)
			deleted++
		}
	}
	delete(m.workers, stream)
	if held == 0 {
		delete(m.identities, stream)
	}
	return deleted, held, nil
}

var _ HandoffWithdrawer = (*MemoryStore)(nil)

var _ Rewinder = (*MemoryStore)(nil)

// RewindRow implements Rewinder.
func (m *MemoryStore) RewindRow(ctx context.Context, held Lease, checkpoint string, start Start) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, memErr("rewind", held.Key, err)
	}
	if err := validRewind(checkpoint, start); err != nil {
		return Lease{}, memErr("rewind", held.Key, err)
	}
	start = normalStart(start)
	m.mu.Lock()
	defer m.mu.Unlock()
	row, err := m.holds("rewind", held)
	if err != nil {
		if own(row, held) && row.Owner == held.Owner && row.Checkpoint == checkpoint && row.SubSequence == -1 && sameStart(row.Start, start) {
			return cloneLease(row), nil // this very rewind, sent again
		}
		return Lease{}, err
	}
	before := row
	row.Counter++
	row.Checkpoint = checkpoint
	row.SubSequence = -1
	row.Start = start
	if d := HolderLeaseDuration(ctx); d > 0 && row.Session == "" {
		row.Duration = d // a kept row's duration is its session's
	}
	row.Lag = holderLag(ctx) // the counter moved: an earlier write's lag is no longer the row's
	m.wrote("rewind", before, row)
	return cloneLease(row), nil
}

// hasCounter reports whether counters names shard with counter.
func hasCounter(counters map[string]int64, shard string, counter int64) bool {
	c, ok := counters[shard]
	return ok && c == counter
}
