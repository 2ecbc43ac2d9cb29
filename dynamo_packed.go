package shardlease

// The DynamoStore's packed checkpoints (see lease_packed.go). A worker row
// carries them in session_packed (M): one entry a lease, named by its shard
// id (packedName), whose value is a binary of a few dozen bytes
// (encodePacked), so that about ten entries and the row fit one 1 KB write
// unit; an UpdateItem is
// billed on the larger of the item before and after, so the row holds
// nothing else of size. session_end (N), present once the session ended
// with entries, makes the row read as gone to every session operation and
// listing while its entries wait for the claims of their leases.

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Attribute names of packed checkpoints, on the worker row.
const (
	attrPacked     = "session_packed" // M: lease key → packed checkpoint (B)
	attrSessionEnd = "session_end"    // N: 1 once the session ended with entries left
)

// maxPackedPerKeep bounds the entries one keep writes or removes: an
// update expression holds at most 4 KB. The rest wait for the next keep.
const maxPackedPerKeep = 100

var _ PackedCheckpointStore = (*DynamoStore)(nil)

// Kinds of packed checkpoint, the byte before the checkpoint's own bytes.
const (
	packedDecimal  = 0 // a decimal sequence number, as its big-endian bytes
	packedShardEnd = 1 // ShardEnd
	packedRaw      = 2 // any other string, as it is
)

// encodePacked returns e's value: the counter, the sub-sequence plus one,
// the lag (behind-latest ms plus one, 0 for none, then the checkpoint age
// in ms), the kind and the checkpoint's bytes.
func encodePacked(e PackedCheckpoint) []byte {
	b := binary.AppendUvarint(nil, uint64(e.Counter))
	b = binary.AppendUvarint(b, uint64(e.SubSequence+1))
	if e.Lag == nil {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(e.Lag.BehindLatest.Milliseconds())+1)
		b = binary.AppendUvarint(b, uint64(e.Lag.CheckpointAge.Milliseconds()))
	}
	n, ok := new(big.Int).SetString(e.Checkpoint, 10)
	switch {
	case e.Checkpoint == ShardEnd:
		return append(b, packedShardEnd)
	case ok && n.Sign() > 0 && n.String() == e.Checkpoint:
		return append(append(b, packedDecimal), n.Bytes()...)
	}
	return append(append(b, packedRaw), e.Checkpoint...)
}

// shardPrefix starts every Kinesis shard id.
const shardPrefix = "shardId-"

// packedName is the name of lease k's entry on a worker row of stream: the
// shard id alone for a lease of stream, with "~" for its usual prefix, else
// the whole lease key (a Group's session keeps leases of many streams). So
// an entry of a Consumer's lease takes about 50 bytes, however long the
// stream's name.
func packedName(stream string, k LeaseKey) string {
	switch {
	case k.Stream != stream:
		return k.String()
	case strings.HasPrefix(k.Shard, shardPrefix):
		return "~" + strings.TrimPrefix(k.Shard, shardPrefix)
	}
	return k.Shard
}

// packedLeaseKey is the lease key of the entry named name on a worker row
// of stream (see packedName).
func packedLeaseKey(stream, name string) (LeaseKey, error) {
	switch {
	case strings.Contains(name, ":"):
		return ParseLeaseKey(name)
	case strings.HasPrefix(name, "~"):
		name = shardPrefix + name[1:]
	}
	k := LeaseKey{Stream: stream, Shard: name}
	return k, k.Validate()
}

