package shardlease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// DynamoDBAPI is the part of the DynamoDB client the store calls.
// *dynamodb.Client satisfies it; wrap one to count calls or inject faults.
// The store never creates tables: CreateTable takes a CreateTableAPI.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// CreateTableAPI is the part of the DynamoDB client CreateTable calls.
// *dynamodb.Client satisfies it.
type CreateTableAPI interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var (
	_ DynamoDBAPI    = (*dynamodb.Client)(nil)
	_ CreateTableAPI = (*dynamodb.Client)(nil)
)

// DynamoStore is a LeaseStore over a DynamoDB table whose only key is the
// string partition key lease_key. Every mutation is one conditional write:
// acquire on "free, or counter as observed"; renew, checkpoint and release on
// "owner and counter are the caller's". Reads are consistent.
//
// One table may serve every stream of a service: rows are keyed
// "stream:shard".
type DynamoStore struct {
	client DynamoDBAPI
	table  string
	cfg    storeConfig

	bareMu sync.Mutex
	bare   map[string]bool // shard ids of bare rows; nil until read (see bareShards)

	floors floorSteps // the fence floors as the table last showed them
}

var (
	_ LeaseStore  = (*DynamoStore)(nil)
	_ WorkerStore = (*DynamoStore)(nil)
)

// StoreOption configures a DynamoStore.
type StoreOption func(*storeConfig)

type storeConfig struct {
	legacyStream string
}

// NewDynamoStore returns a store over table, which must exist (see
// CreateTable). It makes no call; CheckTable verifies the table.
func NewDynamoStore(client DynamoDBAPI, table string, opts ...StoreOption) (*DynamoStore, error) {
	if isNil(client) {
		return nil, errorf("%w: DynamoDB client is nil; pass dynamodb.NewFromConfig(cfg)", ErrInvalidConfig)
	}
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := checkRegion(client); err != nil {
		return nil, &TableError{Table: table, Err: err}
	}
	s := &DynamoStore{client: client, table: table}
	for _, o := range opts {
		o(&s.cfg)
	}
	if s.cfg.legacyStream != "" {
		if err := ValidateStreamName(s.cfg.legacyStream); err != nil {
			return nil, errorf("shardlease: WithLegacyStream: %w", err)
		}
	}
	return s, nil
}

// Table returns the name of the lease table.
func (s *DynamoStore) Table() string { return s.table }

func tableNotFound(table string, cause error) error {
	return &TableError{Table: table, Err: errorf("%w: create it with shardlease.CreateTable(ctx, client, %q) or `shardlease create-table -table %s`, or point the store at the right table and region: %w", ErrTableNotFound, table, table, cause)}
}

// CheckTable verifies that the lease table exists and has the key schema
// the store needs. The consumer calls it once before it starts.
func (s *DynamoStore) CheckTable(ctx context.Context) error {
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
	if err != nil {
		if isNotFound(err) {
			return tableNotFound(s.table, err)
		}
		return &TableError{Table: s.table, Err: errorf("describe: %w", credentialsHint(err))}
	}
	if err := checkSchema(s.table, out.Table); err != nil {
		return err
	}
	if _, err := s.bareShards(ctx); err != nil {
		return &TableError{Table: s.table, Err: err}
	}
	return nil
}

func checkSchema(table string, d *types.TableDescription) error {
	if d == nil {
		return &TableError{Table: table, Err: errors.New("describe returned no table description")}
	}
	have, ok := hasStringHashKey(d, attrKey)
	if ok {
		return nil
	}
	return &TableError{Table: table, Err: errorf("%w: it has key %s, but a lease table needs exactly one key, the string partition key %q; create a new table with shardlease.CreateTable or use another table name",
		ErrBadTableSchema, have, attrKey)}
}

