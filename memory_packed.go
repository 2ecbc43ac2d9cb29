package shardlease

// The MemoryStore's packed checkpoints (see lease_packed.go): the entries
// live on the worker row (memWorker.packed), and every listing, claim,
// fence and removal carries them as DynamoStore does.

import (
	"context"
	"maps"
	"slices"
)

var _ PackedCheckpointStore = (*MemoryStore)(nil)

// checkPacked checks the entries and the drops of a keep.
func checkPacked(put []PackedCheckpoint, drop []LeaseKey) error {
	for _, e := range put {
		if err := e.Key.Validate(); err != nil {
			return err
		}
		if err := validCheckpoint(e.Checkpoint, e.SubSequence); err != nil {
			return errorf("packed checkpoint of %s: %w", e.Key, err)
		}
	}
	for _, k := range drop {
		if err := k.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// packedAfter returns the entries before with put written and drop removed;
// before is not changed.
func packedAfter(before map[string]PackedCheckpoint, put []PackedCheckpoint, drop []LeaseKey) map[string]PackedCheckpoint {
	if len(put) == 0 && len(drop) == 0 {
		return before
	}
	after := maps.Clone(before)
	if after == nil {
		after = make(map[string]PackedCheckpoint, len(put))
	}
	for _, k := range drop {
		delete(after, k.String())
	}
	for _, e := range put {
		if e.Lag != nil {
			lag := *e.Lag
			e.Lag = &lag
		}
		after[e.Key.String()] = e
	}
	return after
}

// KeepPacked implements PackedCheckpointStore.
func (m *MemoryStore) KeepPacked(ctx context.Context, s Worker, put []PackedCheckpoint, drop []LeaseKey) (Worker, []string, error) {
	if err := checkSession(ctx, s); err != nil {
		return Worker{}, nil, memErr("keep session", workerKey(s), err)
	}
	if err := checkPacked(put, drop); err != nil {
		return Worker{}, nil, memErr("keep session", workerKey(s), err)
	}
	return m.keep(ctx, s, put, drop)
}

// ReadPacked implements PackedCheckpointStore.
func (m *MemoryStore) ReadPacked(ctx context.Context, stream, owner string) ([]PackedCheckpoint, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return nil, memErr("read packed checkpoints", workerKey(w), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row := m.workers[stream][owner]
	out := make([]PackedCheckpoint, 0, len(row.packed))
	for _, k := range slices.Sorted(maps.Keys(row.packed)) {
		out = append(out, row.packed[k])
	}
	return out, nil
}

// sessionRow returns the worker row a lease row names as its session, under
// the lock.
func (m *MemoryStore) sessionRow(l Lease) (Worker, memWorker, bool) {
	s, ok := l.KeptBy()
	if !ok {
		return Worker{}, memWorker{}, false
	}
	row, ok := m.workers[s.Stream][s.Owner]
	return s, row, ok
}

// carryPacked writes into row, a lease row about to be claimed, the entry
// its session row carries for it when the entry holds and is newer, and
// removes the entry from the session row (an ended row goes with its last
// entry); under the lock.
func (m *MemoryStore) carryPacked(row *Lease) {
	s, w, ok := m.sessionRow(*row)
	if !ok {
		return
	}
	if e, ok := carried(*row, w.packed); ok {
		row.Checkpoint, row.SubSequence = e.Checkpoint, e.SubSequence
	}
	if _, ok := w.packed[row.Key.String()]; !ok {
		return
	}
	before := w
	w.packed = packedAfter(w.packed, nil, []LeaseKey{row.Key})
	if w.ended && len(w.packed) == 0 {
		delete(m.workers[s.Stream], s.Owner)
		m.wroteWorker("settle session", s.Stream, s.Owner, before, true, memWorker{}, false)
		return
	}
	m.putWorker(s.Stream, s.Owner, w)
	m.wroteWorker("settle session", s.Stream, s.Owner, before, true, w, true)
}

// endWorker ends the session on owner's worker row of stream (a fence, or
// the removal of a row that stood still): the entries its lease rows no
// longer back are removed, and the row is deleted when none is left, else
// kept ended for the claims of its leases; under the lock.
func (m *MemoryStore) endWorker(op, stream, owner string, row memWorker) {
	key := workerKey(Worker{Stream: stream, Owner: owner}).String()
	after := row
	after.packed = maps.Clone(row.packed)
	for k, e := range row.packed {
		if l, ok := m.rows[e.Key]; !ok || !samePacked(l, key, e) {
			delete(after.packed, k)
		}
	}
	if len(after.packed) == 0 {
		delete(m.workers[stream], owner)
		m.wroteWorker(op, stream, owner, row, true, memWorker{}, false)
		return
	}
	after.ended, after.mail = true, nil
	m.putWorker(stream, owner, after)
	m.wroteWorker(op, stream, owner, row, true, after, true)
}

// samePacked reports whether lease row l still backs entry e of the session
// row whose key is session.
func samePacked(l Lease, session string, e PackedCheckpoint) bool {
	return l.Owner != "" && l.Session == session && l.Counter == e.Counter
}

// mergeLocked returns leases with the newest durable checkpoints
// (mergePacked), under the lock.
func (m *MemoryStore) mergeLocked(leases []Lease) []Lease {
	entries := make(map[string]map[string]PackedCheckpoint)
	for _, l := range leases {
		if _, done := entries[l.Session]; done || l.Session == "" {
			continue
		}
		if _, w, ok := m.sessionRow(l); ok && len(w.packed) > 0 {
			entries[l.Session] = w.packed
		}
	}
	return mergePacked(leases, entries)
}

// listedWorker reports whether a worker row is listed: an ended session's
// row is not (it reads as gone).
func listedWorker(row memWorker) bool { return !row.ended }