// decodePacked decodes the value of the entry named name on worker row w.
func decodePacked(w LeaseKey, name string, v []byte) (PackedCheckpoint, error) {
	bad := func(what string) (PackedCheckpoint, error) {
		return PackedCheckpoint{}, errorf("%w: worker row %q: packed checkpoint %q: %s; remove the entry from %s (the lease row's own checkpoint is used)", ErrCorruptLease, w, name, what, attrPacked)
	}
	lk, err := packedLeaseKey(w.Stream, name)
	if err != nil {
		return bad("not a lease key")
	}
	e := PackedCheckpoint{Key: lk}
	next := func() (uint64, bool) {
		x, k := binary.Uvarint(v)
		if k <= 0 {
			return 0, false
		}
		v = v[k:]
		return x, true
	}
	counter, ok1 := next()
	sub, ok2 := next()
	behind, ok3 := next()
	if !ok1 || !ok2 || !ok3 {
		return bad("truncated")
	}
	e.Counter, e.SubSequence = int64(counter), int64(sub)-1
	if behind > 0 {
		age, ok := next()
		if !ok {
			return bad("truncated")
		}
		e.Lag = &Lag{BehindLatest: msDuration(int64(behind - 1)), CheckpointAge: msDuration(int64(age))}
	}
	if len(v) == 0 {
		return bad("no checkpoint")
	}
	switch v[0] {
	case packedShardEnd:
		e.Checkpoint = ShardEnd
	case packedDecimal:
		e.Checkpoint = new(big.Int).SetBytes(v[1:]).String()
	case packedRaw:
		e.Checkpoint = string(v[1:])
	default:
		return bad("unknown kind " + strconv.Itoa(int(v[0])))
	}
	return e, nil
}

// decodePackedAttr decodes the entries of a worker row, by lease key.
func decodePackedAttr(item map[string]types.AttributeValue) (map[string]PackedCheckpoint, error) {
	av, present := item[attrPacked]
	if !present {
		return nil, nil
	}
	w := LeaseKey{}
	if k, ok := item[attrKey].(*types.AttributeValueMemberS); ok {
		w.Stream, w.Shard, _ = strings.Cut(k.Value, ":")
	}
	m, ok := av.(*types.AttributeValueMemberM)
	if !ok {
		return nil, errorf("%w: worker row %q: attribute %s is not a map; remove it (the lease rows' own checkpoints are used)", ErrCorruptLease, w, attrPacked)
	}
	out := make(map[string]PackedCheckpoint, len(m.Value))
	for k, v := range m.Value {
		b, ok := v.(*types.AttributeValueMemberB)
		if !ok {
			continue
		}
		e, err := decodePacked(w, k, b.Value)
		if err != nil {
			return nil, err
		}
		out[e.Key.String()] = e
	}
	return out, nil
}

// endedRow reports whether item is a worker row whose session ended with
// entries left.
func endedRow(item map[string]types.AttributeValue) bool {
	_, ok := item[attrSessionEnd]
	return ok
}

// keepPacked is one keep of sess: the counter bumped, the holder's lease
// duration written, the mail cleared (and returned), put written and drop
// removed, conditional on the generation of a session not ended.
func (s *DynamoStore) keepPacked(ctx context.Context, sess Worker, put []PackedCheckpoint, drop []LeaseKey) (Worker, []string, error) {
	in := keepInput(ctx, s.table, sess, put, drop)
	out, err := s.client.UpdateItem(ctx, in)
	if isValidation(err) && len(put) > 0 {
		// A row without the map (opened by a release before packed
		// checkpoints): make it, then keep once more.
		if err = s.makePackedMap(ctx, sess); err == nil {
			out, err = s.client.UpdateItem(ctx, in)
		}
	}
	if cf, ok := condFailed(err); ok {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), s.keepRefused(ctx, sess, cf))
	}
	if err != nil {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), workerCorrupt(sess, err))
	}
	old, err := decodeSessionRow(out.Attributes, sess)
	if err != nil {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), err)
	}
	mail, err := decodeMail(out.Attributes, sess)
	if err != nil {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), err)
	}
	kept := old
	kept.Counter++
	if d := HolderLeaseDuration(ctx); d > 0 {
		kept.Duration = d
	}
	return kept, mail, nil
}