// hasStringHashKey reports whether d's only key is the string partition key
// name, and describes the key schema it has, e.g. "HASH id (N)".
func hasStringHashKey(d *types.TableDescription, name string) (have string, ok bool) {
	var parts []string
	for _, k := range d.KeySchema {
		typ := "?"
		for _, a := range d.AttributeDefinitions {
			if aws.ToString(a.AttributeName) == aws.ToString(k.AttributeName) {
				typ = string(a.AttributeType)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", k.KeyType, aws.ToString(k.AttributeName), typ))
		ok = len(d.KeySchema) == 1 && aws.ToString(k.AttributeName) == name && k.KeyType == types.KeyTypeHash && typ == string(types.ScalarAttributeTypeS)
	}
	return strings.Join(parts, ", "), ok
}

// CreateTable creates a lease table named name with on-demand billing and
// waits until it is active. It succeeds without change when the table exists
// already with the right key schema, and fails with ErrBadTableSchema when it
// exists with another.
func CreateTable(ctx context.Context, client CreateTableAPI, name string) error {
	if isNil(client) {
		return errorf("%w: DynamoDB client is nil", ErrInvalidConfig)
	}
	if err := ValidateTableName(name); err != nil {
		return err
	}
	if err := checkRegion(client); err != nil {
		return &TableError{Table: name, Err: err}
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return &TableError{Table: name, Err: errorf("create: %w", credentialsHint(err))}
	}
	delay := 50 * time.Millisecond
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil && !isNotFound(err) {
			return &TableError{Table: name, Err: errorf("describe: %w", err)}
		}
		if err == nil {
			if err := checkSchema(name, out.Table); err != nil {
				return err
			}
			if out.Table.TableStatus == types.TableStatusActive {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return &TableError{Table: name, Err: errorf("waiting for the table to become active: %w", ctx.Err())}
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func isNotFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}

func condFailed(err error) (*types.ConditionalCheckFailedException, bool) {
	var cf *types.ConditionalCheckFailedException
	ok := errors.As(err, &cf)
	return cf, ok
}

func (s *DynamoStore) fail(op string, key LeaseKey, err error) error {
	if isNotFound(err) {
		err = tableNotFound(s.table, err)
	}
	return &LeaseError{Op: op, Table: s.table, Key: key, Err: credentialsHint(err)}
}

// Create implements LeaseStore.
func (s *DynamoStore) Create(ctx context.Context, key LeaseKey, parents []string) (bool, error) {
	if err := key.Validate(); err != nil {
		return false, s.fail("create", key, err)
	}
	return s.putNew(ctx, key, newRowItem(key, parents, Start{}))
}

// putNew writes item as key's row unless the row exists: created is false,
// with a nil error, when it does.
func (s *DynamoStore) putNew(ctx context.Context, key LeaseKey, item map[string]types.AttributeValue) (created bool, err error) {
	_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(lease_key)"),
	})
	if err != nil {
		if _, ok := condFailed(err); ok {
			return false, nil
		}
		return false, s.fail("create", key, err)
	}
	return true, nil
}

// Get implements LeaseStore. A row without a checkpoint falls back to the
// shard's bare row of an earlier release as Acquire does (see
// WithLegacyStream), except that it copies only into a free row: a held
// row is returned as it is (its holder adopted the bare row when it
// acquired it). The copy is fenced on the counter read and bumps it.
func (s *DynamoStore) Get(ctx context.Context, key LeaseKey) (Lease, error) {
	row, ok, err := s.get(ctx, key)
	if err != nil {
		return Lease{}, s.fail("get", key, err)
	}
	if !ok {
		return Lease{}, s.fail("get", key, ErrLeaseNotFound)
	}
	return s.adoptOnGet(ctx, row)
}

// GetEventually implements NoteStore: Get with an eventually consistent
// read. A bare row of an earlier release is not consulted.
func (s *DynamoStore) GetEventually(ctx context.Context, key LeaseKey) (Lease, error) {
	row, ok, err := s.read(ctx, key, false)
	if err != nil {
		return Lease{}, s.fail("get", key, err)
	}
	if !ok {
		return Lease{}, s.fail("get", key, ErrLeaseNotFound)
	}
	return row, nil
}

// Note implements NoteStore.
func (s *DynamoStore) Note(ctx context.Context, current Lease, note string) (Lease, error) {
	if current.Owner == "" {
		return Lease{}, s.fail("note", current.Key, errorf("%w: the row has no owner to note", ErrInvalidConfig))
	}
	in := &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String("lease_owner = :holder"),
		UpdateExpression:          aws.String("SET lease_note = :note"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":holder": str(current.Owner), ":note": str(note)},
	}
	if note == "" {
		in.UpdateExpression = aws.String("REMOVE lease_note")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":holder": str(current.Owner)}
	}
	row, ok, exists, err := s.update(ctx, current.Key, in)
	switch {
	case err != nil:
		return Lease{}, s.fail("note", current.Key, err)
	case ok:
		return row, nil
	case !exists:
		return Lease{}, s.fail("note", current.Key, ErrLeaseNotFound)
	}
	return Lease{}, s.fail("note", current.Key, errorf("%w: row has owner %q, expected %q", ErrLeaseHeld, row.Owner, current.Owner))
}

