package soak

// Rewinds with handover on the live fleet: an operator moves a stream's
// progress a few lease durations back (shardlease.Rewind with
// WithRewindHandover) while every worker reads it, a few times per run,
// never past a record not handled yet (a rewind moves a shard that has not
// reached its time forward, skipping records, by design). The
// leases are taken from their live holders: no two handlers of one shard
// may run at once (overlaps), no batch may be handed to a worker that no
// longer holds the lease, and the records that arrived at or after the time
// are handed again, which explains their duplicates. The rewind writes
// through the audit, as a holder's writes: its acquire begins a holding,
// and its rewind of the checkpoint is the one write that may move it back.

import (
	"context"
	"fmt"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// EvRewind is an operator's rewind with handover on the live fleet.
const EvRewind = "rewind with handover on the live fleet (a few leases back)"

// rewindAttempts bounds the runs of one rewind: a run that fails leaves the
// shards before the failure rewound, and the next run does the rest.
const rewindAttempts = 5

// rewound is one rewind, of stream to the time to, or one reset, of the
// stream's shard to just after the sequence number after; begun at began.
type rewound struct {
	stream string
	to     time.Time
	shard  string // a reset's; "" for a rewind
	after  string
	began  time.Time
}

// rewindEvents draws the run's rewinds over window: how far back each goes
// (d), and for a group which of the two streams read throughout (slot). In
// the emulator world they all come before the split (at a third of the
// window): kinesalite ignores ListShards' ShardFilter, so Rewind starts
// every shard, closed ones included, at AT_TIMESTAMP, and kinesalite never
// answers a GetShardIterator AT_TIMESTAMP past a shard's last record: the
// closed parent would never finish, and its children never start.
func (s *soak) rewindEvents(window time.Duration, n int) []event {
	within := window
	if s.cfg.Dynamo != nil {
		within = max(window/3-s.cfg.Lease, 2*s.cfg.Lease)
	}
	var evs []event
	for range max(2, n/4) {
		evs = append(evs, event{at: s.jitter(within), kind: EvRewind, slot: s.rng.IntN(2),
			d: s.cfg.Lease/2 + time.Duration(s.rng.Float64()*float64(5*s.cfg.Lease/2))})
	}
	return evs
}

// rewind rewinds ev's stream by ev.d with handover, running it again when a
// run fails (a holder wrote between its read and its acquire, a reshard),
// until ctx ends.
func (s *soak) rewind(ctx context.Context, ev event) {
	stream := s.cfg.Stream
	if s.grp != nil {
		stream = s.grp.streams[ev.slot]
	}
	s.mu.Lock()
	to := s.rewindTime(stream, time.Now().Add(-ev.d))
	s.rewinds = append(s.rewinds, rewound{stream: stream, to: to, began: time.Now()})
	s.mu.Unlock()
	for attempt := 1; attempt <= rewindAttempts; attempt++ {
		rep, err := shardlease.Rewind(ctx, s.rewindStore(), s.cfg.Kinesis, stream, to,
			shardlease.WithRewindHandover(), shardlease.WithRewindOwner(shardlease.NewOwnerIdentity("soak-rewind")))
		if err == nil {
			s.counts.add(EvRewind, 1)
			taken := 0
			for _, sh := range rep.Shards {
				if sh.TakenFrom != "" {
					taken++
				}
			}
			fmt.Fprintf(s.cfg.Events, "%6.1fs rewound %s by %v with handover: %d shards changed, %d taken from their holders\n",
				s.since(), stream, ev.d.Round(time.Millisecond), rep.Changed, taken)
			return
		}
		if !s.editFailed(ctx, "rewind", stream, attempt, err) {
			return
		}
	}
}

// editFailed counts and logs a failed run of an operator's edit (what:
// "rewind" or "reset") of target, and waits a quarter lease before the next;
// it reports false when ctx ended meanwhile.
func (s *soak) editFailed(ctx context.Context, what, target string, attempt int, err error) bool {
	s.counts.add(what+" run failed (run again)", 1)
	fmt.Fprintf(s.cfg.Events, "%6.1fs %s of %s failed (attempt %d): %v\n", s.since(), what, target, attempt, err)
	t := time.NewTimer(s.cfg.Lease / 4)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C:
		return true
	}
}

// rewindTime returns the time a rewind of stream goes back to: back, or
// earlier when a record of the stream put before it (less a lease, for
// the time between a put's arrival and its return) was not handled yet. A
// rewind moves a shard forward too, past the records up to the time, and
// the soak means to move every shard back only. s.mu is held.
func (s *soak) rewindTime(stream string, back time.Time) time.Time {
	for _, id := range s.produced { // in write order
		if s.streamOfID(id) == stream && len(s.handled[id]) == 0 {
			if at := s.putAt[id].Add(-s.cfg.Lease); at.Before(back) {
				back = at
			}
			break
		}
	}
	return later(back, s.start) // the stream was made before the start
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// operator is who the audit records an operator's writes by.
const operator = "operator"

// rewindStore returns the store an operator's command writes through: the
// table as it is, without faults, through the audit.
func (s *soak) rewindStore() shardlease.LeaseStore {
	if s.memory != nil {
		return &auditStore{LeaseStore: s.memory, WorkerStore: s.memory, a: s.audit, by: operator}
	}
	ds, err := shardlease.NewDynamoStore(&auditDynamo{DynamoDBAPI: s.cfg.Dynamo, a: s.audit, by: operator}, s.cfg.Table)
	if err != nil {
		panic(err) // the table name was validated by CreateTable
	}
	return ds
}

// RewindRow passes a rewind on to the MemoryStore, through the audit.
func (s *auditStore) RewindRow(ctx context.Context, held shardlease.Lease, checkpoint string, start shardlease.Start) (shardlease.Lease, error) {
	got, err := s.LeaseStore.(shardlease.Rewinder).RewindRow(ctx, held, checkpoint, start)
	s.done("rewind", held, true, got, err)
	return got, err
}

// rewoundAgain reports whether a rewind of stream begun before at went back
// to a time the record id arrived at or after, or a reset of its shard to
// a sequence number before it: handled again at at, by design. A second of
// slack covers an emulator that keeps arrival times to the second. s.mu is
// held.
func (s *soak) rewoundAgain(id, stream string, at time.Time) bool {
	put, ok := s.putAt[id]
	if !ok {
		return false
	}
	for _, rw := range s.rewinds {
		switch {
		case rw.stream != stream || !rw.began.Before(at):
		case rw.shard != "":
			if s.shardOfID[id] == rw.shard && seqnum.Compare(s.seqOf[id], rw.after) > 0 {
				return true
			}
		case !put.Before(rw.to.Add(-time.Second)):
			return true
		}
	}
	return false
}
