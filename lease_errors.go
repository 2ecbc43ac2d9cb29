package shardlease

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/shardlease/shardlease/internal/awshint"
)

// errPrefix starts the message of every error this package returns, once.
// Sentinels carry it; an error that wraps another one adds it in front and
// drops it from the wrapped error's text, so a message reads
// "shardlease: stream orders: table orders-leases: lease table not found: ..."
// and not "shardlease: stream orders: table orders-leases: shardlease: ...".
const errPrefix = "shardlease: "

// bare returns err's message without a leading errPrefix.
func bare(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.TrimPrefix(err.Error(), errPrefix)
}

// prefixed returns msg with errPrefix in front, once.
func prefixed(msg string) string { return errPrefix + strings.TrimPrefix(msg, errPrefix) }

// errorf is fmt.Errorf for errors of this package: the message starts with
// errPrefix exactly once, whatever the format and the wrapped errors start
// with, and errors.Is and errors.As find every %w operand as with
// fmt.Errorf.
func errorf(format string, args ...any) error {
	wrapped := fmt.Errorf(format, args...)
	shown := make([]any, len(args))
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil {
			shown[i] = bare(e)
		} else {
			shown[i] = a
		}
	}
	msg := fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), shown...)
	return &prefixedError{msg: prefixed(msg), wrapped: wrapped}
}

// prefixedError is an error made by errorf.
type prefixedError struct {
	msg     string
	wrapped error // what fmt.Errorf made of the same format and operands
}

func (e *prefixedError) Error() string { return e.msg }

// Unwrap returns the %w operands.
func (e *prefixedError) Unwrap() []error {
	switch u := e.wrapped.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}

// StreamNotFoundError reports that the stream does not exist.
type StreamNotFoundError struct {
	Stream string
	Err    error
}

func (e *StreamNotFoundError) Error() string {
	return fmt.Sprintf("shardlease: stream %s not found: create it, or check the stream name, the region and the account the client uses: %v", e.Stream, e.Err)
}

// Unwrap returns the SDK's error.
func (e *StreamNotFoundError) Unwrap() error { return e.Err }

func isFatal(err error) bool {
	var snf *StreamNotFoundError
	return errors.As(err, &snf) || errors.Is(err, ErrTableNotFound) || errors.Is(err, ErrBadTableSchema) || errors.Is(err, ErrStreamRecreated)
}

// PanicError is the error a handler panic is turned into.
type PanicError struct {
	Stream, ShardID string
	Value           any
	Stack           []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("shardlease: handler panicked on stream %s shard %s: %v", e.Stream, e.ShardID, e.Value)
}

var (
	// ErrStreamRecreated means the lease table's rows of a stream belong to
	// an earlier stream of the same name, deleted since: their checkpoints
	// mean nothing to the stream there now. See StreamRecreatedError.
	ErrStreamRecreated = errors.New("shardlease: stream was re-created")
	// ErrCheckpointRejected means Kinesis refused to position a reader
	// after a row's checkpoint (InvalidArgumentException): the sequence
	// number is not one of the shard's. The shard is released and not read
	// until an operator acts (Stats.CheckpointsRejected counts these).
	ErrCheckpointRejected = errors.New("shardlease: checkpoint rejected by Kinesis")
)

// StreamRecreatedError reports that the rows of a stream were written for
// another incarnation of it.
type StreamRecreatedError struct {
	Table    string // empty for stores without a table name
	Recorded StreamIdentity
	Current  StreamIdentity
}

func (e *StreamRecreatedError) Error() string {
	table := "TABLE"
	where := "the lease store"
	if e.Table != "" {
		table, where = e.Table, "table "+e.Table
	}
	return fmt.Sprintf("%v: the rows of stream %s in %s belong to the stream created at %s, but the stream now was created at %s: "+
		"it was deleted and created again, and the old checkpoints do not apply to it (Kinesis reuses shard ids). "+
		"Stop every consumer of the stream, then run 'shardlease adopt-stream -table %s -stream %s' to delete the old rows and record the new stream "+
		"(its shards are then read from the initial position), or use another lease table",
		ErrStreamRecreated, e.Current.Stream, where, e.Recorded.Created.UTC().Format(time.RFC3339Nano), e.Current.Created.UTC().Format(time.RFC3339Nano), table, e.Current.Stream)
}

// Unwrap returns ErrStreamRecreated.
func (e *StreamRecreatedError) Unwrap() error { return ErrStreamRecreated }

// CorruptRow is one row of a listing that could not be decoded.
type CorruptRow struct {
	// Key is the row's lease_key (empty if it has none).
	Key string
	// Err says what is wrong with it; it matches ErrCorruptLease.
	Err error
}