// get reads a row consistently; ok is false when it does not exist.
func (s *DynamoStore) get(ctx context.Context, key LeaseKey) (Lease, bool, error) {
	return s.read(ctx, key, true)
}

func (s *DynamoStore) read(ctx context.Context, key LeaseKey, consistent bool) (Lease, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            keyAttr(key),
		ConsistentRead: aws.Bool(consistent),
	})
	if err != nil {
		return Lease{}, false, err
	}
	if len(out.Item) == 0 {
		return Lease{}, false, nil
	}
	row, err := decodeLease(out.Item)
	if err != nil {
		return Lease{}, false, err
	}
	return row, true, nil
}

// List implements LeaseStore. It lists "stream:shard" rows only: bare rows
// of an earlier release are neither listed nor consulted, and worker rows
// are left out.
func (s *DynamoStore) List(ctx context.Context, stream string) ([]Lease, error) {
	leases, _, err := s.ListWithWorkers(ctx, stream)
	return leases, err
}

// ListWithWorkers implements WorkerStore: one consistent Scan returns the
// stream's leases and its worker rows.
func (s *DynamoStore) ListWithWorkers(ctx context.Context, stream string) ([]Lease, []Worker, error) {
	return s.listWithWorkers(ctx, stream, true)
}

// ListWithWorkersEventually implements EventualLister: the same Scan,
// eventually consistent, for half the read capacity.
func (s *DynamoStore) ListWithWorkersEventually(ctx context.Context, stream string) ([]Lease, []Worker, error) {
	return s.listWithWorkers(ctx, stream, false)
}

func (s *DynamoStore) listWithWorkers(ctx context.Context, stream string, consistent bool) ([]Lease, []Worker, error) {
	if err := ValidateStreamName(stream); err != nil {
		return nil, nil, err
	}
	filter := &rowFilter{expr: "begins_with(lease_key, :prefix)", vals: map[string]types.AttributeValue{":prefix": str(stream + ":")}}
	keep := func(s string) bool { return s == stream }
	return s.scanRows(ctx, "list stream "+stream, stream, stream, keep, filter, consistent)
}

// ListStreams implements GroupLister with one Scan of the whole table:
// reading every row costs the same whether DynamoDB or the store drops the
// rows of other streams, and a filter of many streams would not fit in one
// expression.
func (s *DynamoStore) ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]Lease, []Worker, error) {
	want := make(map[string]bool, len(streams))
	for _, st := range streams {
		if err := ValidateStreamName(st); err != nil {
			return nil, nil, err
		}
		want[st] = true
	}
	if err := ValidateStreamName(workersOf); err != nil {
		return nil, nil, err
	}
	what := "list streams " + strings.Join(streams, ",")
	return s.scanRows(ctx, what, strings.Join(streams, ","), workersOf, func(st string) bool { return want[st] }, nil, consistent)
}

// rowFilter is a Scan's filter expression and its values.
type rowFilter struct {
	expr string
	vals map[string]types.AttributeValue
}

