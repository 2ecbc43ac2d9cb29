package shardlease

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Start is where a reader of a shard starts while the shard's row holds no
// checkpoint. It is decided once, when the row is made, and kept on the row,
// so that it does not depend on which other rows exist when the lease is
// taken (a parent's row may be gone by then).
type Start struct {
	// Position is TrimHorizon, Latest or AtTimestamp; empty on rows made
	// without a Start.
	Position InitialPosition
	// Timestamp is the AtTimestamp position; zero otherwise.
	Timestamp time.Time
}

// IsZero reports whether no start was recorded.
func (s Start) IsZero() bool { return s.Position == "" }

// String returns the position, with the timestamp for AtTimestamp.
func (s Start) String() string {
	if s.Position == AtTimestamp {
		return string(s.Position) + " " + s.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	return string(s.Position)
}

// validate checks a Start before a store writes it.
func (s Start) validate() error {
	switch s.Position {
	case "", TrimHorizon, Latest:
		if !s.Timestamp.IsZero() {
			return errorf("%w: start %s has a timestamp; only %s takes one", ErrInvalidConfig, s.Position, AtTimestamp)
		}
	case AtTimestamp:
		if s.Timestamp.IsZero() {
			return errorf("%w: start %s has no timestamp", ErrInvalidConfig, AtTimestamp)
		}
	default:
		return errorf("%w: start position %q is not %s, %s or %s", ErrInvalidConfig, s.Position, TrimHorizon, Latest, AtTimestamp)
	}
	return nil
}

// LineageStore is implemented by lease stores that keep where a shard starts
// on its row and can delete the rows of finished shards (both stores of this
// package do). The consumer uses it, when the store has it, to decide where
// a child shard starts when its row is made, to fill in the parents of rows
// made without them (imported or older rows), and to delete rows that can no
// longer matter. A store without it still works, but its table only grows,
// and a child whose parent row was deleted starts at the initial position.
type LineageStore interface {
	// CreateAt is Create that also records start on the new row. An
	// existing row is not changed (created=false, no error).
	CreateAt(ctx context.Context, key LeaseKey, parents []string, start Start) (created bool, err error)

	// SetLineage records parents and start on the row of l, a row nobody
	// has read yet: it succeeds only while the row is free, holds no
	// checkpoint and its counter still equals l.Counter, and bumps the
	// counter. Otherwise it fails with ErrLeaseHeld (ErrLeaseNotFound when
	// the row is gone).
	SetLineage(ctx context.Context, l Lease, parents []string, start Start) (Lease, error)

	// DeleteFinished deletes the row of l if its checkpoint is ShardEnd and
	// its counter still equals l.Counter. It reports whether it deleted the
	// row; a row that is gone, moved on or not finished is left alone and is
	// not an error.
	DeleteFinished(ctx context.Context, l Lease) (bool, error)
}

// shardView is what one ListShards pass told about the stream's shards.
type shardView struct {
	listed   map[string]types.Shard
	children map[string][]string // parent → listed children
}

func viewOf(shards []types.Shard) shardView {
	v := shardView{listed: make(map[string]types.Shard, len(shards)), children: map[string][]string{}}
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		v.listed[id] = s
		for _, p := range shardParents(s) {
			v.children[p] = append(v.children[p], id)
		}
	}
	return v
}

func shardParents(s types.Shard) []string {
	var parents []string
	for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
		if p != nil && *p != "" {
			parents = append(parents, *p)
		}
	}
	return parents
}

func closed(s types.Shard) bool {
	return s.SequenceNumberRange != nil && aws.ToString(s.SequenceNumberRange.EndingSequenceNumber) != ""
}

