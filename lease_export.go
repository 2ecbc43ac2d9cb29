package shardlease

// This file saves a stream's progress as a document and puts it back:
// Export reads a stream's rows into Checkpoints, ReadCheckpoints reads the
// JSON form, and ImportCheckpoints writes it into a lease table, of any
// account or region, after Import's checks against the stream. The format
// is shardlease's own, a public type a program may also build or read, so
// it lives here and not among the other libraries' layouts in
// internal/foreign; its shards become foreign rows to pass the same checks.
//
// ImportCheckpoints writes with the fenced edit of lease_edit.go on every
// store: acquire on the counter listed, write, release. By default it only fills
// rows without progress, as Import does; with WithImportOverwrite it puts a
// row back to the exported progress whatever it holds, which is how an
// operator returns a stream to an earlier state.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardlease/shardlease/internal/foreign"
)

// CheckpointsFormat is the value of Checkpoints.Format: it tells an export
// from any other JSON document.
const CheckpointsFormat = "shardlease-checkpoints"

// CheckpointsVersion is the version of the export format that Export
// writes and ReadCheckpoints reads. A later version that a reader cannot
// read is refused, never guessed at.
const CheckpointsVersion = 1

// ImportShardleaseJSON is the format of an export (Checkpoints), as the
// command line's import -format names it. Import does not read it from a
// table: pass the document to ImportCheckpoints.
const ImportShardleaseJSON ImportFormat = "shardlease-json"

// Checkpoints is a stream's progress as Export saves it, in its JSON form:
//
//	{"format": "shardlease-checkpoints", "version": 1, "stream": "orders",
//	 "table": "orders-leases", "exported": "2026-01-02T15:04:05Z",
//	 "stream_arn": "arn:aws:kinesis:...", "stream_created": "...",
//	 "shards": [{"shard": "shardId-000000000000", "checkpoint": "4959...",
//	             "sub_sequence": -1, "parents": [...], "start": "AT_TIMESTAMP",
//	             "start_time": "..."}]}
//
// Owners, counters and expiries are not saved: they belong to the table.
type Checkpoints struct {
	// Format is CheckpointsFormat.
	Format string `json:"format"`
	// Version is CheckpointsVersion.
	Version int `json:"version"`
	// Stream is the stream the progress is of.
	Stream string `json:"stream"`
	// Table is the lease table exported; empty for a store without one.
	Table string `json:"table,omitempty"`
	// Exported is when the export was made.
	Exported time.Time `json:"exported"`
	// StreamARN and StreamCreated are the stream's identity as the table
	// recorded it (see IdentityStore); empty when none was recorded.
	StreamARN     string    `json:"stream_arn,omitempty"`
	StreamCreated time.Time `json:"stream_created,omitzero"`
	// Shards are the stream's rows, by shard id.
	Shards []ShardCheckpoint `json:"shards"`
}

// ShardCheckpoint is one shard's progress in an export.
type ShardCheckpoint struct {
	// Shard is the shard id.
	Shard string `json:"shard"`
	// Checkpoint is a sequence number, ShardEnd, or empty for none.
	Checkpoint string `json:"checkpoint,omitempty"`
	// SubSequence is the sub-sequence inside an aggregate, or -1 for a
	// whole record; a document without it means -1.
	SubSequence int64 `json:"sub_sequence"`
	// Parents are the shard's parents.
	Parents []string `json:"parents,omitempty"`
	// Start and StartTime are where a reader starts while the row has no
	// checkpoint (Lease.Start); empty when the row records none.
	Start     InitialPosition `json:"start,omitempty"`
	StartTime time.Time       `json:"start_time,omitzero"`
}