// scanRows scans the table (with filter, when not nil) and returns the
// lease rows whose stream keep accepts, ordered by stream and shard, and the
// worker rows of workersOf, ordered by owner. Rows of other streams are not
// decoded, so a corrupt one does not fail the listing; what names the
// listing in errors, and named the streams in a CorruptRowsError.
func (s *DynamoStore) scanRows(ctx context.Context, what, named, workersOf string, keep func(string) bool, filter *rowFilter, consistent bool) ([]Lease, []Worker, error) {
	var leases []Lease
	var workers []Worker
	var corrupt []CorruptRow
	var start map[string]types.AttributeValue
	packed := make(map[string]map[string]PackedCheckpoint)
	for {
		in := &dynamodb.ScanInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(consistent), ExclusiveStartKey: start}
		if filter != nil {
			in.FilterExpression, in.ExpressionAttributeValues = aws.String(filter.expr), filter.vals
		}
		page, err := s.client.Scan(ctx, in)
		if err != nil {
			if isNotFound(err) {
				err = tableNotFound(s.table, err)
			}
			return nil, nil, errorf("shardlease: %s in table %s: %w", what, s.table, credentialsHint(err))
		}
		for _, item := range page.Items {
			k, _ := item[attrKey].(*types.AttributeValueMemberS)
			if k != nil && isIdentityKey(k.Value) {
				s.sawFloorRow(k.Value, item)
				continue
			}
			if scannedPacked(packed, item) {
				continue // a session that ended: no worker
			}
			if w, ok, err := decodeWorker(item, workersOf); ok {
				if err != nil {
					corrupt = append(corrupt, CorruptRow{Key: avString(item[attrKey]), Err: err})
					continue
				}
				workers = append(workers, w)
				continue
			}
			if k != nil {
				st, rest, _ := strings.Cut(k.Value, ":")
				if !keep(st) || strings.HasPrefix(rest, workerMark) {
					continue // another stream's row, or its worker row
				}
			}
			row, err := decodeLease(item)
			if err != nil {
				corrupt = append(corrupt, CorruptRow{Key: avString(item[attrKey]), Err: err})
				continue
			}
			if keep(row.Key.Stream) {
				leases = append(leases, row)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	slices.SortFunc(leases, func(a, b Lease) int {
		return cmp.Or(strings.Compare(a.Key.Stream, b.Key.Stream), strings.Compare(a.Key.Shard, b.Key.Shard))
	})
	slices.SortFunc(workers, func(a, b Worker) int { return strings.Compare(a.Owner, b.Owner) })
	leases = s.mergeScanned(ctx, leases, packed, consistent)
	if len(corrupt) > 0 {
		return leases, workers, &TableError{Table: s.table, Err: &CorruptRowsError{Table: s.table, Stream: named, Rows: corrupt}}
	}
	return leases, workers, nil
}

// Heartbeat implements WorkerStore with one unconditional UpdateItem.
func (s *DynamoStore) Heartbeat(ctx context.Context, stream, owner string) (Worker, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return Worker{}, s.fail("heartbeat", workerKey(w), err)
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(workerKey(w)),
		UpdateExpression:          aws.String("SET lease_owner = :owner, lease_counter = if_not_exists(lease_counter, :zero) + :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": str(owner), ":zero": num(0), ":one": num(1)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
			// The only attribute the update reads is the counter.
			err = errorf("%w: worker row %q: %w; delete the row (the worker writes it again)", ErrCorruptLease, w.Key(), err)
		}
		return Worker{}, s.fail("heartbeat", workerKey(w), err)
	}
	got, _, err := decodeWorker(out.Attributes, stream)
	if err != nil {
		return Worker{}, s.fail("heartbeat", workerKey(w), err)
	}
	return got, nil
}

// RemoveWorker implements WorkerStore with one conditional DeleteItem.
func (s *DynamoStore) RemoveWorker(ctx context.Context, w Worker) (bool, error) {
	if err := checkWorker(ctx, w); err != nil {
		return false, s.fail("remove worker", workerKey(w), err)
	}
	// A row with packed checkpoints ends rather than goes (lease_packed.go).
	removed, err := s.removeWorker(ctx, w)
	if err != nil {
		return false, s.fail("remove worker", workerKey(w), err)
	}
	return removed, nil
}

// update runs one conditional UpdateItem returning the new row. On a failed
// condition it returns the row as it is now (ok=false, exists reports whether
// the row is there), read from the failure itself when the service returns
// it, else by one consistent read.
func (s *DynamoStore) update(ctx context.Context, key LeaseKey, in *dynamodb.UpdateItemInput) (row Lease, ok, exists bool, err error) {
	in.TableName = aws.String(s.table)
	in.Key = keyAttr(key)
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := s.client.UpdateItem(ctx, in)
	if err == nil {
		row, err := decodeLease(out.Attributes)
		return row, err == nil, true, err
	}
	cf, failed := condFailed(err)
	if !failed {
		return Lease{}, false, false, err
	}
	if len(cf.Item) > 0 {
		row, err := decodeLease(cf.Item)
		return row, false, err == nil, err
	}
	row, exists, err = s.get(ctx, key)
	return row, false, exists, err
}

// Acquire implements LeaseStore. It first reserves the counter it writes
// from the stream's fence floor row (see lease_floor.go): one UpdateItem
// there, then the conditional UpdateItem on the lease row. A free row is
// taken whatever counter was observed, as long as its counter is below the
// one reserved; a free row whose counter passed it is read again and
// tried once more. When the acquired row has no checkpoint, the shard's
// bare row of an earlier release is consulted (see WithLegacyStream): its
// checkpoint is adopted into the returned lease, or the lease is released
// again and an UnattributedLegacyRowError returned.
func (s *DynamoStore) Acquire(ctx context.Context, key LeaseKey, owner string, observed int64) (Lease, error) {
	return s.acquireIn(ctx, key, owner, observed, nil)
}

// acquireIn is Acquire, which records on the row that session keeps the
// lease when session is not nil (AcquireInSession) and clears any such
// record otherwise.
func (s *DynamoStore) acquireIn(ctx context.Context, key LeaseKey, owner string, observed int64, session *Worker) (Lease, error) {
	if owner == "" {
		return Lease{}, s.fail("acquire", key, errorf("%w: owner id is empty", ErrInvalidConfig))
	}
	for attempt := 1; ; attempt++ {
		f, err := s.reserve(ctx, key, observed)
		if err != nil {
			return Lease{}, s.fail("acquire", key, err)
		}
		mk := func() *dynamodb.UpdateItemInput { return s.acquireInput(ctx, owner, observed, f, session) }
		l, seen, err := s.claimCarrying(ctx, key, owner, f.counter, observed, mk, func(row Lease) error {
			return errorf("%w: held by %q at counter %d, observed %d", ErrLeaseHeld, row.Owner, row.Counter, observed)
		})
		if err == nil || attempt == 2 || seen.Owner != "" || seen.Key != key {
			return l, err
		}
		observed = seen.Counter // free, its counter moved past the reservation
	}
}

// acquireInput is the UpdateItem of an acquire observed at observed that
// writes the reserved floor f; on the row's incarnation too when ctx
// carries the one observed (see withObservedRow). It records session on
// the row when session is not nil, and clears the record otherwise.
func (s *DynamoStore) acquireInput(ctx context.Context, owner string, observed int64, f fenceFloor, session *Worker) *dynamodb.UpdateItemInput {
	vals := map[string]types.AttributeValue{":owner": str(owner), ":observed": num(observed), ":c": num(f.counter), ":e": num(f.epoch)}
	set := "SET lease_owner = :owner, lease_counter = :c, " + attrFenceEpoch + " = :e"
	remove := " REMOVE handoff_to, lease_expiry, lease_note, " + attrSession + ", " + attrSessionGen
	switch d := HolderLeaseDuration(ctx); {
	case session != nil:
		set += ", " + sessionRecordSet(vals, *session, d)
		remove = " REMOVE handoff_to, lease_expiry, lease_note"
	case d > 0:
		set += ", lease_duration = :dur"
		vals[":dur"] = durationAttr(d)
	default:
		remove += ", lease_duration"
	}
	cond := "attribute_exists(lease_key) AND ((attribute_not_exists(lease_owner) AND lease_counter < :c) OR lease_counter = :observed)"
	switch inc, ok := observedIncarnation(ctx); {
	case ok && inc != "":
		cond += " AND " + attrIncarnation + " = :inc"
		vals[":inc"] = str(inc)
	case ok:
		cond += " AND attribute_not_exists(" + attrIncarnation + ")"
	}
	return &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String(cond),
		UpdateExpression:          aws.String(set + remove),
		ExpressionAttributeValues: vals,
	}
}

