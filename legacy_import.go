package shardlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/backoff"
	"github.com/shardlease/shardlease/internal/foreign"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// This file copies progress from other libraries' tables (Import): it scans
// the source table, checks the rows against the stream and writes them;
// internal/foreign knows each library's layout and decodes the rows.
// Copying a checkpoint never overwrites progress: every copy is conditional
// on the destination row being free and having no checkpoint yet.

// ImportFormat names the layout of another library's checkpoint table.
type ImportFormat string

// The formats Import reads.
const (
	// ImportKinsumer is a twitchscience/kinsumer checkpoint table (kinsumer
	// names it "<app>_checkpoints", one of the three tables it creates):
	// string partition key Shard, attribute SequenceNumber (the last
	// processed record), and Finished, set once the shard was consumed to
	// its end.
	ImportKinsumer ImportFormat = "kinsumer"
	// ImportVMwareKCL is a vmware/vmware-go-kcl-v2 table (named after the
	// application): string partition key ShardID, attribute Checkpoint
	// holding a sequence number or SHARD_END, and ParentShardId holding one
	// shard id. Its owner attributes (AssignedTo, LeaseTimeout,
	// ClaimRequest) are not read.
	ImportVMwareKCL ImportFormat = "vmware-go-kcl-v2"
	// ImportKCL is a Java KCL lease table: string partition key leaseKey
	// holding the shard id (or, in multi-stream mode,
	// "account:stream:epoch:shard"), attribute checkpoint holding a sequence
	// number or one of the sentinels TRIM_HORIZON, LATEST, AT_TIMESTAMP and
	// SHARD_END, and optionally checkpointSubSequenceNumber.
	ImportKCL ImportFormat = "kcl"
)

// ImportFormats returns the formats Import reads, in the order errors and
// the command line list them.
func ImportFormats() []ImportFormat {
	var formats []ImportFormat
	for _, f := range foreign.Formats() {
		formats = append(formats, ImportFormat(f))
	}
	return formats
}

// foreignKey is the partition key each format's table has; "" for a format
// Import does not read.
func foreignKey(format ImportFormat) string {
	return foreign.Format(format).Key()
}

// ImportAction is what Import did with one shard (ImportResult.Action).
type ImportAction string

// Import actions reported in ImportResult.Action.
const (
	// ImportCopied: the shard's progress was written into its row.
	ImportCopied ImportAction = "copied"
	// ImportSkipped: the source row was read and nothing was written.
	ImportSkipped ImportAction = "skipped"
	// ImportNotInSource: the stream lists the shard, but the source table
	// has no row for it; Reason says where a consumer starts it.
	ImportNotInSource ImportAction = "not in source"
)

// ImportResult is what Import did with one shard.
type ImportResult struct {
	// Shard is the shard id.
	Shard string
	// Checkpoint is the progress read from the foreign table as shardlease
	// writes it (a sequence number or ShardEnd), or the foreign value as is
	// when it means no progress (e.g. "TRIM_HORIZON") or cannot be read.
	// It is empty for a shard not in the source.
	Checkpoint string
	// Action is ImportCopied, ImportSkipped or ImportNotInSource.
	Action ImportAction
	// Reason says why a shard was skipped, what was written, or where a
	// consumer starts a shard that the source has no progress for.
	Reason string
}

// ImportReport is the outcome of one Import: one result per source row of
// the stream, and one per shard the stream lists that the source has no row
// for, ordered by shard id.
type ImportReport struct {
	Stream      string         // the stream imported
	FromTable   string         // the source table, read only
	ToTable     string         // the lease table written
	Format      ImportFormat   // the source table's format
	Results     []ImportResult // ordered by shard id
	Copied      int            // results with ImportCopied
	Skipped     int            // results with ImportSkipped
	NotInSource int            // results with ImportNotInSource
}

// ImportOption configures Import.
type ImportOption func(*importConfig)

type importConfig struct {
	force     bool
	overwrite bool // ImportCheckpoints only
}

