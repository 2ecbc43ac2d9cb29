package shardlease

// This file moves a stream's progress to a time (Rewind), for replaying
// after an outage or a bad deploy.
//
// Where each shard goes is decided from the stream alone, with two
// ListShards calls filtered by the time: FROM_TIMESTAMP lists the shards
// not closed before it, AT_TIMESTAMP the shards open at it. A shard closed
// before the time has no record at or after it, so it is marked finished
// (ShardEnd) and its children may start at once; a shard opened after the
// time holds only records after it, so it is read from its first record; a
// shard open at the time is read from its first record at or after it
// (AT_TIMESTAMP). So nothing before the time is read again and nothing
// after it is skipped. A Kinesis that ignores the filter lists every shard
// both times: every shard then starts AT_TIMESTAMP, which reads the same
// records, only reading each closed parent to its end first.
//
// Every row is changed by the fenced edit of lease_edit.go: acquire on the
// counter read, RewindRow, then release, or, for a row taken from a live
// holder, leave it held for the holder's lease duration. Rows are changed
// in shard id order, which puts every parent before its children, so a
// child released with its new start waits for its parent's new progress. A
// row a worker holds is refused before anything is written, unless the
// caller asked to take the leases from their holders (WithRewindHandover),
// as a forced reset does.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// RewindAction is where Rewind moves one shard (RewindShard.Action).
type RewindAction string

// Rewind actions reported in RewindShard.Action.
const (
	// RewindFinished: the shard closed before the time; its row is marked
	// ShardEnd, so that its children start.
	RewindFinished RewindAction = "finished"
	// RewindFromStart: the shard opened after the time; it is read from
	// its first record (TRIM_HORIZON).
	RewindFromStart RewindAction = "from start"
	// RewindAtTime: the shard was open at the time; it is read from its
	// first record at or after the time (AT_TIMESTAMP).
	RewindAtTime RewindAction = "at time"
	// RewindNotListed: the stream no longer lists the shard (it closed and
	// aged out of the retention); its row is left as it is.
	RewindNotListed RewindAction = "not listed"
)

// RewindShard is what Rewind did, or would do in a dry run, with one shard.
type RewindShard struct {
	// Shard is the shard id.
	Shard string
	// Parents are the shard's parents as the stream lists them.
	Parents []string
	// Action says where the shard goes.
	Action RewindAction
	// Owner, Checkpoint, SubSequence and Start are the row as it was: as
	// Rewind acquired it, or as listed for a row not written. Owner is
	// empty for a free row.
	Owner       string
	Checkpoint  string
	SubSequence int64
	Start       Start
	// To is where a reader starts once the row has no checkpoint; the zero
	// Start with RewindFinished and RewindNotListed.
	To Start
	// Changed reports that the row is written (in a dry run: would be);
	// false when it is where the time puts it already.
	Changed bool
	// Created reports that the shard had no row, and one was (would be)
	// made.
	Created bool
	// TakenFrom is the holder the lease was taken from (WithRewindHandover).
	// Such a row is left held by Rewind's identity, so that consumers take
	// it only once the holder has stopped (see ResumeAfter).
	TakenFrom string
	// ResumeAfter is, with TakenFrom, how long the row must stand still
	// before a consumer takes it: the holder's lease duration as its row
	// carried it, or zero when it carried none (the consumers' own lease
	// duration then applies).
	ResumeAfter time.Duration
}

// RewindReport is the outcome of one Rewind: one entry per shard the stream
// lists and per row of a shard it no longer lists, in shard id order.
type RewindReport struct {
	Table   string    // the lease table, when the store has one
	Stream  string    // the stream rewound
	To      time.Time // the time, to the millisecond
	DryRun  bool      // nothing was written
	Shards  []RewindShard
	Changed int // entries with Changed
}

// RewindOption configures Rewind.
type RewindOption func(*rewindConfig)

type rewindConfig struct {
	dryRun   bool
	handover bool
	owner    string
}

// WithRewindDryRun makes Rewind report what it would change, and write
// nothing.
func WithRewindDryRun() RewindOption { return func(c *rewindConfig) { c.dryRun = true } }

