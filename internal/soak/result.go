package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardlease/shardlease"
)

// Result is what a soak found: what was injected, and each invariant with
// its figure.
type Result struct {
	World                      string
	Mode                       string // "polling" or "fan-out"
	Subscriptions              int64  // SubscribeToShard calls that succeeded (fan-out)
	Seed                       uint64
	Workers, Shards            int
	Duration, Lease            time.Duration
	Elapsed                    time.Duration
	Injected                   map[string]int64 // by kind
	MaxSkewSeen                time.Duration    // largest wall-clock skew seen in written expiries
	Produced, Handled, Handing int              // records produced, distinct handled, handlings
	DeadLettered               int              // of Handled, records handed to the dead-letter callback
	BadDeadLetter              int              // records dead-lettered that the handler did not fail on
	Lost                       int
	Duplicates                 int
	DupCrash, DupPause         int
	DupLostLease, DupProducer  int
	DupUnexplained             int
	WritesAudited              int // renew/checkpoint/release writes checked
	StaleAccepted              int // of those, made under a handle that did not hold the row
	StaleRefused               int // writes refused by the condition (stale or repeated)
	Regressions                int // checkpoints that moved backwards
	NonHolder                  int // batches handed to a worker not holding the lease
	ToolHeld                   int // left out: by the holder an operator's tool took the row from, before its cut-off
	Overlaps                   int // handler calls entered while another of the shard ran
	DeafOverlaps               int // of those left out, one side ignored its context
	FrozenOverlaps             int // left out: the other side's worker was frozen (a pause)
	DupDeaf                    int // duplicates after a handler that ignored its context
	DupLanes                   int // duplicates above the watermark of a worker with lanes
	DupRewind                  int // duplicates read again after a rewind or a reset to before them
	DupReadded                 int // duplicates read again once their stream was added back, its rows deleted
	Keys, KeysOutOfOrder       int
	HeldAtEnd                  int // leases still held after every worker stopped
	BuffersAtEnd               int // workers whose readers still hold records once Run returned
	StalledAtRest              int // held shards showing lag once the fleet drained
	RunErrors                  int // Run returned an error for a worker that was not crashed
	Unknown                    int // handled records never produced
	AppliedTwice               int // effects the fenced sink holds more than once
	StaleSinkAccepted          int // sink writes accepted below a token, or after a later holding's write, accepted before
	LiveRefused                int // sink refusals of a write by the latest holding of its shard (the table's order)
	SinkMissing                int // records handled whose effect is not in the sink
	SinkRefused, SinkSkipped   int // writes the sink refused for their token; records it passed over as applied
	Drained                    bool
	// Group is set for a group soak (Config.Group): Streams holds each
	// stream's figures, the other figures are the totals over them.
	Group          bool
	SourceInterval time.Duration
	Streams        []StreamResult
	// Mixed holds each stream's liveness figures in a mixed soak
	// (Config.Mixed; mixed_watch.go).
	Mixed []MixedStream
	// UntakenMax is the longest any lease stayed free or expired while a
	// worker with room was alive (UntakenLease); UntakenBound its bound.
	UntakenMax, UntakenBound time.Duration
	UntakenLease             string
	// Sessions is set for a soak with sessions (Config.Sessions);
	// StaleSessionAccepted counts writes a store accepted from a holder
	// sent after its session was fenced, of SessionsFenced sessions; ZoneMax
	// is the longest a lost zone's lease stayed held by no live worker
	// while only the zone was out (ZoneLease), ZoneBound its bound, and
	// ZoneStacked the longest with other faults on top.
	Sessions             bool
	StaleSessionAccepted int
	SessionsFenced       int
	FencedByTakers       int
	ZoneMax, ZoneStacked time.Duration
	ZoneBound            time.Duration
	ZoneLease            string
	ZonesMeasured        int
	KeepsPerWorkerMinute float64 // successful keeps a worker-minute
	WritesPerLeaseMinute float64 // lease-row writes a held-lease-minute
	// WriteUnitsPerLeaseMinute is the write units of the lease-row writes
	// and the keeps a held-lease-minute, as DynamoDB bills them
	// (sessions_units.go).
	WriteUnitsPerLeaseMinute float64
	// Crashed counts the incarnations that crashed; DupCrashBound bounds
	// DupCrash: each crash hands again at most what two renew intervals
	// of the stream's traffic hold (the checkpoints its keeps or its
	// checkpoint writes had not yet made durable).
	Crashed, DupCrashBound int
	Problems               []string
}