// WithImportForce lets Import go on when the source holds rows of shards
// that the stream no longer lists, as happens to shards that closed and aged
// out of the stream's retention: those rows are skipped and reported,
// instead of stopping the import. Without it, such rows stop the import
// before anything is written, since they more often mean that the source
// belongs to another stream. Checkpoints that Kinesis rejects for a shard
// it lists stop the import with or without this option.
func WithImportForce() ImportOption {
	return func(c *importConfig) { c.force = true }
}

// firstOf returns the first n of ids, and a last entry that counts the
// others when there are more.
func firstOf(ids []string, n int) []string {
	if len(ids) <= n {
		return ids
	}
	return append(slices.Clone(ids[:n]), fmt.Sprintf("and %d more", len(ids)-n))
}

const shardleaseTableLook = "a shardlease lease table"

// Import copies each shard's progress from fromTable, a table of another
// library in the given format, into the lease table of to for stream, so
// that a service moving to shardlease resumes where it stopped. dynamo reads
// fromTable; the writes go through to's own client. kin is a Kinesis client
// of the stream's account and region: Import checks the rows against the
// stream before it writes anything.
//
// The check, since the source rows do not name their stream (kinsumer,
// vmware-go-kcl-v2 and single-stream KCL tables): every shard of a row with
// progress must be listed by the stream (ListShards), a SHARD_END must
// belong to a closed shard, and every sequence number must be one Kinesis
// accepts for its shard (GetShardIterator, one call per shard). Any
// mismatch stops the import with an ImportMismatchError, nothing written;
// WithImportForce skips rows of shards the stream no longer lists instead.
// Each row written gets the shard's parents as the stream lists them.
//
// A shard is copied only where its own "stream:shard" row has no checkpoint
// (the row is created, free, if missing): progress already in the lease
// table is never overwritten, even when the foreign one is further along.
// Running Import twice therefore changes nothing: the second run skips every
// shard with the reason that it already has progress, and writes nothing.
// A row that a consumer holds without a checkpoint stops the import before
// anything is written (ErrLeaseHeld): stop the consumers first. Each write
// is fenced like a holder's: conditional on the row being free at the
// counter read and without a checkpoint, and bumping the counter, so a
// consumer that takes the row meanwhile wins. Stop the other library's
// instances first too, or their later progress is not copied.
//
// Kinsumer: a row whose Finished attribute is set (to anything but NULL) is
// copied as ShardEnd; a row without a SequenceNumber is skipped.
// vmware-go-kcl-v2: Checkpoint is copied (SHARD_END as ShardEnd); a row
// without one is skipped. KCL: TRIM_HORIZON, LATEST and AT_TIMESTAMP mean
// no record was processed and are skipped; SHARD_END is copied as ShardEnd;
// checkpointSubSequenceNumber is carried into the sub-sequence. In
// multi-stream KCL tables only rows of stream are read, and of the stream's
// newest incarnation (creation epoch).
//
// The report lists every source row of the stream with what was done and
// why, and every shard the stream lists that the source has no row for
// (ImportNotInSource), with where a consumer will start it. An error
// (missing table, wrong key schema, rows that do not fit the stream, a
// failed call) stops the import; one that comes while writing leaves the
// shards before it written, and a new run resumes the rest.
func Import(ctx context.Context, dynamo DynamoDBAPI, kin KinesisAPI, format ImportFormat, fromTable string, to *DynamoStore, stream string, opts ...ImportOption) (*ImportReport, error) {
	var cfg importConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := validateImport(dynamo, kin, format, fromTable, to, stream); err != nil {
		return nil, err
	}
	if err := to.CheckTable(ctx); err != nil {
		return nil, errorf("shardlease: import into the lease table: %w", err)
	}
	if err := checkForeignSchema(ctx, dynamo, format, fromTable); err != nil {
		return nil, err
	}
	rows, err := scanForeign(ctx, dynamo, format, fromTable, stream)
	if err != nil {
		return nil, err
	}
	run := &importRun{to: to, table: to.table, format: format, from: fromTable, stream: stream}
	run.copy = func(ctx context.Context, own Lease, exists bool, r foreign.Row) (ImportAction, string, error) {
		return to.importRow(ctx, own, exists, r, fromTable)
	}
	if err := run.listStream(ctx, kin); err != nil {
		return nil, err
	}
	if err := run.checkAgainstStream(ctx, kin, rows, cfg.force); err != nil {
		return nil, err
	}
	if err := run.listOwn(ctx, rows); err != nil {
		return nil, err
	}
	return run.write(ctx, rows)
}