// keepInput is the UpdateItem of a keep of sess writing put and removing
// drop.
func keepInput(ctx context.Context, table string, sess Worker, put []PackedCheckpoint, drop []LeaseKey) *dynamodb.UpdateItemInput {
	vals := map[string]types.AttributeValue{":g": num(sess.Gen), ":one": num(1)}
	names := map[string]string{}
	set := []string{"lease_counter = lease_counter + :one"}
	if d := HolderLeaseDuration(ctx); d > 0 {
		set = append(set, attrDuration+" = :dur")
		vals[":dur"] = durationAttr(d)
	}
	for i, e := range put {
		n := "#p" + strconv.Itoa(i)
		names[n] = packedName(sess.Stream, e.Key)
		set = append(set, attrPacked+"."+n+" = :p"+strconv.Itoa(i))
		vals[":p"+strconv.Itoa(i)] = &types.AttributeValueMemberB{Value: encodePacked(e)}
	}
	remove := []string{attrSessionMail}
	for i, k := range drop {
		n := "#d" + strconv.Itoa(i)
		names[n] = packedName(sess.Stream, k)
		remove = append(remove, attrPacked+"."+n)
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 keyAttr(workerKey(sess)),
		ConditionExpression:                 aws.String(attrSessionGen + " = :g AND attribute_not_exists(" + attrSessionEnd + ")"),
		UpdateExpression:                    aws.String("SET " + strings.Join(set, ", ") + " REMOVE " + strings.Join(remove, ", ")),
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(names) > 0 {
		in.ExpressionAttributeNames = names
	}
	return in
}

// isValidation reports whether err is DynamoDB's ValidationException.
func isValidation(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException"
}

// makePackedMap gives sess's row an empty entry map when it has none.
func (s *DynamoStore) makePackedMap(ctx context.Context, sess Worker) error {
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(workerKey(sess)),
		ConditionExpression:       aws.String(attrSessionGen + " = :g"),
		UpdateExpression:          aws.String("SET " + attrPacked + " = if_not_exists(" + attrPacked + ", :empty)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": num(sess.Gen), ":empty": emptyMap()},
	})
	return err
}

// emptyMap is an empty M.
func emptyMap() types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
}

// KeepPacked implements PackedCheckpointStore with one UpdateItem, as
// KeepSession. At most maxPackedPerKeep entries are written or removed a
// keep: more fail with ErrInvalidConfig.
func (s *DynamoStore) KeepPacked(ctx context.Context, sess Worker, put []PackedCheckpoint, drop []LeaseKey) (Worker, []string, error) {
	if err := checkSession(ctx, sess); err != nil {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), err)
	}
	if err := checkPacked(put, drop); err != nil {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), err)
	}
	if len(put)+len(drop) > maxPackedPerKeep {
		return Worker{}, nil, s.fail("keep session", workerKey(sess), errorf("%w: %d packed checkpoints written or removed in one keep; at most %d fit one update expression", ErrInvalidConfig, len(put)+len(drop), maxPackedPerKeep))
	}
	return s.keepPacked(ctx, sess, put, drop)
}

// ReadPacked implements PackedCheckpointStore with one consistent GetItem.
func (s *DynamoStore) ReadPacked(ctx context.Context, stream, owner string) ([]PackedCheckpoint, error) {
	w := Worker{Stream: stream, Owner: owner}
	if err := checkWorker(ctx, w); err != nil {
		return nil, s.fail("read packed checkpoints", workerKey(w), err)
	}
	entries, _, err := s.readPacked(ctx, workerKey(w), true)
	if err != nil {
		return nil, s.fail("read packed checkpoints", workerKey(w), err)
	}
	out := make([]PackedCheckpoint, 0, len(entries))
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		out = append(out, entries[k])
	}
	return out, nil
}

// readPacked reads the entries of the worker row key and the row itself
// (nil when gone).
func (s *DynamoStore) readPacked(ctx context.Context, key LeaseKey, consistent bool) (map[string]PackedCheckpoint, map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyAttr(key), ConsistentRead: aws.Bool(consistent)})
	if err != nil {
		return nil, nil, err
	}
	entries, err := decodePackedAttr(out.Item)
	return entries, out.Item, err
}