// acquire runs in, an UpdateItem that makes owner the holder of key's row
// and moves its counter to wrote when its condition holds, and passes the
// row it wrote to adoptAfterAcquire. A failed condition whose row shows
// that very write (its reply was lost and its retry failed) counts as done;
// any other fails with held(row).
func (s *DynamoStore) acquire(ctx context.Context, key LeaseKey, owner string, wrote int64, in *dynamodb.UpdateItemInput, held func(row Lease) error) (Lease, error) {
	if owner == "" {
		return Lease{}, s.fail("acquire", key, errorf("%w: owner id is empty", ErrInvalidConfig))
	}
	row, ok, exists, err := s.update(ctx, key, in)
	switch {
	case err != nil:
		return Lease{}, s.fail("acquire", key, err)
	case ok:
		return s.adoptAfterAcquire(ctx, row)
	case !exists:
		return Lease{}, s.fail("acquire", key, ErrLeaseNotFound)
	case row.Owner == owner && row.Counter == wrote:
		// Our own write, whose reply was lost and whose retry failed.
		return s.adoptAfterAcquire(ctx, row)
	}
	return Lease{}, s.fail("acquire", key, held(row))
}

// AcquireAt makes owner the holder of key only if the row's counter still
// equals counter, whether the row is held or free; otherwise it fails with
// ErrLeaseHeld (ErrLeaseNotFound for a missing row). Operators' tools use it
// so that they change exactly the row they showed: a free row that a
// consumer took and released meanwhile (its counter moved, and perhaps its
// checkpoint) is not taken. Its holding hands no fence token to a handler,
// so it reserves none: it moves the counter by one.
func (s *DynamoStore) AcquireAt(ctx context.Context, key LeaseKey, owner string, counter int64) (Lease, error) {
	vals := map[string]types.AttributeValue{":owner": str(owner), ":observed": num(counter), ":one": num(1)}
	// Like Acquire it clears a session's record: the tool keeps the row
	// by its own writes.
	update := "SET lease_owner = :owner, lease_counter = lease_counter + :one REMOVE handoff_to, lease_expiry, lease_duration, lease_note, " + attrSession + ", " + attrSessionGen
	if d := HolderLeaseDuration(ctx); d > 0 {
		// A tool that took the row from a holder keeps the holder's lease
		// duration on it from this write on, as Acquire does.
		update = "SET lease_owner = :owner, lease_counter = lease_counter + :one, lease_duration = :dur REMOVE handoff_to, lease_expiry, lease_note, " + attrSession + ", " + attrSessionGen
		vals[":dur"] = durationAttr(d)
	}
	mk := func() *dynamodb.UpdateItemInput {
		return &dynamodb.UpdateItemInput{
			ConditionExpression:       aws.String("lease_counter = :observed"),
			UpdateExpression:          aws.String(update),
			ExpressionAttributeValues: maps.Clone(vals),
		}
	}
	l, _, err := s.claimCarrying(ctx, key, owner, counter+1, counter, mk, func(row Lease) error {
		return errorf("%w: owner %q at counter %d, expected counter %d", ErrLeaseHeld, row.Owner, row.Counter, counter)
	})
	return l, err
}

