package shardlease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/seqnum"
)

// This file copies progress from other libraries' tables (Import). Copying a
// checkpoint never overwrites progress: every copy is conditional on the
// destination row having no checkpoint yet.

// ImportFormat names the layout of another library's checkpoint table.
type ImportFormat string

// The formats Import reads.
const (
	// ImportKinsumer is a twitchscience/kinsumer checkpoint table: string
	// partition key Shard, attribute SequenceNumber (the last processed
	// record), and Finished, set once the shard was consumed to its end.
	ImportKinsumer ImportFormat = "kinsumer"
	// ImportKCL is a Java KCL lease table: string partition key leaseKey
	// holding the shard id (or, in multi-stream mode,
	// "account:stream:epoch:shard"), attribute checkpoint holding a sequence
	// number or one of the sentinels TRIM_HORIZON, LATEST, AT_TIMESTAMP and
	// SHARD_END, and optionally checkpointSubSequenceNumber and
	// parentShardId.
	ImportKCL ImportFormat = "kcl"
)

// Import actions reported in ImportResult.Action.
const (
	ImportCopied  = "copied"
	ImportSkipped = "skipped"
)

// ImportResult is what Import did with one shard.
type ImportResult struct {
	// Shard is the shard id.
	Shard string
	// Checkpoint is the progress read from the foreign table as shardlease
	// writes it (a sequence number or ShardEnd), or the foreign value as is
	// when it means no progress (e.g. "TRIM_HORIZON") or cannot be read.
	Checkpoint string
	// Action is ImportCopied or ImportSkipped.
	Action string
	// Reason says why a shard was skipped, or what was written.
	Reason string
}

// ImportReport is the outcome of one Import, one result per foreign row,
// ordered by shard id.
type ImportReport struct {
	Stream    string
	FromTable string
	ToTable   string
	Format    ImportFormat
	Results   []ImportResult
	Copied    int
	Skipped   int
}

// foreignRow is one row of a foreign table as Import reads it.
type foreignRow struct {
	shard      string
	checkpoint string // as shardlease writes it, or the raw value when skip is set
	sub        int64
	parents    []string
	skip       string // why the row is not copied; empty to copy it
	epoch      int64  // KCL multi-stream: the stream's creation epoch
}

// Import copies each shard's progress from fromTable, a table of another
// library in the given format, into the lease table of to for stream, so
// that a service moving to shardlease resumes where it stopped. client reads
// fromTable; the writes go through to's own client.
//
// A shard is copied only where its own "stream:shard" row has no checkpoint
// (the row is created, free, if missing): progress already in the lease
// table is never overwritten, even when the foreign one is further along.
// Running Import twice therefore changes nothing: the second run skips every
// shard with the reason that it already has progress, and writes nothing.
// The copy is conditional, so a checkpoint saved while Import runs wins; but
// stop the other library's instances first, or their later progress is not
// copied.
//
// Kinsumer: a row whose Finished attribute is set (to anything but NULL) is
// copied as ShardEnd; a row without a SequenceNumber is skipped. KCL:
// TRIM_HORIZON, LATEST and AT_TIMESTAMP mean no record was processed and are
// skipped; SHARD_END is copied as ShardEnd; checkpointSubSequenceNumber is
// carried into the sub-sequence; parentShardId is carried into the parents of
// rows Import creates. In multi-stream KCL tables only rows of stream are
// read, and of the stream's newest incarnation (creation epoch).
//
// The report lists every foreign row with what was done and why. An error
// (missing table, wrong key schema, a failed call) stops the import; the
// shards before it were written and a new run resumes the rest.
func Import(ctx context.Context, client DynamoDBAPI, format ImportFormat, fromTable string, to *DynamoStore, stream string) (*ImportReport, error) {
	switch {
	case client == nil:
		return nil, errorf("%w: import: DynamoDB client is nil; pass dynamodb.NewFromConfig(cfg)", ErrInvalidConfig)
	case to == nil:
		return nil, errorf("%w: import: destination store is nil; pass a store from shardlease.NewDynamoStore", ErrInvalidConfig)
	case format != ImportKinsumer && format != ImportKCL:
		return nil, errorf("%w: import: format %q is not one of %q and %q", ErrInvalidConfig, format, ImportKinsumer, ImportKCL)
	}
	if err := ValidateStreamName(stream); err != nil {
		return nil, errorf("shardlease: import: %w", err)
	}
	if err := ValidateTableName(fromTable); err != nil {
		return nil, errorf("shardlease: import: %w", err)
	}
	if fromTable == to.table {
		return nil, errorf("%w: import: the %s table and the lease table are both %s; pass the other library's table", ErrInvalidConfig, format, fromTable)
	}
	if err := to.CheckTable(ctx); err != nil {
		return nil, errorf("shardlease: import into the lease table: %w", err)
	}
	if err := checkForeignSchema(ctx, client, format, fromTable); err != nil {
		return nil, err
	}
	rows, err := scanForeign(ctx, client, format, fromTable, stream)
	if err != nil {
		return nil, err
	}
	rep := &ImportReport{Stream: stream, FromTable: fromTable, ToTable: to.table, Format: format}
	for _, r := range rows {
		res := ImportResult{Shard: r.shard, Checkpoint: r.checkpoint, Action: ImportSkipped, Reason: r.skip}
		if r.skip == "" {
			res.Action, res.Reason, err = to.importRow(ctx, LeaseKey{Stream: stream, Shard: r.shard}, r, fromTable)
			if err != nil {
				return rep, errorf("shardlease: import %s table %s into table %s, stream %s, shard %s: %w", format, fromTable, to.table, stream, r.shard, err)
			}
		}
		rep.Results = append(rep.Results, res)
		if res.Action == ImportCopied {
			rep.Copied++
		} else {
			rep.Skipped++
		}
	}
	return rep, nil
}

