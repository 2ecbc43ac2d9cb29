package shardlease

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/shardlease/shardlease/internal/kinesisread"
	"go.opentelemetry.io/otel/attribute"
)

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

// wasRead reports whether a reader took l: it was taken or holds a
// checkpoint, which happens only once every parent is finished.
func wasRead(l Lease) bool { return l.Checkpoint != "" || l.Owner != "" }

// finishedByChildren reports whether a closed shard that has no row was
// evidently read to its end: one of its children has a row that was
// started. Such a row was deleted (by an operator, or by cleanup) and is not
// made again.
func finishedByChildren(id string, v shardView, rows map[string]Lease) bool {
	for _, child := range v.children[id] {
		if l, ok := rows[child]; ok && wasRead(l) {
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
func (sc *scheduler) syncShards(ctx context.Context) error {
	return sc.syncShardsWith(ctx, false)
}

// syncShardsRunning is syncShards while the worker runs: a row that cannot
// be decoded is left alone (an Error log and shardlease.rows.corrupt name
// it, see tolerateCorrupt) and the other shards get their rows. The shard
// of such a row is neither finished nor missing: its row is not made again,
// its children do not start because of it, and no row is cleaned up while
// it is there (it might be the only row naming a parent).
func (sc *scheduler) syncShardsRunning(ctx context.Context) error {
	return sc.syncShardsWith(ctx, true)
}

func (sc *scheduler) syncShardsWith(ctx context.Context, running bool) error {
	c := sc.c
	// The stream's identity is checked while the shards and rows are
	// listed (it costs a round trip or two), and before any row is made.
	identity := make(chan error, 1)
	go func() { identity <- sc.checkStreamIdentity(ctx, running) }()
	quiet := running && !sc.cd.listsNow()
	shards, existing, reused, err := sc.listBoth(ctx, running, quiet)
	if idErr := <-identity; idErr != nil {
		return idErr
	}
	if quiet && err == nil {
		// A worker that does not list (see coordinate.go) keeps its view of
		// the shards; the coordinator makes and cleans up rows.
		sc.listed = viewOf(shards).listed
		return nil
	}
	var corrupt map[string]bool
	switch {
	case reused:
		corrupt = sc.corrupt
	case running && sc.tolerateCorrupt(ctx, err):
		corrupt, err = sc.corrupt, nil
	}
	if err != nil {
		return err
	}
	view := viewOf(shards)
	sc.listed = view.listed
	rows := make(map[string]Lease, len(existing))
	for _, l := range existing {
		rows[l.Key.String()] = l
	}
	ls := c.caps.lineage
	firstSync := sc.firstSyncs(existing, corrupt)
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if _, ok := rows[id]; ok || corrupt[id] {
			continue
		}
		m := c.set.of(id)
		if m == nil {
			continue
		}
		if closed(s) && finishedByChildren(id, view, rows) {
			c.log.Debug("not re-creating the row of a finished shard: its children are being read", "lease", id)
			continue
		}
		key := keyOf(id)
		parents := shardsOf(shardParents(s))
		start := startFor(s, firstSync[m.name], m.cfg)
		created, err := createRow(ctx, c.store, ls, key, parents, start)
		if err != nil {
			return errorf("shardlease: stream %s: create lease for shard %s: %w", key.Stream, key.Shard, err)
		}
		if created {
			c.log.Info("lease created", "lease", id, "parents", parents, "start", start.String(), "counter", 0)
		}
	}
	if ls == nil {
		return nil
	}
	sc.fillLineage(ctx, ls, existing, view)
	if len(corrupt) == 0 {
		sc.cleanup(ctx, ls, existing, rows, view)
	}
	return nil
}

// listBoth lists the stream's shards and its rows. While the worker runs,
// the rows of its take round are reused when they are at most two take
// intervals old (reused is then set): every write the sync makes from them
// is conditional, as the take round's are. A quiet worker lists no rows.
func (sc *scheduler) listBoth(ctx context.Context, running, quiet bool) (shards []types.Shard, existing []Lease, reused bool, err error) {
	c := sc.c
	shards, err = sc.listMemberShards(ctx, running)
	if err != nil || quiet {
		return shards, nil, false, err
	}
	if running && sc.cd.ns != nil && sc.cd.recentAt.After(time.Now().Add(-2*c.cfg.takeInterval)) {
		return shards, sc.cd.recent, true, nil
	}
	existing, err = c.reader.rows(ctx)
	return shards, existing, false, err
}

// fillLineage records the parents Kinesis lists, and where to start, on
// rows made without them (rows imported from other libraries, or of an
// earlier release) while nobody has read them yet, so that they wait for
// their parents and start where a row made by shard sync would.
func (sc *scheduler) fillLineage(ctx context.Context, ls LineageStore, existing []Lease, v shardView) {
	c := sc.c
	for _, l := range existing {
		s, ok := v.listed[l.Key.String()]
		if !ok || l.Owner != "" || l.Checkpoint != "" {
			continue
		}
		parents := shardsOf(shardParents(s))
		slices.Sort(parents)
		if len(l.Parents) > 0 || len(parents) == 0 {
			continue
		}
		start := l.Start
		if start.IsZero() {
			cfg := c.cfg
			if m := c.set.of(l.Key.String()); m != nil {
				cfg = m.cfg
			}
			start = startFor(s, false, cfg)
		}
		got, err := ls.SetLineage(ctx, l, parents, start)
		switch {
		case err == nil:
			c.log.Info("parents recorded on a row made without them", "lease", l.Key.String(), "parents", parents, "start", start.String(), "counter", got.Counter)
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrLeaseNotFound):
			c.log.Debug("row moved before its parents were recorded", "lease", l.Key.String(), "err", err)
		default:
			c.log.Warn("recording the parents of a row failed; retrying at the next shard sync", "lease", l.Key.String(), "err", err)
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
	for _, p := range parentIDs(l) {
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
		if wasRead(c) && slices.Contains(parentIDs(c), parent) {
			return true
		}
	}
	return false
}

// boundedSync runs a shard sync within a lease duration: a hung call must
// not stall the coordinator's loop (and its take rounds) for longer.
func (sc *scheduler) boundedSync(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, sc.c.cfg.leaseDuration)
	defer cancel()
	return sc.syncShardsRunning(sctx)
}

// DescribeIdentity returns the identity of stream as Kinesis describes it
// now. A missing stream is a *StreamNotFoundError.
//
// stream may be the stream's ARN: the call then names it by StreamARN, and
// the identity by the name in the ARN.
func DescribeIdentity(ctx context.Context, d StreamDescriber, stream string) (StreamIdentity, error) {
	name, arn := kinesisread.Ref(stream)
	out, err := d.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: name, StreamARN: arn})
	if err != nil {
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) {
			return StreamIdentity{}, &StreamNotFoundError{Stream: stream, Err: err}
		}
		return StreamIdentity{}, errorf("shardlease: stream %s: describe stream summary: %w", stream, err)
	}
	if out.StreamDescriptionSummary == nil {
		return StreamIdentity{}, errorf("shardlease: stream %s: describe stream summary returned no description", stream)
	}
	sum := out.StreamDescriptionSummary
	if n, ok := streamNameOfARN(stream); ok {
		stream = n
	}
	return StreamIdentity{Stream: stream, ARN: aws.ToString(sum.StreamARN), Created: aws.ToTime(sum.StreamCreationTimestamp)}, nil
}