// validateImport checks Import's arguments before any call is made.
func validateImport(dynamo DynamoDBAPI, kin KinesisAPI, format ImportFormat, fromTable string, to *DynamoStore, stream string) error {
	switch {
	case dynamo == nil:
		return errorf("%w: import: DynamoDB client is nil; pass dynamodb.NewFromConfig(cfg)", ErrInvalidConfig)
	case kin == nil:
		return errorf("%w: import: Kinesis client is nil; pass kinesis.NewFromConfig(cfg) for the stream's account and region", ErrInvalidConfig)
	case to == nil:
		return errorf("%w: import: destination store is nil; pass a store from shardlease.NewDynamoStore", ErrInvalidConfig)
	case !slices.Contains(ImportFormats(), format):
		return errorf("%w: import: format %q is not one of %q", ErrInvalidConfig, format, ImportFormats())
	}
	if err := ValidateStreamName(stream); err != nil {
		return errorf("shardlease: import: %w", err)
	}
	if err := ValidateTableName(fromTable); err != nil {
		return errorf("shardlease: import: %w", err)
	}
	if fromTable == to.table {
		return errorf("%w: import: the %s table and the lease table are both %s; pass the other library's table", ErrInvalidConfig, format, fromTable)
	}
	return nil
}

// importRun is one Import once its arguments are checked: what it imports,
// and what it read of the stream and of the lease table. One goroutine,
// Import's, uses it.
type importRun struct {
	to     LeaseStore
	table  string // to's table
	format ImportFormat
	from   string // the source table
	stream string
	// copy writes one source row into its own row (as listed; exists
	// reports whether it was there) and says what it did.
	copy func(ctx context.Context, own Lease, exists bool, r foreign.Row) (ImportAction, string, error)

	listed []kinesistypes.Shard          // the stream's shards, as ListShards gave them
	shards map[string]kinesistypes.Shard // listed, by shard id
	own    map[string]Lease              // the stream's rows in the lease table, by shard id
}

// listStream reads the stream's shards.
func (run *importRun) listStream(ctx context.Context, kin KinesisAPI) error {
	listed, err := listShards(ctx, kin, run.stream, toolListing)
	if err != nil {
		return errorf("shardlease: import %s table %s: check its rows against stream %s: %w", run.format, run.from, run.stream, err)
	}
	run.listed = listed
	run.shards = make(map[string]kinesistypes.Shard, len(listed))
	for _, sh := range listed {
		run.shards[aws.ToString(sh.ShardId)] = sh
	}
	return nil
}

// listOwn reads the stream's rows in the lease table. A row to copy into
// that a consumer holds without a checkpoint stops the import before
// anything is written (ErrLeaseHeld).
func (run *importRun) listOwn(ctx context.Context, rows []foreign.Row) error {
	own, err := run.to.List(ctx, run.stream)
	if err != nil {
		return errorf("shardlease: import into %s: list the rows: %w", tableAndStream(run.table, run.stream), err)
	}
	run.own = make(map[string]Lease, len(own))
	for _, l := range own {
		run.own[l.Key.Shard] = l
	}
	for _, r := range rows {
		if l, ok := run.own[r.Shard]; ok && r.Skip == "" && l.Checkpoint == "" && l.Owner != "" {
			return errorf("shardlease: import %s table %s: nothing was written: %w", run.format, run.from, heldDuringImport(run.table, l))
		}
	}
	return nil
}