// WithRewindHandover lets Rewind take leases from the workers holding them,
// instead of refusing. A holder's next renewal or checkpoint then fails
// with ErrLeaseLost and it stops reading the shard; a batch it was handling
// may be handed to a handler again (at-least-once), as after a forced
// reset. A rewound row taken from a holder is left held by Rewind's
// identity: consumers take it as any expired lease, once it has stood still
// for the holder's lease duration (RewindShard.ResumeAfter), when the
// holder has stopped, so that no two handlers run on one shard.
func WithRewindHandover() RewindOption { return func(c *rewindConfig) { c.handover = true } }

// WithRewindOwner sets the identity Rewind's writes carry (see
// NewOwnerIdentity). The default is a fresh identity of owner
// "shardlease-rewind".
func WithRewindOwner(identity string) RewindOption {
	return func(c *rewindConfig) { c.owner = identity }
}

// Rewind moves the progress of every shard of stream to the time to, so
// that consumers read again every record that arrived at or after it, and
// none before it. kin is a Kinesis client of the stream's account and
// region: it lists the shards, filtered by the time (see the design note in
// lease_rewind.go). A shard closed before the time is marked finished; a
// shard opened after it starts from its first record; a shard open at it
// starts at AT_TIMESTAMP to. Rows the stream lists but the table lacks are
// made; rows of shards the stream no longer lists are left as they are.
//
// Rewind moves a shard forward as well as back: a shard whose consumers
// had not reached the time skips the records up to it. The store must
// implement Rewinder (both stores of this package do); otherwise Rewind
// fails with ErrInvalidConfig before it writes anything.
//
// While workers hold leases that would change, Rewind writes nothing and
// fails with an error matching ErrLeaseHeld that names them; stop the
// consumers first, or pass WithRewindHandover. With WithRewindDryRun it
// writes nothing and returns the report, and that error too when the real
// run would refuse. An error while writing leaves the shards before it
// rewound, and a new run does the rest: a shard at the time already is not
// written again.
func Rewind(ctx context.Context, store LeaseStore, kin KinesisAPI, stream string, to time.Time, opts ...RewindOption) (*RewindReport, error) {
	cfg := rewindConfig{owner: NewOwnerIdentity("shardlease-rewind")}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	run, err := newRewindRun(store, kin, stream, to, cfg)
	if err != nil {
		return nil, err
	}
	if err := run.plan(ctx); err != nil {
		return nil, err
	}
	if err := run.refuseHeld(); err != nil || cfg.dryRun {
		return run.rep, err
	}
	return run.rep, run.carryOut(ctx)
}

// rewindRun is one Rewind once its arguments are checked. One goroutine,
// Rewind's, uses it.
type rewindRun struct {
	store    LeaseStore
	rewinder Rewinder
	kin      KinesisAPI
	cfg      rewindConfig
	table    string       // for errors; "" when the store has none
	lineage  LineageStore // nil when the store keeps no lineage
	rep      *RewindReport
	rows     map[string]Lease // the stream's rows as listed, by shard id
	edit     leaseEdit
}

// newRewindRun checks Rewind's arguments.
func newRewindRun(store LeaseStore, kin KinesisAPI, stream string, to time.Time, cfg rewindConfig) (*rewindRun, error) {
	switch {
	case isNil(store):
		return nil, errorf("%w: rewind: lease store is nil", ErrInvalidConfig)
	case isNil(kin):
		return nil, errorf("%w: rewind: Kinesis client is nil; pass kinesis.NewFromConfig(cfg) for the stream's account and region", ErrInvalidConfig)
	case cfg.owner == "":
		return nil, errorf("%w: rewind: owner identity is empty", ErrInvalidConfig)
	}
	if err := ValidateStreamName(stream); err != nil {
		return nil, errorf("shardlease: rewind: %w", err)
	}
	run := &rewindRun{store: store, kin: kin, cfg: cfg, edit: leaseEdit{store: store, owner: cfg.owner, handover: cfg.handover}}
	caps := resolveCaps(store)
	run.table, run.lineage = caps.tableName, caps.lineage
	where := run.where(stream)
	if to.IsZero() || to.After(time.Now()) {
		return nil, errorf("%w: rewind %s: the time %s is zero or in the future; pass a time in the past, within the stream's retention", ErrInvalidConfig, where, to.UTC().Format(time.RFC3339Nano))
	}
	rw := caps.rewinder
	if rw == nil {
		return nil, errorf("%w: rewind %s: the lease store (%T) cannot clear a checkpoint (it does not implement shardlease.Rewinder); use a DynamoStore or MemoryStore", ErrInvalidConfig, where, store)
	}
	run.rewinder = rw
	run.rep = &RewindReport{Table: run.table, Stream: stream, To: time.UnixMilli(to.UnixMilli()), DryRun: cfg.dryRun}
	return run, nil
}