// msDuration is n milliseconds.
func msDuration(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// noEntries is the condition that a worker row carries no packed
// checkpoint, with :zero in vals.
const noEntries = "(attribute_not_exists(" + attrPacked + ") OR size(" + attrPacked + ") = :zero)"

// endSession ends the session w (its counter and generation) whose row
// carries entries: the row is marked ended, its mail cleared, and then
// settled. ended reports whether the session is over (marked by this call,
// or ended, gone or of another generation already); it is false when the
// row moved past w.Counter: the session lives.
func (s *DynamoStore) endSession(ctx context.Context, w Worker) (ended bool, err error) {
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(workerKey(w)),
		ConditionExpression:       aws.String("lease_counter = :c AND " + attrSessionGen + " = :g AND attribute_not_exists(" + attrSessionEnd + ")"),
		UpdateExpression:          aws.String("SET " + attrSessionEnd + " = :one REMOVE " + attrSessionMail),
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": num(w.Counter), ":g": num(w.Gen), ":one": num(1)},
	})
	if _, failed := condFailed(err); failed {
		_, item, err := s.readPacked(ctx, workerKey(w), true)
		if err != nil {
			return false, err
		}
		row, _ := decodeSessionRow(item, w)
		return len(item) == 0 || endedRow(item) || row.Gen != w.Gen, nil
	}
	if err != nil {
		return false, err
	}
	return true, s.settle(ctx, w)
}

// settle removes from the ended row of w the entries their lease rows no
// longer back (read consistently), and deletes the row once none is left.
func (s *DynamoStore) settle(ctx context.Context, w Worker) error {
	entries, item, err := s.readPacked(ctx, workerKey(w), true)
	if err != nil || !endedRow(item) {
		return err
	}
	var stale []LeaseKey
	for _, e := range entries {
		l, found, err := s.read(ctx, e.Key, true)
		if err != nil {
			return err
		}
		if !found || !samePacked(l, w.Key(), e) {
			stale = append(stale, e.Key)
		}
	}
	return s.dropEntries(ctx, w, stale, nil)
}

// dropEntries removes keys from the ended row of w (only while each still
// holds what was read, when read is not nil), and deletes the row when no
// entry is left. A row that moved meanwhile is left for whoever moved it.
func (s *DynamoStore) dropEntries(ctx context.Context, w Worker, keys []LeaseKey, read *PackedCheckpoint) error {
	vals := map[string]types.AttributeValue{":g": num(w.Gen)}
	names := map[string]string{}
	var remove []string
	cond := attrSessionGen + " = :g"
	for i, k := range keys {
		n := "#d" + strconv.Itoa(i)
		names[n] = packedName(w.Stream, k)
		remove = append(remove, attrPacked+"."+n)
	}
	if read != nil {
		cond = attrPacked + ".#d0 = :v"
		vals = map[string]types.AttributeValue{":v": &types.AttributeValueMemberB{Value: encodePacked(*read)}}
	} else {
		cond += " AND attribute_exists(" + attrSessionEnd + ")"
	}
	item := map[string]types.AttributeValue(nil)
	if len(keys) > 0 {
		out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.table), Key: keyAttr(workerKey(w)),
			ConditionExpression: aws.String(cond), UpdateExpression: aws.String("REMOVE " + strings.Join(remove, ", ")),
			ExpressionAttributeNames: names, ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueAllNew,
		})
		if _, failed := condFailed(err); failed {
			return nil
		}
		if err != nil {
			return err
		}
		item = out.Attributes
	} else {
		var err error
		if _, item, err = s.readPacked(ctx, workerKey(w), true); err != nil {
			return err
		}
	}
	return s.deleteIfDone(ctx, w, item)
}