// write copies the rows in order and reports them, with the listed shards
// that the source has no row for. After an error the report holds the
// rows before the one that failed.
func (run *importRun) write(ctx context.Context, rows []foreign.Row) (*ImportReport, error) {
	rep := &ImportReport{Stream: run.stream, FromTable: run.from, ToTable: run.table, Format: run.format}
	inSource := map[string]bool{}
	for _, r := range rows {
		inSource[r.Shard] = true
		res, err := run.copyRow(ctx, r)
		if err != nil {
			return rep, err
		}
		rep.Results = append(rep.Results, res)
		if res.Action == ImportCopied {
			rep.Copied++
		} else {
			rep.Skipped++
		}
	}
	for _, sh := range run.listed {
		id := aws.ToString(sh.ShardId)
		if inSource[id] {
			continue
		}
		rep.Results = append(rep.Results, ImportResult{Shard: id, Action: ImportNotInSource,
			Reason: "the source table has no row for this shard; " + startsAt(id, run.shards, run.own)})
		rep.NotInSource++
	}
	slices.SortStableFunc(rep.Results, func(a, b ImportResult) int { return strings.Compare(a.Shard, b.Shard) })
	return rep, nil
}

// copyRow writes one source row into its own row, unless it is skipped,
// and says what was done.
func (run *importRun) copyRow(ctx context.Context, r foreign.Row) (ImportResult, error) {
	res := ImportResult{Shard: r.Shard, Checkpoint: r.Checkpoint, Action: ImportSkipped, Reason: r.Skip}
	if r.NoProgress {
		res.Reason += "; " + startsAt(r.Shard, run.shards, run.own)
	}
	if r.Skip != "" {
		return res, nil
	}
	l, exists := run.own[r.Shard]
	if !exists {
		l = Lease{Key: LeaseKey{Stream: run.stream, Shard: r.Shard}}
	}
	var err error
	res.Action, res.Reason, err = run.copy(ctx, l, exists, r)
	if err != nil {
		return res, errorf("shardlease: import %s table %s into %s, shard %s: %w", run.format, run.from, tableAndStream(run.table, run.stream), r.Shard, err)
	}
	return res, nil
}

// startsAt says where a consumer starts a shard that the import leaves
// without progress. A shard whose row has a checkpoint already resumes
// there; a child of a shard that has a row, or that the stream lists (shard
// sync gives it a row), is read from its first record once its parents are
// finished; any other shard starts at the consumer's initial position.
func startsAt(shard string, shards map[string]kinesistypes.Shard, own map[string]Lease) string {
	if l, ok := own[shard]; ok && l.Checkpoint != "" {
		return fmt.Sprintf("row %s has checkpoint %s already and resumes there", l.Key, l.Checkpoint)
	}
	sh, listed := shards[shard]
	if !listed {
		return "the stream does not list the shard, so no consumer reads it"
	}
	var tracked []string
	for _, p := range shardParents(sh) {
		_, hasRow := own[p]
		_, isListed := shards[p]
		if hasRow || isListed {
			tracked = append(tracked, p)
		}
	}
	if len(tracked) > 0 {
		return fmt.Sprintf("a consumer reads it from its first record once its parent %s is finished", strings.Join(tracked, " and "))
	}
	return "a consumer starts it at its configured initial position (WithInitialPosition)"
}

// checkAgainstStream checks the rows to copy against the stream's shards
// and returns an ImportMismatchError if any does not fit. It sets each such
// row's parents to the stream's, and with force marks rows of unlisted
// shards skipped.
func (run *importRun) checkAgainstStream(ctx context.Context, kin KinesisAPI, rows []foreign.Row, force bool) error {
	mismatch := &ImportMismatchError{Format: run.format, FromTable: run.from, Stream: run.stream}
	for i := range rows {
		r := &rows[i]
		if r.Skip != "" {
			continue
		}
		sh, ok := run.shards[r.Shard]
		if !ok {
			if force {
				r.Skip = fmt.Sprintf("stream %s does not list this shard (closed and aged out of its retention, imported with force): nothing to read", run.stream)
				continue
			}
			mismatch.Unlisted = append(mismatch.Unlisted, r.Shard)
			continue
		}
		r.Parents = shardParents(sh)
		if r.Checkpoint == "" {
			continue // a start or no progress only (an export's row): nothing to check
		}
		problem, err := checkCheckpoint(ctx, kin, run.stream, sh, r.Checkpoint, r.SubSequence)
		if err != nil {
			return errorf("shardlease: import %s table %s: check the checkpoint of shard %s against stream %s: %w", run.format, run.from, r.Shard, run.stream, err)
		}
		if problem != "" {
			mismatch.Rejected = append(mismatch.Rejected, ImportCheck{Shard: r.Shard, Checkpoint: r.Checkpoint, Problem: problem})
		}
	}
	if len(mismatch.Unlisted) > 0 || len(mismatch.Rejected) > 0 {
		return mismatch
	}
	return nil
}