// startFor decides where a new row of s starts. On the first sync of a
// stream with no rows, every shard starts at the initial position (closed
// shards included, so that a closed ancestor does not pull its children back
// to TRIM_HORIZON). Later, a shard is new to this application: it starts at
// TRIM_HORIZON, unless it is open and has no parents (a shard whose row was
// deleted, or a stream whose rows were made in part), which starts at the
// initial position as before.
func startFor(s types.Shard, firstSync bool, cfg config) Start {
	initial := Start{Position: cfg.position}
	if cfg.position == AtTimestamp {
		initial.Timestamp = cfg.startTimestamp
	}
	if firstSync || !closed(s) && len(shardParents(s)) == 0 {
		return initial
	}
	return Start{Position: TrimHorizon}
}

// started reports whether a reader took l: it was taken or holds a
// checkpoint, which happens only once every parent is finished.
func started(l Lease) bool { return l.Checkpoint != "" || l.Owner != "" }

// finishedByChildren reports whether a closed shard that has no row was
// evidently read to its end: one of its children has a row that was
// started. Such a row was deleted (by an operator, or by cleanup) and is not
// made again.
func finishedByChildren(id string, v shardView, rows map[string]Lease) bool {
	for _, child := range v.children[id] {
		if l, ok := rows[child]; ok && started(l) {
			return true
		}
	}
	return false
}

// syncShards lists the stream's shards and creates a row for each one that
// has none, with its parents and where it starts; fills in the lineage of
// rows made without it; and deletes the rows of finished shards that can no
// longer matter (see cleanup). A row that cannot be decoded fails it: this
// is the start-up sync, and a worker does not start on a corrupt table.
func (co *coordinator) syncShards(ctx context.Context) error {
	return co.syncShardsWith(ctx, false)
}

// syncShardsRunning is syncShards while the worker runs: a row that cannot
// be decoded is left alone (an Error log and shardlease.rows.corrupt name
// it, see tolerateCorrupt) and the other shards get their rows. The shard
// of such a row is neither finished nor missing: its row is not made again,
// its children do not start because of it, and no row is cleaned up while
// it is there (it might be the only row naming a parent).
func (co *coordinator) syncShardsRunning(ctx context.Context) error {
	return co.syncShardsWith(ctx, true)
}

func (co *coordinator) syncShardsWith(ctx context.Context, running bool) error {
	c := co.c
	// The stream's identity is checked while the shards and rows are
	// listed (it costs a round trip or two), and before any row is made.
	identity := make(chan error, 1)
	go func() { identity <- co.checkIdentity(ctx) }()
	quiet := running && !co.listsNow()
	shards, existing, reused, err := co.listBoth(ctx, running, quiet)
	if idErr := <-identity; idErr != nil {
		return idErr
	}
	if quiet && err == nil {
		// A worker that does not list (see coordinate.go) keeps its view of
		// the shards; the coordinator makes and cleans up rows.
		co.listed = viewOf(shards).listed
		return nil
	}
	var corrupt map[string]bool
	switch {
	case reused:
		corrupt = co.corrupt
	case running && co.tolerateCorrupt(ctx, err):
		corrupt, err = co.corrupt, nil
	}
	if err != nil {
		return err
	}
	view := viewOf(shards)
	co.listed = view.listed
	rows := make(map[string]Lease, len(existing))
	for _, l := range existing {
		rows[l.Key.Shard] = l
	}
	ls, _ := c.store.(LineageStore)
	firstSync := len(existing) == 0 && len(corrupt) == 0
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if _, ok := rows[id]; ok || corrupt[id] {
			continue
		}
		if closed(s) && finishedByChildren(id, view, rows) {
			c.log.Debug("not re-creating the row of a finished shard: its children are being read", "shard", id)
			continue
		}
		parents := shardParents(s)
		key := LeaseKey{Stream: c.stream, Shard: id}
		var created bool
		var err error
		start := startFor(s, firstSync, c.cfg)
		if ls != nil {
			created, err = ls.CreateAt(ctx, key, parents, start)
		} else {
			created, err = c.store.Create(ctx, key, parents)
		}
		if err != nil {
			return errorf("shardlease: stream %s: create lease for shard %s: %w", c.stream, id, err)
		}
		if created {
			c.log.Info("lease created", "shard", id, "parents", parents, "start", start.String(), "counter", 0)
		}
	}
	if ls == nil {
		return nil
	}
	co.fillLineage(ctx, ls, existing, view)
	if len(corrupt) == 0 {
		co.cleanup(ctx, ls, existing, rows, view)
	}
	return nil
}