// CorruptRowsError is what a listing (List, ListWithWorkers) returns when
// some rows of the stream cannot be decoded, together with every row that
// could: one corrupt row does not hide the others. It matches
// ErrCorruptLease. A consumer fails at start on it; while running, it leaves
// those rows alone (an Error log and the shardlease.rows.corrupt metric name
// each) and balances the rest.
type CorruptRowsError struct {
	Table, Stream string
	Rows          []CorruptRow
}

func (e *CorruptRowsError) Error() string {
	keys := make([]string, 0, len(e.Rows))
	for _, r := range e.Rows {
		keys = append(keys, fmt.Sprintf("%q", r.Key))
	}
	first := ""
	if len(e.Rows) > 0 {
		first = ": " + bare(e.Rows[0].Err)
	}
	return fmt.Sprintf("shardlease: table %s, stream %s: %d rows cannot be decoded (%s); fix them by hand or delete them%s",
		e.Table, e.Stream, len(e.Rows), strings.Join(keys, ", "), first)
}

// Unwrap returns the rows' errors, each matching ErrCorruptLease.
func (e *CorruptRowsError) Unwrap() []error {
	out := make([]error, 0, len(e.Rows)+1)
	out = append(out, ErrCorruptLease)
	for _, r := range e.Rows {
		out = append(out, r.Err)
	}
	return out
}

// checkRegion fails when client is an SDK client (or anything that reports
// the SDK's options) without a region, before any call is made: the SDK
// would fail every call later, and only after looking for credentials.
// Other implementations (wrappers, fakes) are not checked.
func checkRegion(client any) error {
	var service, region string
	switch c := client.(type) {
	case interface{ Options() dynamodb.Options }:
		service, region = "DynamoDB", c.Options().Region
	case interface{ Options() kinesis.Options }:
		service, region = "Kinesis", c.Options().Region
	default:
		return nil
	}
	if region != "" {
		return nil
	}
	return errorf("%w: the %s client has no AWS region: %s", ErrInvalidConfig, service, awshint.NoRegion)
}

// credentialsHint puts what to do in front of an SDK error whose text does
// not say it: the SDK found no credentials, or the call did not reach its
// service (see endpointHint). It returns any other error, and one it has
// explained already, as it is.
func credentialsHint(err error) error {
	if errors.Is(err, ErrEndpointUnreachable) || err == nil || strings.Contains(err.Error(), awshint.NoCredentials) {
		return err
	}
	if hinted := endpointHint(err); hinted != err {
		return hinted
	}
	if !awshint.IsNoCredentials(err) {
		return err
	}
	return errorf("%s: %w", awshint.NoCredentials, err)
}

// endpointHint wraps an error of a call that could not reach its service
// (nothing listens at the endpoint, its host is unknown, or what answers is
// not the service) in ErrEndpointUnreachable, naming the endpoint, the
// environment variable that sets it and what to do. It returns any other
// error as it is.
func endpointHint(err error) error {
	u, ok := awshint.FindUnreachable(err)
	if !ok {
		return err
	}
	s := awshint.Kinesis
	if awshint.ServiceOf(err) == awshint.DynamoDB.Name {
		s = awshint.DynamoDB
	}
	return errorf("%w: %s: %w", ErrEndpointUnreachable, awshint.EndpointHint(s, u, nil), err)
}

// Sentinel errors. Each store wraps them so that errors.Is finds them, with a
// typed error naming the table and key around them.
var (
	// ErrLeaseLost means a write to a lease the caller held was refused
	// because its owner or counter moved: somebody else took it. The caller
	// must stop processing the shard at once.
	ErrLeaseLost = errors.New("shardlease: lease lost")
	// ErrLeaseHeld means Acquire or RequestHandoff found the lease held by
	// somebody else with a counter other than the one observed.
	ErrLeaseHeld = errors.New("shardlease: lease held by another owner")
	// ErrLeaseNotFound means the row does not exist.
	ErrLeaseNotFound = errors.New("shardlease: lease not found")
	// ErrInvalidName means a stream name, shard id or table name is empty or
	// has characters the service does not allow.
	ErrInvalidName = errors.New("shardlease: invalid name")
	// ErrTableNotFound means the lease table does not exist.
	ErrTableNotFound = errors.New("shardlease: lease table not found")
	// ErrBadTableSchema means the lease table's key schema is not a single
	// string partition key named lease_key.
	ErrBadTableSchema = errors.New("shardlease: lease table has the wrong key schema")
	// ErrCorruptLease means a row's attributes cannot be decoded.
	ErrCorruptLease = errors.New("shardlease: corrupt lease row")
	// ErrInvalidConfig means an option or argument has a value that cannot
	// work.
	ErrInvalidConfig = errors.New("shardlease: invalid configuration")
	// ErrEndpointUnreachable means a call did not reach its AWS service:
	// nothing listens at the endpoint, its host is unknown, or what answers
	// is not the service (another service, a proxy, a web server). The
	// error names the endpoint and the environment variable that sets it.
	// Run fails at start-up on it at once, without retrying.
	ErrEndpointUnreachable = errors.New("shardlease: AWS endpoint unreachable")
	// ErrAlreadyRunning means Run was called a second time on one Consumer
	// or Group: each runs once, so make a new one for another run. The
	// error also matches ErrInvalidConfig, which earlier releases returned.
	ErrAlreadyRunning = errors.New("shardlease: Run was already called")
	// ErrHandlerAbandoned means Run gave up on handlers that did not return
	// when their context was cancelled: their goroutines may still run, and
	// their leases expired instead of being released. The typed error is
	// AbandonedHandlersError, which names the shards.
	ErrHandlerAbandoned = errors.New("shardlease: handlers were abandoned")
)