// write runs a holder's write (renew, checkpoint, release) under the
// condition that owner and counter are held's. mine reports whether a row
// seen after a failed condition is the result of this very write, whose
// reply was lost and whose retry then failed.
func (s *DynamoStore) write(ctx context.Context, op string, held Lease, in *dynamodb.UpdateItemInput, mine func(Lease) bool) (Lease, error) {
	if held.Owner == "" {
		return Lease{}, s.fail(op, held.Key, errorf("%w: the handle has no owner; pass a lease returned by Acquire", ErrLeaseLost))
	}
	cond := "lease_owner = :me AND lease_counter = :mine"
	if in.ConditionExpression != nil {
		cond += " AND " + aws.ToString(in.ConditionExpression)
	}
	in.ConditionExpression = aws.String(cond)
	if in.ExpressionAttributeValues == nil {
		in.ExpressionAttributeValues = map[string]types.AttributeValue{}
	}
	in.ExpressionAttributeValues[":me"] = str(held.Owner)
	in.ExpressionAttributeValues[":mine"] = num(held.Counter)
	in.ExpressionAttributeValues[":one"] = num(1)
	if d := HolderLeaseDuration(ctx); d > 0 && op != "release" && held.Session == "" {
		// SET is the first clause of every renew and checkpoint update.
		// A row a session keeps keeps its "session" in place of the
		// number (the session's row has the duration); the condition
		// makes sure of it, should the handle not show the record.
		in.UpdateExpression = aws.String(strings.Replace(aws.ToString(in.UpdateExpression), "SET ", "SET lease_duration = :dur, ", 1))
		in.ExpressionAttributeValues[":dur"] = durationAttr(d)
		in.ConditionExpression = aws.String(aws.ToString(in.ConditionExpression) + " AND attribute_not_exists(" + attrSession + ")")
	}
	if lag, ok := HolderLag(ctx); ok && op != "release" {
		in.UpdateExpression = aws.String(lagUpdate(aws.ToString(in.UpdateExpression), in.ExpressionAttributeValues, lag, held))
	}
	row, ok, exists, err := s.update(ctx, held.Key, in)
	switch {
	case err != nil:
		return Lease{}, s.fail(op, held.Key, err)
	case ok:
		return row, nil
	case !exists:
		return Lease{}, s.fail(op, held.Key, errorf("%w: %w", ErrLeaseLost, ErrLeaseNotFound))
	case row.Counter == held.Counter+1 && mine(row):
		return row, nil
	case op != "release" && row.Owner == held.Owner && row.Counter == held.Counter && row.Session != "" && held.Session == "":
		return row, s.fail(op, held.Key, errorf("%w: the row is kept by session %s, which the handle does not name; pass the lease as the store last returned it", ErrInvalidConfig, row.Session))
	}
	return row, s.fail(op, held.Key, errorf("%w: row has owner %q counter %d, handle has owner %q counter %d", ErrLeaseLost, row.Owner, row.Counter, held.Owner, held.Counter))
}