// deleteIfDone deletes the worker row of w, as item shows it, when its
// session ended and no entry is left on it.
func (s *DynamoStore) deleteIfDone(ctx context.Context, w Worker, item map[string]types.AttributeValue) error {
	if !endedRow(item) {
		return nil
	}
	if entries, err := decodePackedAttr(item); err != nil || len(entries) > 0 {
		return err
	}
	row, _ := decodeSessionRow(item, w)
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(workerKey(w)),
		ConditionExpression:       aws.String(attrSessionGen + " = :g AND attribute_exists(" + attrSessionEnd + ") AND " + noEntries),
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": num(row.Gen), ":zero": num(0)},
	})
	if _, failed := condFailed(err); failed {
		return nil
	}
	return err
}

// removeWorker implements WorkerStore.RemoveWorker: a conditional DeleteItem
// of a row that carries no entry; a row that carries some (its worker
// stood still with a session open) is ended instead (endSession).
func (s *DynamoStore) removeWorker(ctx context.Context, w Worker) (bool, error) {
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 keyAttr(workerKey(w)),
		ConditionExpression:                 aws.String("lease_counter = :counter AND " + noEntries),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":counter": num(w.Counter), ":zero": num(0)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	cf, failed := condFailed(err)
	if !failed {
		return err == nil, err
	}
	item := cf.Item
	if len(item) == 0 {
		if _, item, err = s.readPacked(ctx, workerKey(w), true); err != nil {
			return false, err
		}
	}
	row, _, _ := decodeWorker(item, w.Stream)
	if len(item) == 0 || endedRow(item) || row.Counter != w.Counter || row.Gen == 0 {
		return false, nil
	}
	return s.endSession(ctx, row)
}

// packedCarry is what a claim carries from the session row that keeps the
// lease: the entry, and the session whose row it comes from.
type packedCarry struct {
	entry PackedCheckpoint
	from  Worker
}

// observedCarry returns what a claim of key on observed carries, when ctx
// carries the row observed (withObservedRow: a consumer's take): nothing
// for a row no session kept, else the entry of one consistent read of the
// session's row when it holds at observed (at the same counter an entry is
// never older than the row's own checkpoint). known is false when ctx
// carries no row: the claim then learns the row from its own refusal
// (claimCarrying).
func (s *DynamoStore) observedCarry(ctx context.Context, key LeaseKey, observed int64) (carry *packedCarry, known bool, err error) {
	w, known := observedSession(ctx)
	if !known || w.Gen == 0 {
		return nil, known, nil
	}
	c, err := s.carryOf(ctx, Lease{Key: key, Owner: w.Owner, Counter: observed, Session: w.Key(), SessionGen: w.Gen})
	return c, true, err
}

// carryOf returns the entry a claim of l, a row as read, carries: the one
// of l's session row (read consistently) that holds for l and is newer
// (see carried); nil when none.
func (s *DynamoStore) carryOf(ctx context.Context, l Lease) (*packedCarry, error) {
	w, ok := l.KeptBy()
	if !ok || l.Owner == "" {
		return nil, nil
	}
	entries, _, err := s.readPacked(ctx, workerKey(w), true)
	if err != nil {
		return nil, err
	}
	if e, ok := carried(l, entries); ok {
		return &packedCarry{entry: e, from: w}, nil
	}
	return nil, nil
}