// alreadyRunning is Run's error on a second call; what names the Consumer
// or Group, e.g. "stream orders".
func alreadyRunning(what, kind string) error {
	msg := fmt.Sprintf("%s: %s: Run was already called on this %s, and a %s runs once: make a new %s with New%s for another run",
		bare(ErrAlreadyRunning), what, kind, kind, kind, kind)
	return &prefixedError{msg: prefixed(msg), wrapped: fmt.Errorf("%w%w", ErrAlreadyRunning, ErrInvalidConfig)}
}

// AbandonedHandlersError is what Run returns, once it has shut down, when
// it abandoned handlers: each did not return within the grace period after
// its context was cancelled (at shutdown, a drain, a handoff or a lost
// lease). Their records may be handled again by the worker that takes the
// lease. It matches ErrHandlerAbandoned.
type AbandonedHandlersError struct {
	// Shards names each abandoned handler's lease, "stream:shard", in the
	// order they were abandoned.
	Shards []LeaseKey
	// Grace is the grace period each handler was given.
	Grace time.Duration
}

// Error names the shards and says what to change in the handler.
func (e *AbandonedHandlersError) Error() string {
	keys := make([]string, 0, len(e.Shards))
	for _, k := range e.Shards {
		keys = append(keys, k.String())
	}
	what := "the handler of " + strings.Join(keys, "") + " did not return within %v of its context being cancelled: its goroutine was left behind and its lease expires"
	if len(keys) != 1 {
		what = fmt.Sprintf("the handlers of %d shards (%s)", len(keys), strings.Join(firstOf(keys, 10), ", ")) +
			" did not return within %v of their context being cancelled: their goroutines were left behind and their leases expire"
	}
	return fmt.Sprintf("%v: "+what+"; a handler must return when ctx.Done() closes: pass ctx to every call it makes and select on ctx.Done() where it waits, or raise WithShutdownTimeout",
		ErrHandlerAbandoned, e.Grace)
}

// Unwrap returns ErrHandlerAbandoned.
func (e *AbandonedHandlersError) Unwrap() error { return ErrHandlerAbandoned }

// LeaseError names the table and lease a store operation failed on. Unwrap
// yields both the sentinel (ErrLeaseLost, ...) and the underlying cause, such
// as the SDK's error.
type LeaseError struct {
	Op    string // "acquire", "renew", "checkpoint", ...
	Table string // empty for MemoryStore
	Key   LeaseKey
	Err   error
}

func (e *LeaseError) Error() string {
	where := e.Key.String()
	if e.Table != "" {
		where = "table " + e.Table + ": " + where
	}
	return fmt.Sprintf("%s%s %s: %s", errPrefix, e.Op, where, bare(e.Err))
}

// Unwrap returns the wrapped error.
func (e *LeaseError) Unwrap() error { return e.Err }

// TableError names the lease table a table-level problem was found in.
type TableError struct {
	Table string
	Err   error
}

func (e *TableError) Error() string {
	return fmt.Sprintf("%stable %s: %s", errPrefix, e.Table, bare(e.Err))
}

// Unwrap returns the wrapped error.
func (e *TableError) Unwrap() error { return e.Err }

// ErrLegacyRow means a shard's own row has no checkpoint while the table
// holds a bare row for the shard (written by an earlier release) with one,
// and the store was not told which stream that row belongs to. The shard is
// not read until the stream is named with WithLegacyStream or the bare row
// is deleted. The typed error is UnattributedLegacyRowError.
var ErrLegacyRow = errors.New("shardlease: unattributed legacy checkpoint row")

// UnattributedLegacyRowError is the error of Acquire and Get for a shard
// whose bare row (keyed by the shard id alone, written by an earlier release)
// holds a checkpoint that no stream was named for. It matches ErrLegacyRow.
type UnattributedLegacyRowError struct {
	Table  string // the lease table
	Shard  string // the shard id, which is also the bare row's lease_key
	Stream string // the stream that asked for the shard
}