// Renew implements LeaseStore.
func (s *DynamoStore) Renew(ctx context.Context, held Lease, expiry time.Time) (Lease, error) {
	return s.write(ctx, "renew", held, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET lease_counter = lease_counter + :one, lease_expiry = :expiry"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":expiry": expiryAttr(expiry)},
	}, func(row Lease) bool { return row.Owner == held.Owner && row.Expiry.UnixMilli() == expiry.UnixMilli() })
}

// Checkpoint implements LeaseStore.
func (s *DynamoStore) Checkpoint(ctx context.Context, held Lease, checkpoint string, subSequence int64, expiry time.Time) (Lease, error) {
	if err := validCheckpoint(checkpoint, subSequence); err != nil {
		return Lease{}, s.fail("checkpoint", held.Key, err)
	}
	vals := map[string]types.AttributeValue{":expiry": expiryAttr(expiry)}
	set, remove := checkpointSet(vals, checkpoint, subSequence)
	in := &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET lease_counter = lease_counter + :one, lease_expiry = :expiry, " + set + remove),
		ExpressionAttributeValues: vals,
	}
	return s.write(ctx, "checkpoint", held, in, func(row Lease) bool {
		return row.Owner == held.Owner && row.Checkpoint == checkpoint && row.SubSequence == subSequence && row.Expiry.UnixMilli() == expiry.UnixMilli()
	})
}