// listBoth lists the stream's shards and its rows. While the worker runs,
// the rows of its take round are reused when they are at most two take
// intervals old (reused is then set): every write the sync makes from them
// is conditional, as the take round's are. A quiet worker lists no rows.
func (co *coordinator) listBoth(ctx context.Context, running, quiet bool) (shards []types.Shard, existing []Lease, reused bool, err error) {
	c := co.c
	shards, err = listShards(ctx, c.kin, c.stream, c.cfg)
	if err != nil || quiet {
		return shards, nil, false, err
	}
	if running && co.cd.ns != nil && co.cd.recentAt.After(time.Now().Add(-2*c.cfg.takeInterval)) {
		return shards, co.cd.recent, true, nil
	}
	existing, err = c.store.List(ctx, c.stream)
	return shards, existing, false, err
}

// fillLineage records the parents Kinesis lists, and where to start, on
// rows made without them (rows imported from other libraries, or of an
// earlier release) while nobody has read them yet, so that they wait for
// their parents and start where a row made by shard sync would.
func (co *coordinator) fillLineage(ctx context.Context, ls LineageStore, existing []Lease, v shardView) {
	c := co.c
	for _, l := range existing {
		s, ok := v.listed[l.Key.Shard]
		if !ok || l.Owner != "" || l.Checkpoint != "" {
			continue
		}
		parents := shardParents(s)
		slices.Sort(parents)
		if len(l.Parents) > 0 || len(parents) == 0 {
			continue
		}
		start := l.Start
		if start.IsZero() {
			start = startFor(s, false, c.cfg)
		}
		got, err := ls.SetLineage(ctx, l, parents, start)
		switch {
		case err == nil:
			c.log.Info("parents recorded on a row made without them", "shard", l.Key.Shard, "parents", parents, "start", start.String(), "counter", got.Counter)
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrLeaseNotFound):
			c.log.Debug("row moved before its parents were recorded", "shard", l.Key.Shard, "err", err)
		default:
			c.log.Warn("recording the parents of a row failed; retrying at the next shard sync", "shard", l.Key.Shard, "err", err)
		}
	}
}

// parentsDone reports whether every parent of l is finished: its row holds
// ShardEnd, or it has no row and either Kinesis no longer lists it (its
// records aged out, and cleanup deleted its row once every child had
// started) or one of its children was started (its row was deleted by
// hand after it finished). A parent Kinesis still lists, without a row and
// without a started child, is not finished: shard sync makes its row again,
// and it is read first. A parent whose row cannot be decoded (corrupt) is
// not finished either, whatever Kinesis lists.
func parentsDone(l Lease, byShard map[string]Lease, listed map[string]types.Shard, corrupt map[string]bool) bool {
	for _, p := range l.Parents {
		if corrupt[p] {
			return false
		}
		if pl, ok := byShard[p]; ok {
			if pl.Checkpoint != ShardEnd {
				return false
			}
			continue
		}
		if _, isListed := listed[p]; isListed && !childStarted(p, byShard) {
			return false
		}
	}
	return true
}

// childStarted reports whether a row naming parent among its parents was
// started.
func childStarted(parent string, byShard map[string]Lease) bool {
	for _, c := range byShard {
		if started(c) && slices.Contains(c.Parents, parent) {
			return true
		}
	}
	return false
}

// startInput positions in at start.
func startInput(in *kinesis.GetShardIteratorInput, start Start) {
	in.ShardIteratorType = types.ShardIteratorType(start.Position)
	if start.Position == AtTimestamp {
		in.Timestamp = aws.Time(start.Timestamp)
	}
}

// start returns where the runner's row says a reader starts.
func (r *leaseRunner) start() Start {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease.Start
}