func (e *UnattributedLegacyRowError) Error() string {
	return fmt.Sprintf("shardlease: table %s: shard %s of stream %s is not read: the table holds a checkpoint row keyed by the bare shard id %q, "+
		"written by an earlier release, and no stream was named for such rows; if the checkpoint belongs to stream %s, create the store with shardlease.WithLegacyStream(%q), "+
		"otherwise delete the row with lease_key %q from table %s",
		e.Table, e.Shard, e.Stream, e.Shard, e.Stream, e.Stream, e.Shard, e.Table)
}

// Is reports whether target is ErrLegacyRow.
func (e *UnattributedLegacyRowError) Is(target error) bool { return target == ErrLegacyRow }

// ErrImportWrongStream means the rows of the table being imported do not
// fit the stream they were to be imported for: the stream does not list
// some of their shards, or Kinesis rejects their checkpoints. Nothing was
// written. The typed error is ImportMismatchError.
var ErrImportWrongStream = errors.New("shardlease: imported rows do not belong to the stream")

// ImportMismatchError is Import's error when the source rows do not fit the
// stream. It matches ErrImportWrongStream.
type ImportMismatchError struct {
	Format    ImportFormat
	FromTable string        // the source table
	Stream    string        // the stream named to Import
	Unlisted  []string      // shard ids of source rows that the stream does not list
	Rejected  []ImportCheck // checkpoints of listed shards that do not fit them
}

// ImportCheck is one source checkpoint that does not fit its shard.
type ImportCheck struct {
	Shard      string
	Checkpoint string
	Problem    string // what Kinesis (or the shard's sequence number range) says
}

// Error lists the shards and checkpoints that do not fit and says what to
// check.
func (e *ImportMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "shardlease: import %s table %s into stream %s: nothing was written: the rows do not fit the stream", e.Format, e.FromTable, e.Stream)
	if len(e.Unlisted) > 0 {
		fmt.Fprintf(&b, "; the stream does not list %d of their shards (%s)", len(e.Unlisted), strings.Join(firstOf(e.Unlisted, 5), ", "))
	}
	if len(e.Rejected) > 0 {
		fmt.Fprintf(&b, "; %d checkpoints do not fit their shard", len(e.Rejected))
		for i, r := range e.Rejected {
			if i == 3 {
				fmt.Fprintf(&b, "; and %d more", len(e.Rejected)-i)
				break
			}
			fmt.Fprintf(&b, "; shard %s, checkpoint %s: %s", r.Shard, r.Checkpoint, r.Problem)
		}
	}
	fmt.Fprintf(&b, ". The %s table does not name its stream: check that stream %s (and the region and account of the Kinesis client) is the one it was consuming", e.Format, e.Stream)
	if len(e.Unlisted) > 0 && len(e.Rejected) == 0 {
		b.WriteString("; if it is, and the unlisted shards closed and aged out of the stream's retention, import with WithImportForce (the CLI's -force) to skip them")
	}
	return b.String()
}

// Is reports whether target is ErrImportWrongStream.
func (e *ImportMismatchError) Is(target error) bool { return target == ErrImportWrongStream }

// ImportSchemaError is Import's error for a source table whose key is not
// the one of the format asked for. It names the formats Import reads and the
// one the table looks like, if any. It matches ErrBadTableSchema.
type ImportSchemaError struct {
	Table     string
	Format    ImportFormat // the format asked for
	Key       string       // the table's key schema as found, e.g. "HASH ShardID (S)"
	LooksLike string       // the format the key matches, "a shardlease lease table", or ""
}

// Error names the table's key, the format it looks like and the formats
// Import reads.
func (e *ImportSchemaError) Error() string {
	var known []string
	for _, f := range ImportFormats() {
		known = append(known, fmt.Sprintf("%s (key %s)", f, foreignKey(f)))
	}
	msg := fmt.Sprintf("shardlease: import: table %s is not a %s table: its key is %s, where a %s table has exactly one key, the string partition key %q; ",
		e.Table, e.Format, e.Key, e.Format, foreignKey(e.Format))
	switch {
	case e.LooksLike == shardleaseTableLook:
		msg += "it looks like a shardlease lease table, which needs no import; "
	case e.LooksLike != "":
		msg += fmt.Sprintf("it looks like a %s table: import it with format %q; ", e.LooksLike, e.LooksLike)
	default:
		msg += "it looks like none of the formats; check the table name and region; "
	}
	return msg + "the formats are " + strings.Join(known, ", ")
}

// Is reports whether target is ErrBadTableSchema.
func (e *ImportSchemaError) Is(target error) bool { return target == ErrBadTableSchema }

// tableAndStream names a stream, and its lease table when the store has a
// name for it (a MemoryStore has none), for errors and reports.
func tableAndStream(table, stream string) string {
	if table == "" {
		return "stream " + stream
	}
	return fmt.Sprintf("table %s, stream %s", table, stream)
}
