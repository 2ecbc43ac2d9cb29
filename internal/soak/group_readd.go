package soak

// A stream removed from the group and added back once its rows were
// deleted: each worker's Group deletes a removed stream's rows once it has
// been out DeleteRemovedAfter (and the handoff window) and nobody reads it;
// the soak then adds it back to the source, read from TRIM_HORIZON. Its new
// rows count from wherever the table lets them, and the fenced sink still
// holds the tokens of its holdings before the removal: every new holding's
// token must compare above them, or the sink refuses the live holder. Every
// record of the stream is audited again (handled before the removal or
// after the re-add); a record handled on both sides is read again by
// design.

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/shardlease/shardlease"
)

// EvStreamReadded is the removed stream added back to the source once the
// groups deleted its rows.
const EvStreamReadded = "stream added back after its rows were deleted (DeleteRemovedAfter)"

// outSince returns when the removed stream left the source, or the zero
// time while it has not or once it was added back.
func (g *groupState) outSince() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.readdAt.IsZero() {
		return time.Time{}
	}
	return g.removeAt
}

// readdedAt returns when the removed stream was added back (zero: not).
func (g *groupState) readdedAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.readdAt
}

// readdOnceDeleted adds the removed stream back to the source, from
// TRIM_HORIZON, once the table holds none of its lease rows; it looks every
// source interval until ctx ends.
func (s *soak) readdOnceDeleted(ctx context.Context) {
	g := s.grp
	t := time.NewTicker(s.cfg.SourceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(s.cfg.Events, "%6.1fs the rows of %s were not deleted while the faults ran; not added back\n", s.since(), g.removed)
			return
		case <-t.C:
		}
		rows, err := s.memoryOrDynamo().List(ctx, g.removed)
		if err != nil || len(rows) > 0 {
			continue
		}
		g.mu.Lock()
		g.specs = append(g.specs, shardlease.StreamSpec{Name: g.removed, Position: shardlease.TrimHorizon})
		g.readdAt = time.Now()
		g.mu.Unlock()
		s.counts.add(EvStreamReadded, 1)
		fmt.Fprintf(s.cfg.Events, "%6.1fs the rows of %s are deleted; added it back to the source (from TRIM_HORIZON)\n", s.since(), g.removed)
		return
	}
}

// readAgain reports whether h, a further handling of a record of the
// removed stream, came once the stream was added back and the first one
// before: the stream is read from its start again, by design. s.mu is held.
func (s *soak) readAgain(first, h handling) bool {
	if s.grp == nil || h.stream != s.grp.removed {
		return false
	}
	at := s.grp.readdedAt()
	return !at.IsZero() && first.at.Before(at) && !h.at.Before(at) // at once under fake time
}

// DeleteStreamRows passes a Group's deletion of a removed stream's rows on
// to the store (shardlease.StreamRemover).
func (t *groupListStore) DeleteStreamRows(ctx context.Context, stream string, stale map[string]int64) (deleted, held int, err error) {
	return t.LeaseStore.(shardlease.StreamRemover).DeleteStreamRows(ctx, stream, stale)
}

// DeleteStreamRows passes the deletion on through the fake world's faults.
func (s *faultStore) DeleteStreamRows(ctx context.Context, stream string, stale map[string]int64) (deleted, held int, err error) {
	type counts struct{ deleted, held int }
	got, err := storeCall(s.in, "DeleteItem", true, counts{}, func() (counts, error) {
		d, h, err := s.next.(shardlease.StreamRemover).DeleteStreamRows(ctx, stream, stale)
		return counts{d, h}, err
	})
	return got.deleted, got.held, err
}

// DeleteStreamRows deletes through the MemoryStore and tells the audit
// which rows are gone: those listed before and not after.
func (s *auditStore) DeleteStreamRows(ctx context.Context, stream string, stale map[string]int64) (deleted, held int, err error) {
	before, lerr := s.LeaseStore.List(ctx, stream)
	deleted, held, err = s.LeaseStore.(shardlease.StreamRemover).DeleteStreamRows(ctx, stream, stale)
	if lerr != nil || err != nil && deleted == 0 {
		return deleted, held, err
	}
	after, _ := s.LeaseStore.List(ctx, stream)
	left := map[string]bool{}
	for _, l := range after {
		left[l.Key.String()] = true
	}
	for _, l := range before {
		if !left[l.Key.String()] {
			s.a.deleted(l.Key.String())
		}
	}
	return deleted, held, err
}

// DeleteItem tells the audit of a lease row deleted (a Group's deletion of
// a removed stream's rows): its next writes are of a new generation.
func (d *auditDynamo) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	out, err := d.DynamoDBAPI.DeleteItem(ctx, in, o...)
	if key := avString(in.Key["lease_key"]); err == nil && !isSpecialKey(key) {
		d.a.deleted(key)
	}
	return out, err
}