// checkCheckpoint says what is wrong with checkpoint for shard sh, or ""
// when Kinesis accepts it. A SHARD_END needs a closed shard; a sequence
// number must lie in the shard's range and be accepted by GetShardIterator.
// err is a failed call other than a rejection.
func checkCheckpoint(ctx context.Context, kin KinesisAPI, stream string, sh kinesistypes.Shard, checkpoint string, sub int64) (problem string, err error) {
	var start, end string
	if r := sh.SequenceNumberRange; r != nil {
		start, end = aws.ToString(r.StartingSequenceNumber), aws.ToString(r.EndingSequenceNumber)
	}
	if checkpoint == ShardEnd {
		if end == "" {
			return "the source says the shard was consumed to its end, but the stream's shard is open", nil
		}
		return "", nil
	}
	if start != "" && seqnum.Compare(checkpoint, start) < 0 {
		return fmt.Sprintf("before the shard's first sequence number %s", start), nil
	}
	if end != "" && seqnum.Compare(checkpoint, end) > 0 {
		return fmt.Sprintf("after the closed shard's last sequence number %s", end), nil
	}
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: sh.ShardId,
		ShardIteratorType: kinesistypes.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: aws.String(checkpoint)}
	if sub >= 0 {
		in.ShardIteratorType = kinesistypes.ShardIteratorTypeAtSequenceNumber
	}
	bo := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		_, err = kin.GetShardIterator(ctx, in)
		var inv *kinesistypes.InvalidArgumentException
		var rnf *kinesistypes.ResourceNotFoundException
		switch {
		case err == nil:
			return "", nil
		case errors.As(err, &inv):
			return "Kinesis rejects it: " + aws.ToString(inv.Message), nil
		case errors.As(err, &rnf):
			return "Kinesis does not find the shard: " + aws.ToString(rnf.Message), nil
		case retryable(err) && bo.Attempts() < 10 && bo.Sleep(ctx):
			continue
		}
		return "", err
	}
}

// importRow writes one foreign row's progress into own (as listed; exists
// reports whether it was there) unless it has some. A row that somebody
// holds is never written: Import is not its holder, and the holder is
// reading the shard from its own start position.
func (s *DynamoStore) importRow(ctx context.Context, own Lease, exists bool, r foreign.Row, from string) (action ImportAction, reason string, err error) {
	key := own.Key
	if exists && own.Checkpoint != "" {
		return ImportSkipped, alreadyHas(own, r.Checkpoint, ""), nil
	}
	if exists && own.Owner != "" {
		return "", "", heldDuringImport(s.table, own)
	}
	if !exists {
		own = Lease{Key: key}
	}
	row, ok, _, err := s.fillFree(ctx, own, exists, r.Checkpoint, r.SubSequence, r.Parents)
	switch {
	case err != nil:
		return "", "", err
	case !ok && row.Checkpoint != "":
		return ImportSkipped, alreadyHas(row, r.Checkpoint, ", saved while the import ran"), nil
	case !ok && row.Owner != "":
		return "", "", heldDuringImport(s.table, row)
	case !ok:
		return "", "", errorf("row %s changed while the import ran (counter %d, was %d); run the import again", key, row.Counter, own.Counter)
	}
	what := "checkpoint " + r.Checkpoint
	if r.SubSequence >= 0 {
		what += fmt.Sprintf(" sub-sequence %d", r.SubSequence)
	}
	if !exists {
		return ImportCopied, fmt.Sprintf("created row %s with %s from table %s", key, what, from), nil
	}
	return ImportCopied, fmt.Sprintf("wrote %s from table %s into row %s, which had no checkpoint", what, from, key), nil
}