// Release implements LeaseStore. A handoff goes to the taker only while the
// row still names it: a request withdrawn meanwhile frees the lease instead
// (and one made anew goes to its taker).
func (s *DynamoStore) Release(ctx context.Context, held Lease) (Lease, error) {
	row, err := s.release(ctx, held)
	for range 2 {
		if err == nil || held.HandoffTo == "" || row.Owner != held.Owner || row.Counter != held.Counter || row.HandoffTo == held.HandoffTo {
			break
		}
		held.HandoffTo = row.HandoffTo
		row, err = s.release(ctx, held)
	}
	if err != nil && errors.Is(err, ErrLeaseLost) && row.Key == held.Key && row.Owner == "" {
		return row, nil // free already: releasing twice is harmless
	}
	if err != nil {
		return Lease{}, err
	}
	return row, nil
}

func (s *DynamoStore) release(ctx context.Context, held Lease) (Lease, error) {
	in := &dynamodb.UpdateItemInput{}
	// A session's record goes: its session keeps the lease no more (nor
	// the taker's, after a handoff). Its "session" in lease_duration goes
	// with it, so that releases from before sessions take the row again.
	clear := ", " + attrSession + ", " + attrSessionGen
	if held.Session != "" {
		clear += ", lease_duration"
	}
	if held.HandoffTo != "" {
		in.ConditionExpression = aws.String("handoff_to = :taker")
		in.UpdateExpression = aws.String("SET lease_owner = :taker, lease_counter = lease_counter + :one REMOVE handoff_to, lease_expiry, lease_note" + clear)
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":taker": str(held.HandoffTo)}
	} else {
		in.UpdateExpression = aws.String("SET lease_counter = lease_counter + :one REMOVE lease_owner, handoff_to, lease_expiry, lease_note" + clear)
	}
	return s.write(ctx, "release", held, in, func(row Lease) bool { return row.Owner == held.HandoffTo })
}

// RequestHandoff implements LeaseStore.
func (s *DynamoStore) RequestHandoff(ctx context.Context, current Lease, taker string) (Lease, error) {
	if taker == "" || current.Owner == "" {
		return Lease{}, s.fail("request handoff", current.Key, errorf("%w: taker %q and current owner %q must both be set", ErrInvalidConfig, taker, current.Owner))
	}
	row, ok, exists, err := s.update(ctx, current.Key, &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String("lease_owner = :holder AND attribute_not_exists(handoff_to)"),
		UpdateExpression:          aws.String("SET handoff_to = :taker"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":holder": str(current.Owner), ":taker": str(taker)},
	})
	switch {
	case err != nil:
		return Lease{}, s.fail("request handoff", current.Key, err)
	case ok:
		return row, nil
	case !exists:
		return Lease{}, s.fail("request handoff", current.Key, ErrLeaseNotFound)
	case row.Owner == current.Owner && row.HandoffTo == taker:
		return row, nil // our own request, whose reply was lost
	}
	return Lease{}, s.fail("request handoff", current.Key, errorf("%w: row has owner %q, handoff to %q; expected owner %q and no handoff", ErrLeaseHeld, row.Owner, row.HandoffTo, current.Owner))
}

// WithdrawHandoff implements HandoffWithdrawer with one conditional
// UpdateItem on handoff_to = taker.
func (s *DynamoStore) WithdrawHandoff(ctx context.Context, key LeaseKey, taker string) (bool, error) {
	if taker == "" {
		return false, s.fail("withdraw handoff", key, errorf("%w: taker owner id is empty", ErrInvalidConfig))
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(key),
		ConditionExpression:       aws.String("handoff_to = :taker"),
		UpdateExpression:          aws.String("REMOVE handoff_to"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":taker": str(taker)},
	})
	if err != nil {
		if _, ok := condFailed(err); ok {
			return false, nil
		}
		return false, s.fail("withdraw handoff", key, err)
	}
	return true, nil
}

var _ HandoffWithdrawer = (*DynamoStore)(nil)