// claimCarrying runs an acquire on observed (the update mk makes, which
// writes the counter wrote) so that a claim of a row a session keeps
// carries the session's entry for it (see lease_packed.go). Without the
// row observed in ctx, the first try is refused for a row a session keeps
// at observed, and the row its refusal returns tells which entry to carry
// in a second try. seen is the row a refusal returned.
func (s *DynamoStore) claimCarrying(ctx context.Context, key LeaseKey, owner string, wrote, observed int64, mk func() *dynamodb.UpdateItemInput, held func(Lease) error) (l, seen Lease, err error) {
	carry, known, err := s.observedCarry(ctx, key, observed)
	if err != nil {
		return Lease{}, Lease{}, s.fail("acquire", key, err)
	}
	heldSeen := func(row Lease) error {
		seen = row
		return held(row)
	}
	in := mk()
	carry.apply(in)
	if !known {
		in.ConditionExpression = aws.String("(" + aws.ToString(in.ConditionExpression) + ") AND (attribute_not_exists(" + attrSession + ") OR lease_counter <> :observed)")
		in.ExpressionAttributeValues[":observed"] = num(observed)
	}
	l, err = s.acquire(ctx, key, owner, wrote, in, heldSeen)
	if err != nil && !known && seen.Key == key && seen.Owner != "" && seen.Session != "" && seen.Counter == observed {
		if carry, err = s.carryOf(ctx, seen); err != nil {
			return Lease{}, seen, s.fail("acquire", key, err)
		}
		in = mk()
		carry.apply(in)
		seen = Lease{}
		l, err = s.acquire(ctx, key, owner, wrote, in, heldSeen)
	}
	if err == nil {
		s.carried(ctx, carry)
	}
	return l, seen, err
}

// apply makes in, an acquire's update on observed, write the carried
// checkpoint, and only on the counter observed: a row released meanwhile
// holds a checkpoint at least as new.
func (c *packedCarry) apply(in *dynamodb.UpdateItemInput) {
	if c == nil {
		return
	}
	in.ExpressionAttributeValues[":observed"] = num(c.entry.Counter)
	set, remove := checkpointSet(in.ExpressionAttributeValues, c.entry.Checkpoint, c.entry.SubSequence)
	expr := strings.Replace(aws.ToString(in.UpdateExpression), "SET ", "SET "+set+", ", 1)
	if remove != "" {
		expr = strings.Replace(expr, " REMOVE ", " REMOVE checkpoint_sub, ", 1)
	}
	in.UpdateExpression = aws.String(expr)
	in.ConditionExpression = aws.String("(" + aws.ToString(in.ConditionExpression) + ") AND lease_counter = :observed")
}

// carried removes the carried entry from the session row once the claim
// landed (an ended row goes with its last entry). A failure leaves it: the
// lease row no longer backs it, and the row's end settles it.
func (s *DynamoStore) carried(ctx context.Context, c *packedCarry) {
	if c == nil {
		return
	}
	_ = s.dropEntries(ctx, c.from, []LeaseKey{c.entry.Key}, &c.entry)
}

// mergeScanned returns leases with the newest durable checkpoints
// (mergePacked): entries holds those of the worker rows the scan read, by
// row key; a session a lease names whose row the scan did not read (a
// Group's, on a stream's listing) is read once, eventually consistently.
func (s *DynamoStore) mergeScanned(ctx context.Context, leases []Lease, entries map[string]map[string]PackedCheckpoint, consistent bool) []Lease {
	for _, l := range leases {
		if _, read := entries[l.Session]; read || l.Session == "" || l.Owner == "" {
			continue
		}
		w, ok := l.KeptBy()
		if !ok {
			continue
		}
		got, _, err := s.readPacked(ctx, workerKey(w), consistent)
		if err != nil {
			got = nil // the rows' own checkpoints, a moment older
		}
		entries[l.Session] = got
	}
	return mergePacked(leases, entries)
}

// scannedPacked adds the entries of item, when it is a worker row, to
// entries; it reports whether item is a worker row of an ended session
// (listed as no worker).
func scannedPacked(entries map[string]map[string]PackedCheckpoint, item map[string]types.AttributeValue) (ended bool) {
	k, _ := item[attrKey].(*types.AttributeValueMemberS)
	if k == nil || !strings.Contains(k.Value, ":"+workerMark) {
		return false
	}
	got, err := decodePackedAttr(item)
	if err == nil {
		entries[k.Value] = got
	} else {
		entries[k.Value] = nil
	}
	return endedRow(item)
}
