package shardlease

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shardlease/shardlease/internal/ddbattr"
)

// This file reads progress written under an older row layout: bare rows.
// An earlier release of shardlease kept one row per shard, keyed by the bare
// shard id ("shardId-000000000000") under the same lease_key attribute, with
// a checkpoint. DynamoStore adopts them for the stream named with
// WithLegacyStream and refuses them otherwise. Copying a checkpoint never
// overwrites progress: every copy is conditional on the destination row
// having no checkpoint yet. Import, which copies other libraries' tables, is
// in legacy_import.go.

// WithLegacyStream names the stream that the table's bare rows belong to.
// Bare rows are the layout an earlier release wrote before rows were kept per
// stream and shard: keyed by the bare shard id ("shardId-000000000000") with
// a checkpoint.
//
// When Acquire or Get finds that a shard of this stream has no checkpoint in
// its own "stream:shard" row, it reads the shard's bare row and copies its
// checkpoint into the own row, on condition that the own row still has no
// checkpoint; if somebody saved progress first, that newer progress stands.
// The bare row is never modified. Rows of other streams ignore bare rows.
// List is a plain listing of "stream:shard" rows and shows a bare row's
// checkpoint only once Acquire or Get adopted it.
//
// Without this option, a shard whose bare row holds a checkpoint is refused
// with an UnattributedLegacyRowError until the stream is named here or the
// bare row is deleted. A table whose bare rows served more than one stream
// cannot be resumed safely: delete those rows and start each stream at a
// chosen position. An empty name leaves the option off.
func WithLegacyStream(stream string) StoreOption {
	return func(c *storeConfig) { c.legacyStream = stream }
}

// legacyApplies reports whether a row of stream with no checkpoint must look
// at the shard's bare row: always when no legacy stream is named (to refuse
// an unattributed one), else only for the named stream.
func (s *DynamoStore) legacyApplies(stream string) bool {
	return s.cfg.legacyStream == "" || s.cfg.legacyStream == stream
}

// bareShards returns the shard ids of the table's bare rows. They are read
// once per store, with one keys-only Scan of the rows whose key has no ':',
// the first time they are needed (CheckTable, which Run calls, reads them
// up front). Bare rows are written only by old releases, which must be
// stopped before new instances start, so the set does not change while the
// store is in use; a failed Scan is tried again at the next call.
func (s *DynamoStore) bareShards(ctx context.Context) (map[string]bool, error) {
	s.bareMu.Lock()
	defer s.bareMu.Unlock()
	if s.bare != nil {
		return s.bare, nil
	}
	keys, err := s.scanKeys(ctx, "NOT contains(lease_key, :colon)", map[string]types.AttributeValue{":colon": str(":")})
	if err != nil {
		if isNotFound(err) {
			return nil, tableNotFound(s.table, err)
		}
		return nil, errorf("list the legacy rows keyed by a bare shard id: %w", err)
	}
	bare := make(map[string]bool, len(keys))
	for _, k := range keys {
		bare[k] = true
	}
	s.bare = bare
	return bare, nil
}

// bareCheckpoint reads the bare row of shard consistently. found is false
// when there is no such row or it holds no checkpoint. A shard without a
// bare row costs no call once bareShards has read the set.
func (s *DynamoStore) bareCheckpoint(ctx context.Context, shard string) (checkpoint string, sub int64, found bool, err error) {
	bare, err := s.bareShards(ctx)
	if err != nil {
		return "", -1, false, err
	}
	if !bare[shard] {
		return "", -1, false, nil
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            rawKeyAttr(shard),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return "", -1, false, errorf("read the legacy row %q: %w", shard, err)
	}
	av, present := out.Item[attrCheckpoint]
	if !present {
		return "", -1, false, nil
	}
	corrupt := func(attr, want string) error {
		return errorf("%w: legacy row %q (keyed by the bare shard id): attribute %s is %s, want %s; fix the attribute by hand or delete the row and start the shard at a chosen position",
			ErrCorruptLease, shard, attr, ddbattr.TypeName(out.Item[attr]), want)
	}
	v, ok := av.(*types.AttributeValueMemberS)
	if !ok || validCheckpoint(v.Value, -1) != nil {
		return "", -1, false, corrupt(attrCheckpoint, "a sequence number or "+ShardEnd)
	}
	sub = -1
	if av, present := out.Item[attrSubSequence]; present && v.Value != ShardEnd {
		n, ok := av.(*types.AttributeValueMemberN)
		if !ok {
			return "", -1, false, corrupt(attrSubSequence, "a number")
		}
		sub, err = strconv.ParseInt(n.Value, 10, 64)
		if err != nil || sub < 0 {
			return "", -1, false, corrupt(attrSubSequence, "a non-negative whole number")
		}
	}
	return v.Value, sub, true, nil
}

