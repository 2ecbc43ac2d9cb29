package soak

// Resets of one shard with handover on the live fleet: an operator moves a
// held shard's checkpoint back to a record handled a few lease durations
// ago (shardlease.ResetCheckpoint with WithResetHandover, as the CLI's
// reset -force), a few times per run. The lease is taken from its live
// holder: no two handlers of the shard may run at once, and the records
// after the checkpoint are handed again, which explains their duplicates.
// The reset writes through the audit, as the rewinds do; its checkpoint is
// a write that may move the row's checkpoint back.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shardlease/shardlease"
)

// EvReset is an operator's reset of one shard with handover on the live
// fleet.
const EvReset = "reset of one shard with handover on the live fleet (a few leases back)"

// resetEvents draws the run's resets over window: how far back each goes
// (d), and which held shard (slot, modulo the held shards of the stream).
func (s *soak) resetEvents(window time.Duration, n int) []event {
	var evs []event
	for range max(2, n/4) {
		evs = append(evs, event{at: s.jitter(window), kind: EvReset, slot: s.rng.IntN(1 << 16),
			d: s.cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(5*s.cfg.Lease/2))})
	}
	return evs
}

// reset resets one held shard of the stream (a group's first stream) by
// ev.d with handover, running it again when a run fails, until ctx ends. A
// shard none of whose records was handled long enough ago is left alone.
func (s *soak) reset(ctx context.Context, ev event) {
	stream := s.cfg.Stream
	if s.grp != nil {
		stream = s.grp.streams[0]
	}
	for attempt := 1; attempt <= rewindAttempts; attempt++ {
		key, cp, ok := s.resetTarget(ctx, stream, ev)
		if !ok {
			s.counts.add("reset skipped (no held shard with a record handled before the time)", 1)
			return
		}
		s.mu.Lock()
		s.rewinds = append(s.rewinds, rewound{stream: stream, shard: key.Shard, after: cp, began: time.Now()})
		s.mu.Unlock()
		rep, err := shardlease.ResetCheckpoint(ctx, s.rewindStore(), key, cp,
			shardlease.WithResetHandover(), shardlease.WithResetOwner(shardlease.NewOwnerIdentity("soak-reset")))
		if err == nil {
			s.counts.add(EvReset, 1)
			fmt.Fprintf(s.cfg.Events, "%6.1fs reset %s by %v with handover (taken from %q; consumers resume after %v)\n",
				s.since(), key, ev.d.Round(time.Millisecond), rep.TakenFrom, rep.ResumeAfter)
			return
		}
		if !s.editFailed(ctx, "reset", key.String(), attempt, err) {
			return
		}
	}
}

// resetTarget picks a held, unfinished shard of stream (ev.slot modulo
// their number, in shard order) and the checkpoint to reset it to: the
// sequence number of its last record put ev.d ago or earlier with every
// record of the shard up to it handled, so that the reset skips no record.
func (s *soak) resetTarget(ctx context.Context, stream string, ev event) (shardlease.LeaseKey, string, bool) {
	rows, err := s.memoryOrDynamo().List(ctx, stream)
	if err != nil {
		return shardlease.LeaseKey{}, "", false
	}
	rows = slices.DeleteFunc(rows, func(l shardlease.Lease) bool {
		return l.Owner == "" || l.Checkpoint == shardlease.ShardEnd || l.Checkpoint == ""
	})
	if len(rows) == 0 {
		return shardlease.LeaseKey{}, "", false
	}
	l := rows[ev.slot%len(rows)]
	back := time.Now().Add(-ev.d)
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := ""
	for _, id := range s.produced { // in write order
		if s.streamOfID(id) != stream || s.shardOfID[id] != l.Key.Shard {
			continue
		}
		if len(s.handled[id]) == 0 || s.putAt[id].After(back) {
			break
		}
		cp = s.seqOf[id]
	}
	return l.Key, cp, cp != ""
}