// OK reports whether every invariant held.
func (r *Result) OK() bool { return len(r.Problems) == 0 }

func (s *soak) result(ctx context.Context, drained bool) *Result {
	cfg := s.cfg
	r := &Result{World: cfg.World(), Mode: cfg.mode(), Seed: cfg.Seed, Workers: cfg.Workers, Shards: cfg.Shards, Duration: cfg.Duration,
		Lease: cfg.Lease, Elapsed: time.Since(s.start), Injected: s.counts.snapshot(), Drained: drained}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	s.audit.mu.Lock()
	r.MaxSkewSeen = s.audit.maxSkew
	for _, n := range s.audit.refused {
		r.StaleRefused += int(n)
	}
	s.audit.mu.Unlock()

	checked, stale, ex := s.audit.fencing(cfg.Dynamo == nil)
	r.WritesAudited, r.StaleAccepted = checked, stale
	for _, e := range ex {
		problem("stale write accepted: %s", e)
	}
	s.sessionsResult(r, problem)
	n, ex := s.audit.regressions()
	r.Regressions = n
	for _, e := range ex {
		problem("checkpoint moved backwards: %s", e)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinkResult(ctx, r, problem)
	r.Produced = len(s.produced)
	r.Unknown = s.unknown
	for _, inc := range s.all {
		r.Subscriptions += inc.consumer.Stats().Subscriptions
	}
	r.NonHolder, r.ToolHeld = len(s.nonHolder), s.toolHeld
	r.Overlaps, r.DeafOverlaps, r.FrozenOverlaps = len(s.overlaps), s.deafOverlaps, s.frozenOverlaps
	for i, e := range s.overlaps {
		if i < 5 {
			problem("two handlers of one shard at once: %s", e)
		}
	}
	for i, e := range s.nonHolder {
		if i < 5 {
			problem("batch handed after the lease was lost: %s", e)
		}
	}
	s.recordAudit(r, s.produced, problem)
	s.crashDuplicates(r, problem)

	r.BadDeadLetter = len(s.badDead)
	for i, e := range s.badDead {
		if i < 5 {
			problem("dead-lettered a record the handler did not fail on: %s", e)
		}
	}
	for _, inc := range s.all {
		// Handlers deaf to their context are injected: Run says it
		// abandoned them, as it must.
		if inc.runErr != nil && !inc.crashed.Load() && !errors.Is(inc.runErr, shardlease.ErrHandlerAbandoned) {
			r.RunErrors++
			problem("worker %s: Run returned %v", inc.id, inc.runErr)
		}
	}
	s.buffersResult(r, problem)
	s.heldAtEnd(ctx, r, problem)
	r.StalledAtRest = s.stallProblems(problem)
	if !drained && r.Lost == 0 {
		problem("drain did not finish")
	}
	s.untakenResult(r)
	return r
}

// heldAtEnd checks that every lease was released by the graceful stop at
// the end.
func (s *soak) heldAtEnd(ctx context.Context, r *Result, problem func(string, ...any)) {
	ls, err := s.memoryOrDynamo().List(ctx, s.cfg.Stream)
	if err != nil {
		problem("listing the leases at the end: %v", err)
		return
	}
	for _, l := range ls {
		if l.Owner != "" {
			r.HeldAtEnd++
			problem("lease %s still held by %s after every worker stopped", l.Key, l.Owner)
		}
	}
}

// recordAudit fills in the figures of the records ids (produced, and
// required to be handled): lost, handled, duplicates and their
// explanations, and partition-key order. s.mu is held.
func (s *soak) recordAudit(r *Result, ids []string, problem func(string, ...any)) {
	audited := make(map[string]bool, len(ids))
	for _, id := range ids {
		audited[id] = true
	}
	var lost []string
	for _, id := range ids {
		hs := s.handled[id]
		if len(hs) == 0 {
			lost = append(lost, id)
			continue
		}
		r.Handled++
		r.Handing += len(hs)
		if slices.ContainsFunc(hs, func(h handling) bool { return h.dead }) {
			r.DeadLettered++
		}
		if len(hs) == 1 {
			continue
		}
		s.explainDuplicates(r, id, hs, problem)
	}
	r.Lost = len(lost)
	if r.Lost > 0 {
		byShard := map[string]int{}
		for _, id := range lost {
			byShard[s.shardOfID[id]]++
		}
		problem("%d records never handled, e.g. %v; by shard %v", r.Lost, lost[:min(5, len(lost))], byShard)
	}

	// Per partition key, first handlings follow write order.
	written := map[string][]string{}
	for _, id := range ids {
		written[s.keyOf[id]] = append(written[s.keyOf[id]], id)
	}
	r.Keys = len(written)
	for key, want := range written {
		var got, handled []string
		for _, id := range s.keyOrder[key] {
			if audited[id] {
				got = append(got, id)
			}
		}
		for _, id := range want {
			if len(s.handled[id]) > 0 { // lost records are reported above
				handled = append(handled, id)
			}
		}
		if !slices.Equal(got, handled) {
			r.KeysOutOfOrder++
			if r.KeysOutOfOrder <= 5 {
				problem("partition key %s handled out of write order", key)
			}
		}
	}

}

// explainDuplicates counts the further handlings hs[1:] of the record id
// by what explains each, or as unexplained. s.mu is held.
func (s *soak) explainDuplicates(r *Result, id string, hs []handling, problem func(string, ...any)) {
	// Each further handling must be explained by a rewind, the stream
	// added back, or the first handler's crash, pause or lost lease before
	// it checkpointed past the record.
	// Handlings are recorded as they end: the first is the one entered
	// first (a crashed worker's call may return after its successor's).
	hs = slices.SortedStableFunc(slices.Values(hs), func(a, b handling) int { return a.at.Compare(b.at) })
	first := hs[0]
	for _, h := range hs[1:] {
		r.Duplicates++
		first.by.mu.Lock()
		troubled := first.by.troubled[first.stream+":"+first.shard]
		first.by.mu.Unlock()
		switch {
		case s.rewoundAgain(id, h.stream, h.at):
			r.DupRewind++ // an operator moved the stream back before it
		case s.readAgain(first, h):
			r.DupReadded++ // its stream was added back, its rows deleted
		case h.afterPause || first.afterPause:
			r.DupPause++ // a frozen worker went on with its batch in hand
		case first.deaf || h.deaf:
			r.DupDeaf++ // abandoned: no checkpoint for its batch (the deaf call may end last)
		case s.audit.checkpointedPast(first.stream+":"+first.shard, first.by.consumer.OwnerID(), first.seq, h.at):
			r.DupUnexplained++
			if r.DupUnexplained <= 5 {
				problem("duplicate of %s: first handled by %s on %s at %v, which checkpointed past it before %s handled it again on %s at %v",
					id, first.by.id, first.shard, first.at.Sub(s.start), h.by.id, h.shard, h.at.Sub(s.start))
			}
		case first.by.crashed.Load():
			r.DupCrash++
		case first.by.paused.Load():
			r.DupPause++
		case troubled:
			r.DupLostLease++
		case s.retried[id]:
			r.DupProducer++
		case withLanes(first.by.slot):
			r.DupLanes++ // handled above its lanes' watermark when it stopped
		default:
			r.DupUnexplained++
			if r.DupUnexplained <= 5 {
				problem("duplicate of %s: first handled by %s on %s at %v, again by %s on %s at %v; the first neither crashed, paused nor lost the lease",
					id, first.by.id, first.shard, first.at.Sub(s.start), h.by.id, h.shard, h.at.Sub(s.start))
			}
		}
	}
}

// buffersResult checks that a reader holds nothing once Run has returned,
// slow batches, deaf handlers and crashes included. s.mu is held.
func (s *soak) buffersResult(r *Result, problem func(string, ...any)) {
	for _, inc := range s.all {
		if inc.consumer == nil {
			continue
		}
		if st := inc.consumer.Stats(); st.RecordsBuffered != 0 || st.BytesBuffered != 0 {
			r.BuffersAtEnd++
			problem("worker %s: its readers hold %d records (%d bytes) after Run returned", inc.id, st.RecordsBuffered, st.BytesBuffered)
		}
	}
}

// faultsTable prints the faults injected, by kind, of Table.
func (r *Result) faultsTable(b *strings.Builder) {
	fmt.Fprintf(b, "\n%-58s %8s\n", "faults injected", "count")
	var total int64
	for _, k := range slices.Sorted(maps.Keys(r.Injected)) {
		fmt.Fprintf(b, "  %-56s %8d\n", k, r.Injected[k])
		total += r.Injected[k]
	}
	fmt.Fprintf(b, "  %-56s %8s\n", "wall-clock skew between workers (max seen in expiries)", r.MaxSkewSeen.Round(time.Second))
	fmt.Fprintf(b, "  %-56s %8d\n", "total", total)
}

// sinkRows prints the fenced sink's rows of Table.
func (r *Result) sinkRows(row func(name string, v any, verdict string), ok func(bool) string) {
	row("fenced sink: effects applied twice", r.AppliedTwice, ok(r.AppliedTwice == 0))
	row("  stale sink writes accepted (token below one accepted)", r.StaleSinkAccepted, ok(r.StaleSinkAccepted == 0))
	row("  live holder refused (latest holding of the shard)", r.LiveRefused, ok(r.LiveRefused == 0))
	row("  records handled whose effect is missing", r.SinkMissing, ok(r.SinkMissing == 0))
	row("  writes refused for their token (a newer holder wrote)", r.SinkRefused, "")
	row("  records passed over as applied already", r.SinkSkipped, "")
}

// Table prints the faults injected and each invariant with its figure.
func (r *Result) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: world=%s mode=%s seed=%d workers=%d shards=%d duration=%v lease=%v elapsed=%v\n",
		r.World, r.Mode, r.Seed, r.Workers, r.Shards, r.Duration, r.Lease, r.Elapsed.Round(time.Millisecond))
	if r.Group {
		fmt.Fprintf(&b, "group: %d streams, polled source every %v (shards= is per stream)\n", len(r.Streams), r.SourceInterval)
	}
	r.faultsTable(&b)
	ok := func(good bool) string {
		if good {
			return "ok"
		}
		return "FAIL"
	}
	r.streamsTable(&b, ok)
	r.mixedTable(&b, ok)
	title := "invariant"
	if r.Group {
		title = "invariant (all streams)"
	}
	fmt.Fprintf(&b, "\n%-58s %8s\n", title, "figure")
	row := func(name string, v any, verdict string) { fmt.Fprintf(&b, "  %-56s %8v  %s\n", name, v, verdict) }
	if r.Mode == "fan-out" {
		row("subscriptions made (SubscribeToShard)", r.Subscriptions, "")
	}
	row("records produced", r.Produced, "")
	if r.Group {
		audited := 0
		for _, st := range r.Streams {
			audited += st.Audited
		}
		row("records audited (to be handled)", audited, "")
	}
	row("records handled (distinct)", r.Handled, "")
	row("  of which dead-lettered (poison, after every attempt)", r.DeadLettered, "")
	row("  dead-lettered although not poison", r.BadDeadLetter, ok(r.BadDeadLetter == 0))
	row("lost (produced, never handled)", r.Lost, ok(r.Lost == 0))
	row("duplicates (handled more than once)", r.Duplicates, "")
	row("  explained: first handler crashed before checkpointing", r.DupCrash, "")
	row("  explained: first handler paused past its lease", r.DupPause, "")
	row("  explained: first handler lost the lease (failed write)", r.DupLostLease, "")
	row("  explained: producer retried the put", r.DupProducer, "")
	row("  explained: first handler ignored its context (abandoned)", r.DupDeaf, "")
	row("  explained: above the lanes' watermark at a stop", r.DupLanes, "")
	row("  explained: read again after a rewind or reset to before it", r.DupRewind, "")
	if r.Group {
		row("  explained: read again, its stream added back (rows deleted)", r.DupReadded, "")
	}
	row("  unexplained", r.DupUnexplained, ok(r.DupUnexplained == 0))
	row("checkpoints moved backwards", r.Regressions, ok(r.Regressions == 0))
	row("holder writes audited (renew, checkpoint, release)", r.WritesAudited, "")
	row("  accepted from a worker not holding the lease", r.StaleAccepted, ok(r.StaleAccepted == 0))
	row("  refused by the fencing condition", r.StaleRefused, "")
	row("batches handed to a worker not holding the lease", r.NonHolder, ok(r.NonHolder == 0))
	row("  left out: by the holder a tool took it from, before its cut-off", r.ToolHeld, "")
	row("overlaps: handlers of one shard running at once", r.Overlaps, ok(r.Overlaps == 0))
	row("  left out: one of them ignored its context", r.DeafOverlaps, "")
	row("  left out: the earlier one's worker was frozen (a pause)", r.FrozenOverlaps, "")
	row(fmt.Sprintf("partition keys out of order (of %d)", r.Keys), r.KeysOutOfOrder, ok(r.KeysOutOfOrder == 0))
	row("leases still held after the graceful stop", r.HeldAtEnd, ok(r.HeldAtEnd == 0))
	row("workers whose readers hold records after Run returned", r.BuffersAtEnd, ok(r.BuffersAtEnd == 0))
	row("held shards showing lag once drained (Status, rows)", r.StalledAtRest, ok(r.StalledAtRest == 0))
	r.sinkRows(row, ok)
	row("Run errors of live workers", r.RunErrors, ok(r.RunErrors == 0))
	row(fmt.Sprintf("untaken max: a lease free or expired, a worker with room (bound %v)", r.UntakenBound), r.UntakenMax.Round(10*time.Millisecond), ok(r.UntakenMax <= r.UntakenBound))
	r.sessionRows(row, ok)
	if r.Unknown > 0 {
		row("handled records never produced (failed puts that landed)", r.Unknown, "")
	}
	r.summary(&b, ok)
	return b.String()
}

// summary writes the table's last lines: the summary, per stream and per
// kind of worker when there are several, and the result with its
// problems.
func (r *Result) summary(b *strings.Builder, ok func(bool) string) {
	fmt.Fprintf(b, "\nsummary: produced %d, lost %d, overlaps %d, untaken max %v (bound %v), effects applied twice %d, stale sink writes accepted %d, live holder refused %d%s\n", r.Produced, r.Lost, r.Overlaps,
		r.UntakenMax.Round(10*time.Millisecond), r.UntakenBound, r.AppliedTwice, r.StaleSinkAccepted, r.LiveRefused, r.sessionSummary())
	r.streamsSummary(b)
	r.mixedSummary(b)
	fmt.Fprintf(b, "\nresult: %s", ok(r.OK()))
	if !r.OK() {
		for _, p := range r.Problems {
			fmt.Fprintf(b, "\n  - %s", p)
		}
	}
	b.WriteString("\n")
}
