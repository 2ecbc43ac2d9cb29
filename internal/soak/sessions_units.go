package soak

// The soak's write units: what the fleet's writes would cost on DynamoDB,
// billed as it bills them (a write costs a unit for each started KB of the
// larger of the item before and after). A lease row is well under a KB: a
// unit a write. A keep costs a unit for each started KB of its session row,
// which grows by each packed checkpoint it carries (packedUnits).

import (
	"context"
	"sync"

	"github.com/shardlease/shardlease"
)

// sessionRowBytes and packedEntryBytes size a session row as DynamoDB
// counts it: its key, generation, counter, lease duration and mail, and
// one packed checkpoint's name and value.
const (
	sessionRowBytes  = 160
	packedEntryBytes = 50
)

// packedUnits keeps, for each session row, the leases whose checkpoints it
// carries, and sums the units of the keeps made while metering.
type packedUnits struct {
	mu      sync.Mutex
	entries map[string]map[string]bool // by session row key, lease key
	units   int64
}

// kept records a keep of row that landed, carrying put and dropping drop;
// metered tells whether it counts.
func (p *packedUnits) kept(row string, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey, metered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil {
		p.entries = map[string]map[string]bool{}
	}
	e := p.entries[row]
	if e == nil {
		e = map[string]bool{}
		p.entries[row] = e
	}
	before := len(e)
	for _, c := range put {
		e[c.Key.String()] = true
	}
	for _, k := range drop {
		delete(e, k.String())
	}
	if metered {
		p.units += keepUnits(max(before, len(e)))
	}
}

// total returns the units of the keeps metered so far.
func (p *packedUnits) total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.units
}

// keepUnits is what a keep of a session row carrying n checkpoints costs.
func keepUnits(n int) int64 {
	return int64((sessionRowBytes + packedEntryBytes*n + 1023) / 1024)
}

// KeepPacked is KeepSession with checkpoints: counted and checked the
// same, and its units metered.
func (t *troubleStore) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	kept, mail, err := t.keep(w, func() (shardlease.Worker, []string, error) {
		return t.LeaseStore.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
	})
	if err == nil && t.s != nil {
		t.s.units.kept(w.Key(), put, drop, t.s.meter.on.Load())
	}
	return kept, mail, err
}

func (t *troubleStore) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return t.LeaseStore.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
}

func (s *faultStore) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	type kept struct {
		w    shardlease.Worker
		mail []string
	}
	got, err := storeCall(s.in, "UpdateItem", true, kept{}, func() (kept, error) {
		w, mail, err := s.next.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
		return kept{w, mail}, err
	})
	return got.w, got.mail, err
}

func (s *faultStore) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return storeCall(s.in, "GetItem", false, nil, func() ([]shardlease.PackedCheckpoint, error) {
		return s.next.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
	})
}

func (s *auditStore) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	return s.LeaseStore.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
}

func (s *auditStore) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return s.LeaseStore.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
}

var (
	_ shardlease.PackedCheckpointStore = (*troubleStore)(nil)
	_ shardlease.PackedCheckpointStore = (*faultStore)(nil)
	_ shardlease.PackedCheckpointStore = (*auditStore)(nil)
)