// importRow writes one foreign row's progress unless the own row has some.
// It reads first, so that a shard with progress costs no write. A row that
// somebody holds is never written: Import is not its holder, and the holder
// is reading the shard from its own start position.
func (s *DynamoStore) importRow(ctx context.Context, key LeaseKey, r foreignRow, from string) (action, reason string, err error) {
	own, exists, err := s.get(ctx, key)
	if err != nil {
		return "", "", err
	}
	if exists && own.Checkpoint != "" {
		return ImportSkipped, alreadyHas(own, r.checkpoint, ""), nil
	}
	if exists && own.Owner != "" {
		return "", "", heldDuringImport(s.table, own)
	}
	if !exists {
		own = Lease{Key: key}
	}
	row, ok, _, err := s.fillFree(ctx, own, exists, r.checkpoint, r.sub, r.parents)
	switch {
	case err != nil:
		return "", "", err
	case !ok && row.Checkpoint != "":
		return ImportSkipped, alreadyHas(row, r.checkpoint, ", saved while the import ran"), nil
	case !ok && row.Owner != "":
		return "", "", heldDuringImport(s.table, row)
	case !ok:
		return "", "", fmt.Errorf("row %s changed while the import ran (counter %d, was %d); run the import again", key, row.Counter, own.Counter)
	}
	what := "checkpoint " + r.checkpoint
	if r.sub >= 0 {
		what += fmt.Sprintf(" sub-sequence %d", r.sub)
	}
	if !exists {
		return ImportCopied, fmt.Sprintf("created row %s with %s from table %s", key, what, from), nil
	}
	return ImportCopied, fmt.Sprintf("wrote %s from table %s into row %s, which had no checkpoint", what, from, key), nil
}

// heldDuringImport is the error for a row without a checkpoint that a
// consumer holds: it is reading the shard already, so Import leaves it.
func heldDuringImport(table string, row Lease) error {
	return fmt.Errorf("%w: row %s of table %s is held by %q (counter %d) and has no checkpoint: a shardlease consumer is reading the shard from its start position; "+
		"stop every consumer of stream %s, release its leases (shardlease release), and run the import again",
		ErrLeaseHeld, row.Key, table, row.Owner, row.Counter, row.Key.Stream)
}

func alreadyHas(own Lease, foreign, when string) string {
	cmp := ""
	switch c := seqnum.Compare(own.Checkpoint, foreign); {
	case c == 0:
		cmp = "the same as the imported one"
	case c > 0:
		cmp = "newer than the imported " + foreign
	default:
		cmp = "older than the imported " + foreign + "; it is kept: to import, delete the row's checkpoint first"
	}
	return fmt.Sprintf("already has progress: row %s has checkpoint %s%s, %s", own.Key, own.Checkpoint, when, cmp)
}

// foreignKey is the partition key each format's table must have.
func foreignKey(format ImportFormat) string {
	if format == ImportKinsumer {
		return "Shard"
	}
	return "leaseKey"
}