// heldDuringImport is the error for a row without a checkpoint that a
// consumer holds: it is reading the shard already, so Import leaves it.
func heldDuringImport(table string, row Lease) error {
	return errorf("%w: the row of shard %s in %s is held by %q (counter %d) and has no checkpoint: a shardlease consumer is reading the shard from its start position; "+
		"stop every consumer of stream %s, release its leases (shardlease release), and run the import again",
		ErrLeaseHeld, row.Key.Shard, tableAndStream(table, row.Key.Stream), row.Owner, row.Counter, row.Key.Stream)
}

// alreadyHas is the reason for skipping a row that has a checkpoint: it
// compares own's with the imported one. when, if not empty, says when
// own's was saved.
func alreadyHas(own Lease, imported, when string) string {
	order := ""
	switch c := seqnum.Compare(own.Checkpoint, imported); {
	case c == 0:
		order = "the same as the imported one"
	case c > 0:
		order = "newer than the imported " + imported
	default:
		order = "older than the imported " + imported + "; it is kept: to import, delete the row's checkpoint first"
	}
	return fmt.Sprintf("already has progress: row %s has checkpoint %s%s, %s", own.Key, own.Checkpoint, when, order)
}

// checkForeignSchema checks that table has the key of format; if not, the
// error says which format the key looks like.
func checkForeignSchema(ctx context.Context, client DynamoDBAPI, format ImportFormat, table string) error {
	want := foreignKey(format)
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		if isNotFound(err) {
			return &TableError{Table: table, Err: &sourceNotFound{err: err,
				msg: fmt.Sprintf("not found: import expected a %s table with the string partition key %q here; check the table name and region: %s", format, want, bare(err))}}
		}
		return &TableError{Table: table, Err: errorf("describe: %w", err)}
	}
	d := out.Table
	if d == nil {
		return &TableError{Table: table, Err: errors.New("describe returned no table description")}
	}
	have, ok := hasStringHashKey(d, want)
	if ok {
		return nil
	}
	e := &ImportSchemaError{Table: table, Format: format, Key: have}
	for _, f := range ImportFormats() {
		if _, ok := hasStringHashKey(d, foreignKey(f)); ok {
			e.LooksLike = string(f)
		}
	}
	if _, ok := hasStringHashKey(d, attrKey); ok {
		e.LooksLike = shardleaseTableLook
	}
	return e
}

// sourceNotFound is the error for a missing source table. It matches
// ErrTableNotFound, whose text speaks of the lease table, without
// repeating that text.
type sourceNotFound struct {
	msg string
	err error // the SDK's error
}

func (e *sourceNotFound) Error() string        { return e.msg }
func (e *sourceNotFound) Unwrap() error        { return e.err }
func (e *sourceNotFound) Is(target error) bool { return target == ErrTableNotFound }

// scanForeign reads every row of table and returns the rows to report,
// ordered by shard id.
func scanForeign(ctx context.Context, client DynamoDBAPI, format ImportFormat, table, stream string) ([]foreign.Row, error) {
	var rows []foreign.Row
	var start map[string]types.AttributeValue
	for {
		page, err := client.Scan(ctx, &dynamodb.ScanInput{
			TableName:         aws.String(table),
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, &TableError{Table: table, Err: errorf("scan the %s table: %w", format, err)}
		}
		for _, item := range page.Items {
			if r, mine := foreign.Decode(foreign.Format(format), item, stream, ValidateShardID); mine {
				rows = append(rows, r)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	foreign.SkipOlderIncarnations(rows, stream)
	foreign.Sort(rows)
	return rows, nil
}