// where names the stream, and the table when there is one, for errors.
func (run *rewindRun) where(stream string) string { return tableAndStream(run.table, stream) }

// plan lists the stream's shards and rows and fills the report with where
// each shard goes.
func (run *rewindRun) plan(ctx context.Context) error {
	stream, to := run.rep.Stream, run.rep.To
	listed, err := listShards(ctx, run.kin, stream, toolListing)
	if err != nil {
		return errorf("shardlease: rewind %s: %w", run.where(stream), err)
	}
	notClosed, err := listShardIDs(ctx, run.kin, stream, kinesistypes.ShardFilterTypeFromTimestamp, to)
	if err != nil {
		return errorf("shardlease: rewind %s: %w", run.where(stream), err)
	}
	openAt, err := listShardIDs(ctx, run.kin, stream, kinesistypes.ShardFilterTypeAtTimestamp, to)
	if err != nil {
		return errorf("shardlease: rewind %s: %w", run.where(stream), err)
	}
	rows, err := run.store.List(ctx, stream)
	if err != nil {
		return errorf("shardlease: rewind %s: list the rows: %w", run.where(stream), err)
	}
	run.rows = make(map[string]Lease, len(rows))
	for _, l := range rows {
		run.rows[l.Key.Shard] = l
	}
	run.rep.Shards = rewindPlan(listed, notClosed, openAt, run.rows, to)
	for _, s := range run.rep.Shards {
		if s.Changed {
			run.rep.Changed++
		}
	}
	return nil
}

// rewindPlan decides where each shard goes (see the design note): one
// entry per listed shard and per row of an unlisted one, by shard id.
func rewindPlan(listed []kinesistypes.Shard, notClosed, openAt map[string]bool, rows map[string]Lease, to time.Time) []RewindShard {
	var out []RewindShard
	seen := map[string]bool{}
	for _, sh := range listed {
		id := aws.ToString(sh.ShardId)
		seen[id] = true
		parents := shardParents(sh)
		slices.Sort(parents)
		e := RewindShard{Shard: id, Parents: parents, Action: RewindAtTime, To: Start{Position: AtTimestamp, Timestamp: to}}
		switch {
		case !notClosed[id] && closed(sh): // an open shard is never finished
			e.Action, e.To = RewindFinished, Start{}
		case !openAt[id]:
			e.Action, e.To = RewindFromStart, Start{Position: TrimHorizon}
		}
		row, ok := rows[id]
		e.Created = !ok
		e.fill(row)
		e.Changed = !ok || !e.there()
		out = append(out, e)
	}
	for id, row := range rows {
		if !seen[id] {
			e := RewindShard{Shard: id, Parents: row.Parents, Action: RewindNotListed}
			e.fill(row)
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b RewindShard) int { return strings.Compare(a.Shard, b.Shard) })
	return out
}

// fill records row as the shard's row was.
func (e *RewindShard) fill(row Lease) {
	e.Owner, e.Checkpoint, e.SubSequence, e.Start = row.Owner, row.Checkpoint, row.SubSequence, row.Start
	if row.Key.Shard == "" {
		e.SubSequence = -1
	}
}

// checkpoint is the checkpoint the rewound row gets: ShardEnd or none.
func (e *RewindShard) checkpoint() string {
	if e.Action == RewindFinished {
		return ShardEnd
	}
	return ""
}