// checkStreamIdentity checks the identity of every stream in the set (see
// checkMemberIdentity), stopping at the first error. While a Group runs,
// only a re-created stream is an error: a check that fails otherwise is
// logged with the stream's name and made again at the next sync, while the
// other streams are read on.
func (sc *scheduler) checkStreamIdentity(ctx context.Context, running bool) error {
	for _, m := range sc.c.set.all() {
		err := sc.c.checkMemberIdentity(ctx, m)
		var re *StreamRecreatedError
		if err != nil && sc.c.set.grouped && running && !errors.As(err, &re) && ctx.Err() == nil {
			sc.c.log.Warn("checking a stream's identity failed; checking it again at the next shard sync", "stream", m.name, "err", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkMemberIdentity learns m's stream's identity and compares it with the
// one recorded in the store (recording it when none is) at the first call,
// and with the one seen first at later calls. A mismatch is a
// *StreamRecreatedError, which ends Run.
func (c *Consumer) checkMemberIdentity(ctx context.Context, m *member) error {
	log := c.log
	if c.set.grouped {
		log = log.With("stream", m.name)
	}
	if m.noIdentity {
		return nil
	}
	d := m.describer
	if d == nil {
		m.noIdentity = true
		log.Info("the Kinesis client has no DescribeStreamSummary: the stream's identity is not checked (a re-created stream is not detected)")
		return nil
	}
	now, err := DescribeIdentity(ctx, d, m.ref)
	if err != nil {
		var denied *types.AccessDeniedException
		if errors.As(err, &denied) {
			m.noIdentity = true
			log.Warn("not allowed to describe the stream: its identity is not checked (a re-created stream is not detected); allow kinesis:DescribeStreamSummary", "err", err)
			return nil
		}
		return err
	}
	if m.identity != nil {
		if !m.identity.Same(now) {
			return c.recreated(*m.identity, now)
		}
		return nil
	}
	is := c.caps.identity
	if is == nil {
		m.epoch.learn(now)
		m.identity = &now
		return nil
	}
	recorded, created, err := is.RecordStreamIdentity(ctx, now)
	if err != nil {
		return errorf("shardlease: stream %s: record the stream's identity: %w", m.name, err)
	}
	if !recorded.Same(now) {
		return c.recreated(recorded, now)
	}
	if created {
		log.Info("recorded the stream's identity", "arn", now.ARN, "created", now.Created)
	}
	m.epoch.learn(now)
	m.identity = &now
	return nil
}

func (c *Consumer) recreated(recorded, now StreamIdentity) error {
	e := &StreamRecreatedError{Recorded: recorded, Current: now, Table: c.caps.tableName}
	c.log.Error("stream re-created; not reading it", "err", e)
	return e
}

// cleanable reports whether the row of a finished shard can no longer
// matter, so that it may be deleted: it holds ShardEnd, Kinesis no longer
// lists the shard (its records aged out of the stream's retention), and
// every child (as Kinesis lists it, or as the rows name it) has a row with a
// checkpoint of its own. A child that has not checkpointed yet still looks
// at its parents before it starts reading, so their rows stay until then.
func cleanable(l Lease, v shardView, rows map[string]Lease) bool {
	if !l.Finished() {
		return false
	}
	id := l.Key.String()
	if _, listed := v.listed[id]; listed {
		return false
	}
	children := slices.Clone(v.children[id])
	for _, r := range rows {
		if slices.Contains(parentIDs(r), id) {
			children = append(children, r.Key.String())
		}
	}
	for _, child := range children {
		if r, ok := rows[child]; !ok || r.Checkpoint == "" {
			return false
		}
	}
	return true
}

// cleanup deletes the rows of finished shards that can no longer matter
// (see cleanable), each with a delete conditional on the counter seen, so
// that a row that moved since the listing stays. Every deletion is logged
// and counted (Stats.FinishedRowsDeleted). rows holds existing by shard.
func (sc *scheduler) cleanup(ctx context.Context, ls LineageStore, existing []Lease, rows map[string]Lease, v shardView) {
	c := sc.c
	for _, l := range existing {
		if !cleanable(l, v, rows) {
			continue
		}
		deleted, err := ls.DeleteFinished(ctx, l)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("deleting the row of a finished shard failed; retrying at the next shard sync", "lease", l.Key.String(), "err", err)
		case deleted:
			c.count(evRowCleaned, 1, c.set.attrs(l.Key.String())...)
			c.log.Info("deleted the row of a finished shard that Kinesis no longer lists", "lease", l.Key.String(), "counter", l.Counter)
		}
	}
}

// tolerateCorrupt reports whether err only says that some rows are corrupt,
// the listing being otherwise complete; then it logs each such row at Error
// (once per row and run) and counts it in shardlease.rows.corrupt, and the
// take round goes on without them.
//
// It sets sc.corrupt to the shards of the stream whose rows are corrupt in
// this listing (nil when it returns false).
func (sc *scheduler) tolerateCorrupt(ctx context.Context, err error) bool {
	sc.corrupt = nil
	var cre *CorruptRowsError
	if err == nil || ctx.Err() != nil || !errors.As(err, &cre) {
		return false
	}
	c := sc.c
	sc.corrupt = make(map[string]bool, len(cre.Rows))
	for _, r := range cre.Rows {
		if k := keyOf(r.Key); k.Shard != "" && c.set.has(k.Stream) {
			sc.corrupt[r.Key] = true
		}
	}
	if sc.corruptSeen == nil {
		sc.corruptSeen = make(map[string]bool)
	}
	for _, r := range cre.Rows {
		if sc.corruptSeen[r.Key] {
			continue
		}
		sc.corruptSeen[r.Key] = true
		c.log.Error("a row cannot be decoded; it is left alone while the others are balanced: fix it by hand or delete it", "row", r.Key, "err", r.Err)
		c.count(evRowCorrupt, 1, attribute.String("row", r.Key))
	}
	return true
}

// firstSyncs says, by stream, whether this is the first sync of the stream:
// none of its rows is listed (decoded or corrupt), so its shards all start
// at the initial position (see startFor). In a Group, a stream added while
// it runs has its first sync then.
func (sc *scheduler) firstSyncs(existing []Lease, corrupt map[string]bool) map[string]bool {
	set := sc.c.set
	first := make(map[string]bool)
	for _, m := range set.all() {
		first[m.name] = true
	}
	seen := func(id string) { delete(first, keyOf(id).Stream) }
	for _, l := range existing {
		seen(l.Key.String())
	}
	for id := range corrupt {
		seen(id)
	}
	return first
}

// listMemberShards lists the shards of every stream in the set, with their
// ids (and their parents') as the consumer names them: their rows' keys. While
// a Group runs, a stream whose listing fails (Kinesis does not know it, the
// role may no longer read it, the call keeps failing) is logged at Error
// with its name and keeps the shards its last listing showed, so that no
// row of it is made or cleaned up meanwhile, and the other streams are read
// on; at start, and for a Consumer, it is an error.
func (sc *scheduler) listMemberShards(ctx context.Context, running bool) ([]types.Shard, error) {
	c := sc.c
	set := c.set
	var out []types.Shard
	for _, m := range set.all() {
		shards, err := listShards(ctx, m.kin, m.ref, c.cfg)
		var nf *StreamNotFoundError
		if gone := errors.As(err, &nf); m.gone.Swap(gone) != gone && gone && set.grouped && running {
			// Nothing of it can be read: its readers let their leases go
			// (with their checkpoints), and none is taken until Kinesis
			// lists it again.
			sc.stopStreams(func(stream string) bool { return stream == m.name }, stopAsked, "stopping the shard of a stream Kinesis no longer has")
		}
		if err != nil && set.grouped && running && ctx.Err() == nil {
			c.log.Error("listing a stream's shards failed; its shards are read as last listed until a listing succeeds (remove it from the group if it is gone)", "stream", m.name, "err", err)
			for id, s := range sc.listed {
				if keyOf(id).Stream == m.name {
					out = append(out, s)
				}
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, s := range shards {
			s.ShardId = aws.String(LeaseKey{Stream: m.name, Shard: aws.ToString(s.ShardId)}.String())
			for _, p := range []**string{&s.ParentShardId, &s.AdjacentParentShardId} {
				if *p != nil && **p != "" {
					*p = aws.String(LeaseKey{Stream: m.name, Shard: **p}.String())
				}
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// shardsOf returns the shard ids of ids (the consumer's ids of one
// stream's shards), as a row names its parents.
func shardsOf(ids []string) []string {
	if ids == nil {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = keyOf(id).Shard
	}
	return out
}
