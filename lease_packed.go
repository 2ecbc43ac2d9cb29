package shardlease

import (
	"context"

	"github.com/shardlease/shardlease/internal/session"
)

// Packed checkpoints: a worker whose session keeps its leases writes their
// checkpoints into its session row, with the keep it makes every renew
// interval anyway, instead of a conditional write of each lease row. So a
// worker's checkpoints cost one write a renew interval (a 1 KB write unit
// holds about ten of them), fenced with the session: a keep of a fenced or
// reopened generation fails, and none of its checkpoints land.
//
// An entry names the lease and the lease counter of the holding that wrote
// it (a lease row's counter moves at every write to it). It holds only while
// the lease row names the session at that counter; the lease row's own
// checkpoint holds otherwise. So the newest durable checkpoint of a lease is
// the entry when it holds and is newer, else the row's: every listing of a
// PackedCheckpointStore returns that one (mergePacked), and a claim of a
// lease of an ended session writes the entry into the lease row with the
// claim itself (the taker starts from it).
//
// A session that ends with entries (a fence, or a worker row removed after
// its worker stood still) leaves its row in an ended state rather than
// deleting it: no keep or mail of it succeeds, ReadSession reports it gone,
// listings leave it out, and its entries stay for the claims of its leases.
// A claim that carried an entry removes it, and the row goes with its last
// entry; entries the lease rows no longer back are removed when the row
// ends. A new session of the same owner id keeps the entries of earlier
// generations it finds until their leases are claimed.
//
// Entries of leases whose checkpoint stood still for a lease duration are
// written to their lease rows once (an ordinary Checkpoint) and removed from
// the session row at the next keep; handoffs and releases write the final
// checkpoint to the lease row as before. So the session row holds only
// busy leases' entries, and an idle lease costs nothing.

// PackedCheckpoint is a checkpoint a session row carries for a lease it
// keeps.
type PackedCheckpoint struct {
	// Key is the lease's.
	Key LeaseKey
	// Counter is the lease row's counter as the holder's handle showed it
	// when it packed the checkpoint: the entry holds only while the row
	// still has this counter and names the session.
	Counter int64
	// Checkpoint and SubSequence are as in Lease.
	Checkpoint  string
	SubSequence int64
	// Lag is the holder's lag when it packed the checkpoint; nil when none.
	Lag *Lag
}

// PackedCheckpointStore is implemented by session stores that carry the
// checkpoints of a session's leases in its row (both stores of this package
// do; shardleasetest.RunStoreConformance checks the contract). A worker
// with sessions on uses it when its store has it; without it, every
// checkpoint of a lease a session keeps is a conditional write of the
// lease row, paced by the checkpoint interval.
//
// A store that has it also carries entries wherever it reads or takes a
// lease: its listings return the newest durable checkpoint of each lease
// (the entry, when it holds and is newer than the row's), and Acquire and
// AcquireInSession of a lease whose row names a session that carries a
// holding entry write the entry's checkpoint into the lease row with the
// claim. FenceSession and WorkerStore.RemoveWorker of a row with entries
// end it instead of deleting it (see the design note above).
type PackedCheckpointStore interface {
	SessionStore

	// KeepPacked is KeepSession that also writes put into s's row (each
	// replacing the entry of its lease) and removes the entries of drop,
	// in the same conditional write: a keep refused lands none of them.
	// Entries of leases in neither are left as they are.
	KeepPacked(ctx context.Context, s Worker, put []PackedCheckpoint, drop []LeaseKey) (kept Worker, mail []string, err error)

	// ReadPacked returns the entries of owner's worker row of stream, read
	// consistently, whatever generation wrote them and whether or not the
	// session ended, ordered by lease key; none when the row is gone.
	ReadPacked(ctx context.Context, stream, owner string) ([]PackedCheckpoint, error)
}

// mergePacked returns leases with each checkpoint replaced by the entry
// that packs a newer one, when the entry holds (session.Valid): entries
// holds the entries of the session rows read, by session row key and lease
// key. It is the one place a listing turns lease rows and session rows into
// the newest durable checkpoints; leases is changed in place.
func mergePacked(leases []Lease, entries map[string]map[string]PackedCheckpoint) []Lease {
	if len(entries) == 0 {
		return leases
	}
	for i := range leases {
		l := &leases[i]
		e, ok := entries[l.Session][l.Key.String()]
		if !ok || !session.Valid(l.Session, l.Counter, l.Session, e.Counter) {
			continue
		}
		at := position{e.Checkpoint, e.SubSequence}
		if at.compare(position{l.Checkpoint, l.SubSequence}) > 0 {
			l.Checkpoint, l.SubSequence = e.Checkpoint, e.SubSequence
		}
		if e.Lag != nil {
			lag := *e.Lag
			l.Lag = &lag
		}
	}
	return leases
}

// carried returns the entry a claim of l carries into the lease row: the
// one of entries (l's session row's, by lease key) that holds for l and
// packs a newer checkpoint than the row's.
func carried(l Lease, entries map[string]PackedCheckpoint) (PackedCheckpoint, bool) {
	e, ok := entries[l.Key.String()]
	if !ok || l.Owner == "" || !session.Valid(l.Session, l.Counter, l.Session, e.Counter) {
		return PackedCheckpoint{}, false
	}
	if (position{e.Checkpoint, e.SubSequence}).compare(position{l.Checkpoint, l.SubSequence}) <= 0 {
		return PackedCheckpoint{}, false
	}
	return e, true
}