func checkForeignSchema(ctx context.Context, client DynamoDBAPI, format ImportFormat, table string) error {
	want := foreignKey(format)
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		if isNotFound(err) {
			return &TableError{Table: table, Err: errorf("%w: import expected a %s table with the string partition key %q here; check the table name and region: %w", ErrTableNotFound, format, want, err)}
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
	return &TableError{Table: table, Err: errorf("%w: it has key %s, but a %s table has exactly one key, the string partition key %q; check the table name and the format",
		ErrBadTableSchema, have, format, want)}
}

// scanForeign reads every row of table and returns the rows to report,
// ordered by shard id.
func scanForeign(ctx context.Context, client DynamoDBAPI, format ImportFormat, table, stream string) ([]foreignRow, error) {
	var rows []foreignRow
	newest := map[string]int64{} // KCL multi-stream: newest epoch per shard of stream
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
			var r foreignRow
			var mine bool
			if format == ImportKinsumer {
				r, mine = kinsumerRow(item), true
			} else {
				r, mine = kclRow(item, stream)
			}
			if !mine {
				continue
			}
			if r.epoch > newest[r.shard] {
				newest[r.shard] = r.epoch
			}
			rows = append(rows, r)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	for i, r := range rows {
		if r.skip == "" && r.epoch < newest[r.shard] {
			rows[i].skip = fmt.Sprintf("lease of an older incarnation of stream %s (creation epoch %d; the newest is %d)", stream, r.epoch, newest[r.shard])
		}
	}
	slices.SortStableFunc(rows, func(a, b foreignRow) int {
		if c := strings.Compare(a.shard, b.shard); c != 0 {
			return c
		}
		return cmp.Compare(b.epoch, a.epoch)
	})
	return rows, nil
}

// stringAttr returns item[name] as a string; present is false when it is
// missing or NULL, ok is false when it has another type.
func stringAttr(item map[string]types.AttributeValue, name string) (v string, present, ok bool) {
	switch av := item[name].(type) {
	case nil, *types.AttributeValueMemberNULL:
		return "", false, true
	case *types.AttributeValueMemberS:
		return av.Value, true, true
	}
	return "", true, false
}

func kinsumerRow(item map[string]types.AttributeValue) foreignRow {
	shard, _, _ := stringAttr(item, "Shard")
	r := foreignRow{shard: shard, sub: -1}
	if err := ValidateShardID(shard); err != nil {
		r.skip = fmt.Sprintf("Shard is not a shard id: %v", err)
		return r
	}
	seq, present, ok := stringAttr(item, "SequenceNumber")
	r.checkpoint = seq
	switch item["Finished"].(type) {
	case nil, *types.AttributeValueMemberNULL:
	default: // kinsumer writes the time the shard was consumed to its end
		r.checkpoint = ShardEnd
		return r
	}
	switch {
	case !ok:
		r.skip = fmt.Sprintf("SequenceNumber is %s, want a string", avType(item["SequenceNumber"]))
	case !present || seq == "":
		r.skip = "no SequenceNumber: the shard was never consumed; it starts at the consumer's configured start position"
	case validCheckpoint(seq, -1) != nil:
		r.skip = fmt.Sprintf("SequenceNumber %q is not a sequence number", seq)
	}
	return r
}

// kclRow reads one KCL lease; mine is false for a lease of another stream in
// a multi-stream table.
func kclRow(item map[string]types.AttributeValue, stream string) (r foreignRow, mine bool) {
	key, _, _ := stringAttr(item, "leaseKey")
	r = foreignRow{shard: key, sub: -1}
	if i := strings.LastIndexByte(key, ':'); i >= 0 {
		// Multi-stream mode: "account:stream:epoch:shard".
		r.shard = key[i+1:]
		parts := strings.Split(key[:i], ":")
		if len(parts) != 3 {
			r.skip = fmt.Sprintf("leaseKey %q is neither a shard id nor account:stream:epoch:shard", key)
			return r, true
		}
		if parts[1] != stream {
			return r, false
		}
		epoch, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			r.skip = fmt.Sprintf("leaseKey %q has creation epoch %q, not a number", key, parts[2])
			return r, true
		}
		r.epoch = epoch
	}
	if err := ValidateShardID(r.shard); err != nil {
		r.skip = fmt.Sprintf("leaseKey %q does not end in a shard id: %v", key, err)
		return r, true
	}
	if v, ok := item["parentShardId"].(*types.AttributeValueMemberSS); ok {
		for _, p := range v.Value {
			if ValidateShardID(p) == nil {
				r.parents = append(r.parents, p)
			}
		}
	}
	cp, present, ok := stringAttr(item, "checkpoint")
	r.checkpoint = cp
	switch {
	case !ok:
		r.skip = fmt.Sprintf("checkpoint is %s, want a string", avType(item["checkpoint"]))
		return r, true
	case !present || cp == "":
		r.skip = "no checkpoint: no record was processed; the shard starts at the consumer's configured start position"
		return r, true
	case cp == "TRIM_HORIZON" || cp == "LATEST" || cp == "AT_TIMESTAMP":
		r.skip = cp + " means no record was processed yet; the shard starts at the consumer's configured start position"
		return r, true
	case cp == ShardEnd:
		return r, true
	case validCheckpoint(cp, -1) != nil:
		r.skip = fmt.Sprintf("checkpoint %q is neither a sequence number nor a KCL sentinel", cp)
		return r, true
	}
	if v, ok := item["checkpointSubSequenceNumber"].(*types.AttributeValueMemberN); ok {
		if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil && n >= 0 {
			r.sub = n
		}
	}
	return r, true
}