// there reports whether the row as recorded in e is where the time puts
// it already.
func (e *RewindShard) there() bool {
	if e.Action == RewindFinished {
		return e.Checkpoint == ShardEnd
	}
	return e.Checkpoint == "" && sameStart(e.Start, e.To)
}

// refuseHeld returns an error matching ErrLeaseHeld naming the held rows
// that would change, unless the run takes them from their holders.
func (run *rewindRun) refuseHeld() error {
	if run.cfg.handover {
		return nil
	}
	var held []string
	for _, e := range run.rep.Shards {
		if e.Changed && e.Owner != "" {
			held = append(held, fmt.Sprintf("%s by %s", e.Shard, OwnerName(e.Owner)))
		}
	}
	if len(held) == 0 {
		return nil
	}
	stream := run.rep.Stream
	return errorf("shardlease: rewind %s: nothing was changed: %w: %d shards are held by running workers (%s); stop the consumers of stream %s and run the rewind again once their leases are free, or take the leases from them with WithRewindHandover (the CLI's -handover), which hands the batches they were handling to a handler again",
		run.where(stream), ErrLeaseHeld, len(held), strings.Join(firstOf(held, 5), ", "), stream)
}

// carryOut writes the rows that change, in shard id order.
func (run *rewindRun) carryOut(ctx context.Context) error {
	done := 0
	for i := range run.rep.Shards {
		e := &run.rep.Shards[i]
		if !e.Changed {
			continue
		}
		if err := run.rewindShard(ctx, e); err != nil {
			key := LeaseKey{Stream: run.rep.Stream, Shard: e.Shard}
			return errorf("shardlease: rewind %s, shard %s: %w (%d of %d shards rewound; run the rewind again to do the rest)",
				run.where(run.rep.Stream), key.Shard, err, done, run.rep.Changed)
		}
		done++
	}
	return nil
}

// rewindShard makes e's row if it is missing, and rewinds it with the
// fenced edit (see lease_edit.go): a row taken from its holder is left held
// for the holder's lease duration.
func (run *rewindRun) rewindShard(ctx context.Context, e *RewindShard) error {
	key := LeaseKey{Stream: run.rep.Stream, Shard: e.Shard}
	if e.Created {
		if err := run.create(ctx, key, e.Parents); err != nil {
			return err
		}
	}
	h, err := run.edit.take(ctx, key, run.rows[key.Shard])
	switch {
	case errors.Is(err, ErrLeaseHeld) && !run.edit.handover:
		return errorf("taken by a worker while the rewind ran; stop the consumers of stream %s, or pass WithRewindHandover (the CLI's -handover): %w", key.Stream, err)
	case err != nil:
		return errorf("take the lease: %w", err)
	}
	e.TakenFrom, e.ResumeAfter = h.read.Owner, h.resumeAfter()
	// The row as acquired is the one replaced.
	e.Checkpoint, e.SubSequence, e.Start = h.lease.Checkpoint, h.lease.SubSequence, h.lease.Start
	_, err = run.edit.finish(ctx, h, "rewind the row", func(ctx context.Context, held Lease) (Lease, error) {
		return run.rewinder.RewindRow(ctx, held, e.checkpoint(), e.To)
	})
	return err
}

// create makes key's missing row, with parents.
func (run *rewindRun) create(ctx context.Context, key LeaseKey, parents []string) error {
	if _, err := createRow(ctx, run.store, run.lineage, key, parents, Start{}); err != nil {
		return errorf("create the row: %w", err)
	}
	return nil
}

// listShardIDs returns the ids of the shards of stream that ListShards
// lists with the filter of type typ at time at.
func listShardIDs(ctx context.Context, kin KinesisAPI, stream string, typ kinesistypes.ShardFilterType, at time.Time) (map[string]bool, error) {
	shards, err := listShardsFiltered(ctx, kin, stream, &kinesistypes.ShardFilter{Type: typ, Timestamp: aws.Time(at)}, toolListing)
	if err != nil {
		return nil, errorf("shards %s %s: %w", typ, at.UTC().Format(time.RFC3339Nano), err)
	}
	ids := make(map[string]bool, len(shards))
	for _, sh := range shards {
		ids[aws.ToString(sh.ShardId)] = true
	}
	return ids, nil
}