// adoptAfterAcquire runs after a successful acquire write: when the row has
// no checkpoint it falls back to the shard's bare row. It costs one GetItem,
// and only for rows without a checkpoint of a stream legacyApplies to whose
// shard has a bare row (see bareShards). The
// copy is the holder's write: conditional on owner and counter (fencing) and
// on the row having no checkpoint, and it bumps the counter. When the store
// refuses the shard, or cannot tell where to start it, it releases the lease
// before returning the error, so the shard is simply not read.
func (s *DynamoStore) adoptAfterAcquire(ctx context.Context, held Lease) (Lease, error) {
	if held.Checkpoint != "" || !s.legacyApplies(held.Key.Stream) {
		return held, nil
	}
	cp, sub, found, err := s.bareCheckpoint(ctx, held.Key.Shard)
	switch {
	case err != nil:
		return Lease{}, s.releaseRefused(ctx, held, s.fail("acquire", held.Key, err))
	case !found:
		return held, nil
	case s.cfg.legacyStream == "":
		return Lease{}, s.releaseRefused(ctx, held, &UnattributedLegacyRowError{Table: s.table, Shard: held.Key.Shard, Stream: held.Key.Stream})
	}
	vals := map[string]types.AttributeValue{":me": str(held.Owner), ":mine": num(held.Counter), ":one": num(1)}
	set, remove := checkpointSet(vals, cp, sub)
	row, ok, exists, err := s.update(ctx, held.Key, &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String("lease_owner = :me AND lease_counter = :mine AND attribute_not_exists(checkpoint)"),
		UpdateExpression:          aws.String("SET lease_counter = lease_counter + :one, " + set + remove),
		ExpressionAttributeValues: vals,
	})
	switch {
	case err != nil:
		return Lease{}, s.releaseRefused(ctx, held, s.fail("acquire", held.Key, errorf("copy the checkpoint of legacy row %q: %w", held.Key.Shard, err)))
	case ok:
		return row, nil
	case !exists:
		return Lease{}, s.fail("acquire", held.Key, ErrLeaseNotFound)
	case row.Owner == held.Owner && row.Counter == held.Counter+1 && row.Checkpoint == cp && row.SubSequence == sub:
		return row, nil // our own copy, whose reply was lost and whose retry failed
	}
	return Lease{}, s.fail("acquire", held.Key, errorf("%w: taken by %q at counter %d while the checkpoint of legacy row %q was being copied; the row's checkpoint %q stands",
		ErrLeaseHeld, row.Owner, row.Counter, held.Key.Shard, row.Checkpoint))
}

// releaseRefused frees a lease that Acquire took but will not hand out, and
// returns cause (with the release's own failure, if any).
func (s *DynamoStore) releaseRefused(ctx context.Context, held Lease, cause error) error {
	if _, err := s.Release(ctx, held); err != nil {
		return errorf("%w (releasing the lease again failed too, so others take it only once it expires: %w)", cause, err)
	}
	return cause
}

// adoptOnGet is Get's fallback for a row without a checkpoint. It writes
// only into a free row: a held row is returned as it is, since its holder
// adopted (or refused) the bare row when it acquired it, and a copy under a
// live holder would change the row behind its back. The copy is fenced like
// every other write: conditional on the row still being free at the counter
// read, without a checkpoint, and it bumps the counter. If the condition
// fails, the row as it is now is returned (a newer checkpoint, or a holder,
// wins).
func (s *DynamoStore) adoptOnGet(ctx context.Context, row Lease) (Lease, error) {
	if row.Checkpoint != "" || row.Owner != "" || !s.legacyApplies(row.Key.Stream) {
		return row, nil
	}
	cp, sub, found, err := s.bareCheckpoint(ctx, row.Key.Shard)
	switch {
	case err != nil:
		return Lease{}, s.fail("get", row.Key, err)
	case !found:
		return row, nil
	case s.cfg.legacyStream == "":
		return Lease{}, &UnattributedLegacyRowError{Table: s.table, Shard: row.Key.Shard, Stream: row.Key.Stream}
	}
	got, _, exists, err := s.fillFree(ctx, row, true, cp, sub, nil)
	switch {
	case err != nil:
		return Lease{}, s.fail("get", row.Key, errorf("copy the checkpoint of legacy row %q: %w", row.Key.Shard, err))
	case !exists:
		return Lease{}, s.fail("get", row.Key, ErrLeaseNotFound)
	}
	return got, nil
}

// fillFree writes checkpoint into the row seen (as read, exists reporting
// whether it was there), fenced as every write but the handoff request is:
// an existing row must still be free, at the counter seen and without a
// checkpoint, and the write bumps its counter; a missing row is created
// free at counter 0. parents are stored where the row has none. ok reports
// whether the write happened; if not, row is the row as it is now
// (exists=false when it is missing).
func (s *DynamoStore) fillFree(ctx context.Context, seen Lease, exists bool, checkpoint string, sub int64, parents []string) (row Lease, ok, present bool, err error) {
	vals := map[string]types.AttributeValue{}
	set, remove := checkpointSet(vals, checkpoint, sub)
	var cond string
	if exists {
		cond = "attribute_not_exists(lease_owner) AND lease_counter = :seen AND attribute_not_exists(checkpoint)"
		vals[":seen"], vals[":one"] = num(seen.Counter), num(1)
		set += ", lease_counter = lease_counter + :one"
	} else {
		cond = "attribute_not_exists(lease_key)"
		vals[":zero"] = num(0)
		set += ", lease_counter = :zero"
	}
	if len(parents) > 0 {
		vals[":parents"] = parentsAttr(parents)
		set += ", parent_shards = if_not_exists(parent_shards, :parents)"
	}
	row, ok, present, err = s.update(ctx, seen.Key, &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String(cond),
		UpdateExpression:          aws.String("SET " + set + remove),
		ExpressionAttributeValues: vals,
	})
	if err == nil && !ok && present && row.Owner == "" && row.Checkpoint == checkpoint && row.SubSequence == sub &&
		((exists && row.Counter == seen.Counter+1) || (!exists && row.Counter == 0)) {
		return row, true, true, nil // our own write, whose reply was lost and whose retry failed
	}
	return row, ok, present, err
}
