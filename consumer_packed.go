package shardlease

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardlease/shardlease/internal/session"
)

// A worker whose session keeps its leases, on a PackedCheckpointStore,
// carries their checkpoints in its session row (lease_packed.go): the
// checkpointPack is what its keeps write. Each runner of a lease the
// session keeps joins it with a view of its keeper (the holding's counter,
// the pending checkpoint, whether the lease row holds it), and leaves it
// when it stops. At every keep the session keeper asks the pack what to
// write (session.Diff of what the runners want and what landed before), and
// tells it when the keep landed. A runner writes its lease row only to
// flush a checkpoint that stood still for a lease duration (so that its
// entry leaves the session row: an idle lease costs nothing), for a
// handler's Flush, and for the final checkpoint of a release or a handoff.
//
// Lock order: the pack's mu, then the runner's keeper's mu (its view).

// maxPackedLeases bounds the leases a pack carries: DynamoDB items hold at
// most 400 KB, and every keep is billed on the whole row. The leases past
// it write their lease rows, as without a pack.
const maxPackedLeases = 1000

// packedView is what a runner's keeper shows the pack at a keep.
type packedView struct {
	counter  int64
	at       position
	rowHolds bool
	lag      *Lag
}

// packedLease is one lease in the pack.
type packedLease struct {
	key     LeaseKey
	view    func() packedView
	at      string    // the checkpoint last seen, as session.Want.At
	changed time.Time // when at last changed
}

// checkpointPack is one worker's packed checkpoints. The runners call join,
// leave and idle; the session keeper calls reset and batch (and the
// function batch returns) on its own goroutine. mu orders them.
type checkpointPack struct {
	store PackedCheckpointStore

	mu     sync.Mutex
	gen    int64                   // (mu) the session generation the pack writes in
	leases map[string]*packedLease // (mu) by lease row key
	sent   map[string]session.Sent // (mu) what landed in the row in gen, by lease row key
	now    func() time.Time        // the clock
}

func newCheckpointPack(store PackedCheckpointStore) *checkpointPack {
	return &checkpointPack{store: store, leases: map[string]*packedLease{}, sent: map[string]session.Sent{}, now: time.Now}
}

// atString is p as session.Want.At.
func atString(p position) string { return p.seq + "/" + strconv.FormatInt(p.sub, 10) }

// reset starts the pack over for a new session generation: the entries of
// the old one stay in the row for the claims of their leases.
func (p *checkpointPack) reset(gen int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen = gen
	clear(p.leases)
	clear(p.sent)
}

// join adds the lease key of session generation gen, shown by view; it
// reports false when the lease's checkpoints cannot ride the keeps (another
// generation, or the pack is full): its runner writes its lease row.
func (p *checkpointPack) join(key LeaseKey, gen int64, view func() packedView) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen || len(p.leases) >= maxPackedLeases {
		return false
	}
	p.leases[key.String()] = &packedLease{key: key, view: view, changed: p.now()}
	return true
}

// leave removes the lease key; its entry, if one landed, is removed at the
// next keep.
func (p *checkpointPack) leave(key LeaseKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.leases, key.String())
}

// idle reports whether the lease key's checkpoint landed in the row and has
// stood still for after: its runner then writes it to the lease row.
func (p *checkpointPack) idle(key LeaseKey, after time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.leases[key.String()]
	if !ok {
		return false
	}
	s, landed := p.sent[key.String()]
	return session.Idle(landed && s.At == l.at, l.changed, p.now(), after)
}

// batch returns what the keep of generation gen writes, and a function to
// call once it landed; nothing when gen is not the pack's.
func (p *checkpointPack) batch(gen int64) (put []PackedCheckpoint, drop []LeaseKey, landed func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return nil, nil, func() {}
	}
	now := p.now()
	want := make(map[string]session.Want, len(p.leases))
	views := make(map[string]packedView, len(p.leases))
	for k, l := range p.leases {
		v := l.view()
		w := packedWant(v)
		if w.At != l.at {
			l.at, l.changed = w.At, now
		}
		want[k] = w
		views[k] = v
	}
	putKeys, dropKeys := session.Diff(want, p.sent)
	slices.Sort(putKeys)
	slices.Sort(dropKeys)
	dropKeys = dropKeys[:min(len(dropKeys), maxPackedPerKeep)]
	putKeys = putKeys[:min(len(putKeys), maxPackedPerKeep-len(dropKeys))]
	for _, k := range putKeys {
		v := views[k]
		put = append(put, PackedCheckpoint{Key: p.leases[k].key, Counter: v.counter, Checkpoint: v.at.seq, SubSequence: v.at.sub, Lag: v.lag})
	}
	for _, k := range dropKeys {
		lk, _ := ParseLeaseKey(k)
		drop = append(drop, lk)
	}
	return put, drop, func() { p.landed(gen, put, want, dropKeys) }
}

// packedWant is what a lease shown by v wants of the session row: its
// checkpoint, and while records wait behind it (a checkpoint age) the lag
// too, which then changes at every keep: the entry stays in the row,
// carrying the age to listings (list -watch, the coordinator's lag) as a
// per-lease renewal carries it to the lease row, and is not flushed as
// idle. A lease caught up and idle wants nothing once its row holds its
// checkpoint. A lease with no checkpoint yet has no entry (the row's lag is
// written by its runner: lagToRow).
func packedWant(v packedView) session.Want {
	w := session.Want{Counter: v.counter, At: atString(v.at), RowHolds: v.rowHolds}
	if v.lag != nil && v.lag.CheckpointAge > 0 && v.at.seq != "" {
		w.At += "@" + strconv.FormatInt(int64(v.lag.CheckpointAge), 10)
		w.RowHolds = false
	}
	return w
}

// landed records that a keep of generation gen wrote put (as want showed
// it) and removed drop.
func (p *checkpointPack) landed(gen int64, put []PackedCheckpoint, want map[string]session.Want, drop []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return
	}
	for _, k := range drop {
		delete(p.sent, k)
	}
	for _, e := range put {
		k := e.Key.String()
		p.sent[k] = session.Sent{Counter: e.Counter, At: want[k].At}
	}
}