// UnmarshalJSON reads a shard, with a sub-sequence of -1 when the document
// has none.
func (s *ShardCheckpoint) UnmarshalJSON(b []byte) error {
	type plain ShardCheckpoint
	p := plain{SubSequence: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = ShardCheckpoint(p)
	return nil
}

// start is where the shard's reader starts without a checkpoint.
func (s ShardCheckpoint) start() Start {
	return Start{Position: s.Start, Timestamp: s.StartTime}
}

// Export reads the progress of every shard of stream from store: the
// checkpoint, sub-sequence, parents and recorded start of each row, and
// the stream's identity when the store records one. It writes nothing.
func Export(ctx context.Context, store LeaseStore, stream string) (*Checkpoints, error) {
	if isNil(store) {
		return nil, errorf("%w: export: lease store is nil", ErrInvalidConfig)
	}
	if err := ValidateStreamName(stream); err != nil {
		return nil, errorf("shardlease: export: %w", err)
	}
	caps := resolveCaps(store)
	cps := &Checkpoints{Format: CheckpointsFormat, Version: CheckpointsVersion, Stream: stream, Table: caps.tableName, Exported: time.Now().UTC(), Shards: []ShardCheckpoint{}}
	where := tableAndStream(cps.Table, stream)
	rows, err := store.List(ctx, stream)
	if err != nil {
		return nil, errorf("shardlease: export %s: list the rows: %w", where, err)
	}
	for _, l := range rows {
		sc := ShardCheckpoint{Shard: l.Key.Shard, Checkpoint: l.Checkpoint, SubSequence: l.SubSequence, Parents: l.Parents, Start: l.Start.Position, StartTime: l.Start.Timestamp}
		if !sc.StartTime.IsZero() {
			sc.StartTime = sc.StartTime.UTC()
		}
		cps.Shards = append(cps.Shards, sc)
	}
	if caps.identity != nil {
		id, err := caps.identity.StreamIdentity(ctx, stream)
		switch {
		case err == nil:
			cps.StreamARN, cps.StreamCreated = id.ARN, id.Created.UTC()
		case !errors.Is(err, ErrLeaseNotFound):
			return nil, errorf("shardlease: export %s: read the stream's identity: %w", where, err)
		}
	}
	return cps, nil
}

// ReadCheckpoints reads an export in its JSON form and checks it (see
// Checkpoints.Validate).
func ReadCheckpoints(r io.Reader) (*Checkpoints, error) {
	var cps Checkpoints
	dec := json.NewDecoder(r)
	if err := dec.Decode(&cps); err != nil {
		return nil, errorf("%w: read checkpoints: not a shardlease export (JSON with format %q): %w", ErrInvalidConfig, CheckpointsFormat, err)
	}
	if err := cps.Validate(); err != nil {
		return nil, err
	}
	return &cps, nil
}

// Validate checks an export before it is imported: its format and
// version, the stream name, and each shard's id, checkpoint, parents and
// start; a shard listed twice is refused. Its errors match
// ErrInvalidConfig or ErrInvalidName.
func (c *Checkpoints) Validate() error {
	switch {
	case c.Format != CheckpointsFormat:
		return errorf("%w: checkpoints: format is %q, want %q: this is not a shardlease export", ErrInvalidConfig, c.Format, CheckpointsFormat)
	case c.Version != CheckpointsVersion:
		return errorf("%w: checkpoints: version %d; this release reads version %d: import it with the release that exported it, or a later one", ErrInvalidConfig, c.Version, CheckpointsVersion)
	}
	if err := ValidateStreamName(c.Stream); err != nil {
		return errorf("shardlease: checkpoints: %w", err)
	}
	seen := map[string]bool{}
	for _, s := range c.Shards {
		if err := s.validate(); err != nil {
			return errorf("shardlease: checkpoints of stream %s, shard %q: %w", c.Stream, s.Shard, err)
		}
		if seen[s.Shard] {
			return errorf("%w: checkpoints of stream %s: shard %s is listed twice; keep one", ErrInvalidConfig, c.Stream, s.Shard)
		}
		seen[s.Shard] = true
	}
	return nil
}

// validate checks one shard of an export.
func (s ShardCheckpoint) validate() error {
	if err := ValidateShardID(s.Shard); err != nil {
		return err
	}
	if s.Checkpoint != "" {
		if err := validCheckpoint(s.Checkpoint, s.SubSequence); err != nil {
			return err
		}
	} else if s.SubSequence != -1 {
		return errorf("%w: sub-sequence %d without a checkpoint", ErrInvalidConfig, s.SubSequence)
	}
	if _, err := normalParents(s.Parents); err != nil {
		return err
	}
	return s.start().validate()
}

// WithImportOverwrite lets ImportCheckpoints put each row back to the
// exported progress, whatever progress it holds now: the way to return a
// stream to an earlier state. Rows are written with the holder's fenced
// writes, and a row a worker holds is refused before anything is written
// (ErrLeaseHeld): stop the consumers first. Records after the exported
// checkpoints are then handed to a handler again. Rows of shards the
// export does not list are left as they are. Import ignores it.
func WithImportOverwrite() ImportOption {
	return func(c *importConfig) { c.overwrite = true }
}

// ImportCheckpoints writes an export (see Export) into the lease table of
// to, for the stream it names. kin is a Kinesis client of the stream's
// account and region: the shards are checked against the stream before
// anything is written, as Import checks them (WithImportForce skips
// shards the stream no longer lists). When the export and to both record
// the stream's identity and they differ, the stream was re-created since
// the export and nothing is written (ErrStreamRecreated).
//
// By default a row is written only where it has no checkpoint, as Import
// does: progress in the table is kept. A shard with a checkpoint is copied
// into its row (made if missing, with the parents the stream lists); a
// shard without one but with a start gets a row with that start if it has
// none; any other is skipped. With WithImportOverwrite each row is put
// back to the exported progress (see it). Each write is fenced: the row is
// acquired on the counter listed, written and released, under an identity
// of owner "shardlease-import". The report has Format ImportShardleaseJSON
// and FromTable the table exported.
func ImportCheckpoints(ctx context.Context, kin KinesisAPI, from *Checkpoints, to LeaseStore, opts ...ImportOption) (*ImportReport, error) {
	var cfg importConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	imp, err := newCheckpointsImport(from, to, kin, cfg)
	if err != nil {
		return nil, err
	}
	if err := imp.checkIdentity(ctx); err != nil {
		return nil, err
	}
	run, rows := imp.run, imp.rows()
	if err := run.listStream(ctx, kin); err != nil {
		return nil, err
	}
	if err := run.checkAgainstStream(ctx, kin, rows, cfg.force); err != nil {
		return nil, err
	}
	if err := run.listOwn(ctx, rows); err != nil {
		return nil, err
	}
	if err := imp.refuseHeld(rows); err != nil {
		return nil, err
	}
	return run.write(ctx, rows)
}

// checkpointsImport is one ImportCheckpoints once its arguments are
// checked. One goroutine, ImportCheckpoints', uses it.
type checkpointsImport struct {
	run       *importRun
	from      *Checkpoints
	to        LeaseStore
	overwrite bool
	owner     string
	starts    map[string]Start // the exported starts, by shard id
	lineage   LineageStore     // to's; nil when it keeps no starts
}

// newCheckpointsImport checks ImportCheckpoints' arguments.
func newCheckpointsImport(from *Checkpoints, to LeaseStore, kin KinesisAPI, cfg importConfig) (*checkpointsImport, error) {
	switch {
	case from == nil:
		return nil, errorf("%w: import checkpoints: the export is nil; read one with shardlease.ReadCheckpoints", ErrInvalidConfig)
	case isNil(to):
		return nil, errorf("%w: import checkpoints: destination store is nil", ErrInvalidConfig)
	case isNil(kin):
		return nil, errorf("%w: import checkpoints: Kinesis client is nil; pass kinesis.NewFromConfig(cfg) for the stream's account and region", ErrInvalidConfig)
	}
	if err := from.Validate(); err != nil {
		return nil, err
	}
	source := from.Table
	if source == "" {
		source = "(none)"
	}
	imp := &checkpointsImport{from: from, to: to, overwrite: cfg.overwrite, owner: NewOwnerIdentity("shardlease-import"), starts: map[string]Start{}}
	caps := resolveCaps(to)
	imp.lineage = caps.lineage
	imp.run = &importRun{to: to, table: caps.tableName, format: ImportShardleaseJSON, from: source, stream: from.Stream, copy: imp.copy}
	if imp.overwrite {
		if _, ok := to.(Rewinder); !ok {
			return nil, errorf("%w: import checkpoints with overwrite: the lease store (%T) cannot clear a checkpoint (it does not implement shardlease.Rewinder)", ErrInvalidConfig, to)
		}
	}
	return imp, nil
}

// checkIdentity refuses an export of another incarnation of the stream
// than the one the destination records.
func (imp *checkpointsImport) checkIdentity(ctx context.Context) error {
	ids, ok := imp.to.(IdentityStore)
	if !ok || imp.from.StreamARN == "" {
		return nil
	}
	have, err := ids.StreamIdentity(ctx, imp.from.Stream)
	switch {
	case errors.Is(err, ErrLeaseNotFound):
		return nil
	case err != nil:
		return errorf("shardlease: import checkpoints of stream %s: read the destination's stream identity: %w", imp.from.Stream, err)
	}
	exported := StreamIdentity{Stream: imp.from.Stream, ARN: imp.from.StreamARN, Created: imp.from.StreamCreated}
	if have.Same(exported) {
		return nil
	}
	return errorf("shardlease: import checkpoints into %s: nothing was written: %w: the export is of %s, the table's rows are of %s; its checkpoints mean nothing to the stream there now",
		tableAndStream(imp.run.table, imp.from.Stream), ErrStreamRecreated, exported, have)
}

// rows turns the export's shards into the rows Import checks and writes.
func (imp *checkpointsImport) rows() []foreign.Row {
	var rows []foreign.Row
	for _, s := range imp.from.Shards {
		r := foreign.Row{Shard: s.Shard, Checkpoint: s.Checkpoint, SubSequence: s.SubSequence}
		if s.Checkpoint == "" && s.start().IsZero() && !imp.overwrite {
			r.Skip, r.NoProgress = "no checkpoint and no start in the export", true
		}
		imp.starts[s.Shard] = normalStart(s.start())
		rows = append(rows, r)
	}
	foreign.Sort(rows)
	return rows
}

// refuseHeld refuses, with overwrite, any row to write that a worker
// holds (listOwn refuses held rows without a checkpoint already).
func (imp *checkpointsImport) refuseHeld(rows []foreign.Row) error {
	if !imp.overwrite {
		return nil
	}
	var held []string
	for _, r := range rows {
		if l, ok := imp.run.own[r.Shard]; ok && l.Owner != "" && !imp.at(l, r) {
			held = append(held, fmt.Sprintf("%s by %s", r.Shard, OwnerName(l.Owner)))
		}
	}
	if len(held) == 0 {
		return nil
	}
	return errorf("shardlease: import checkpoints into %s: nothing was written: %w: %d shards are held by running workers (%s); stop every consumer of stream %s and import again once the leases are free",
		tableAndStream(imp.run.table, imp.from.Stream), ErrLeaseHeld, len(held), strings.Join(firstOf(held, 5), ", "), imp.from.Stream)
}

// at reports whether row l holds r's progress already.
func (imp *checkpointsImport) at(l Lease, r foreign.Row) bool {
	if l.Checkpoint != r.Checkpoint {
		return false
	}
	if r.Checkpoint == "" {
		return sameStart(l.Start, imp.starts[r.Shard])
	}
	return r.Checkpoint == ShardEnd || l.SubSequence == r.SubSequence
}

// copy writes one exported shard into its row (as listed; exists reports
// whether it was there), and says what it did.
func (imp *checkpointsImport) copy(ctx context.Context, own Lease, exists bool, r foreign.Row) (ImportAction, string, error) {
	start := imp.starts[r.Shard]
	switch {
	case exists && imp.at(own, r):
		return ImportSkipped, fmt.Sprintf("row %s is at the exported progress already", own.Key), nil
	case exists && own.Checkpoint != "" && !imp.overwrite:
		return ImportSkipped, alreadyHas(own, r.Checkpoint, "") + "; import with overwrite to put it back", nil
	case !exists:
		if err := imp.create(ctx, own.Key, r.Parents, start); err != nil {
			return "", "", err
		}
		own.Counter = 0
	}
	switch {
	case r.Checkpoint == "" && !exists:
		if imp.lineage == nil {
			return ImportCopied, fmt.Sprintf("created row %s (the store keeps no start)", own.Key), nil
		}
		return ImportCopied, fmt.Sprintf("created row %s with start %s", own.Key, dashStart(start)), nil
	case r.Checkpoint == "" && !imp.overwrite:
		return ImportSkipped, fmt.Sprintf("no checkpoint in the export; row %s has none either and keeps its start", own.Key), nil
	}
	return imp.write(ctx, own, exists, r, start)
}

// create makes key's missing row with parents and start.
func (imp *checkpointsImport) create(ctx context.Context, key LeaseKey, parents []string, start Start) error {
	if _, err := createRow(ctx, imp.to, imp.lineage, key, parents, start); err != nil {
		return errorf("create the row: %w", err)
	}
	return nil
}

// write puts r's progress into own's row with the fenced edit of
// lease_edit.go: acquire on the counter listed, checkpoint (or rewind, for
// no checkpoint), release. A row a worker took meanwhile is refused; without
// overwrite, a row that got a checkpoint meanwhile is left as it is.
func (imp *checkpointsImport) write(ctx context.Context, own Lease, exists bool, r foreign.Row, start Start) (ImportAction, string, error) {
	edit := leaseEdit{store: imp.to, owner: imp.owner}
	h, err := edit.take(ctx, own.Key, own)
	if err != nil {
		if errors.Is(err, ErrLeaseHeld) {
			err = errorf("taken by a worker while the import ran; stop every consumer of stream %s and import again: %w", own.Key.Stream, err)
		}
		return "", "", err
	}
	before := h.lease
	left, err := edit.finish(ctx, h, "write the row", func(ctx context.Context, held Lease) (Lease, error) {
		switch {
		case !imp.overwrite && held.Checkpoint != "":
			return held, errSavedMeanwhile
		case r.Checkpoint != "":
			return imp.to.Checkpoint(ctx, held, r.Checkpoint, r.SubSequence, time.Now())
		}
		return imp.to.(Rewinder).RewindRow(ctx, held, "", start)
	})
	switch {
	case errors.Is(err, errSavedMeanwhile) && left.Owner == "":
		return ImportSkipped, alreadyHas(before, r.Checkpoint, ", saved while the import ran"), nil
	case err != nil:
		return "", "", err
	}
	return ImportCopied, imp.wrote(own, before, exists, r, start), nil
}

// errSavedMeanwhile stops a copy into a row that got a checkpoint between
// the listing and the acquire.
var errSavedMeanwhile = errors.New("saved meanwhile")

// wrote says what write did to own's row, which held before's progress.
func (imp *checkpointsImport) wrote(own, before Lease, exists bool, r foreign.Row, start Start) string {
	what := "checkpoint " + r.Checkpoint
	if r.SubSequence >= 0 {
		what += fmt.Sprintf(" sub-sequence %d", r.SubSequence)
	}
	if r.Checkpoint == "" {
		what = "no checkpoint, start " + dashStart(start)
	}
	was := "no checkpoint"
	if before.Checkpoint != "" {
		was = "checkpoint " + before.Checkpoint
	}
	if !exists {
		return fmt.Sprintf("created row %s with %s from the export", own.Key, what)
	}
	return fmt.Sprintf("wrote %s from the export into row %s, which had %s", what, own.Key, was)
}

// dashStart is start as a report shows it: "none" for the zero Start.
func dashStart(start Start) string {
	if start.IsZero() {
		return "none"
	}
	return start.String()
}
