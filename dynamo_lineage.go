package shardlease

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

var (
	_ LineageStore  = (*DynamoStore)(nil)
	_ IdentityStore = (*DynamoStore)(nil)
)

// CreateAt implements LineageStore.
func (s *DynamoStore) CreateAt(ctx context.Context, key LeaseKey, parents []string, start Start) (bool, error) {
	if err := key.Validate(); err != nil {
		return false, s.fail("create", key, err)
	}
	if err := start.validate(); err != nil {
		return false, s.fail("create", key, err)
	}
	ps, err := normalParents(parents)
	if err != nil {
		return false, s.fail("create", key, err)
	}
	return s.putNew(ctx, key, newRowItem(key, ps, start))
}

// SetLineage implements LineageStore with one conditional UpdateItem.
func (s *DynamoStore) SetLineage(ctx context.Context, l Lease, parents []string, start Start) (Lease, error) {
	if err := start.validate(); err != nil {
		return Lease{}, s.fail("set lineage", l.Key, err)
	}
	ps, err := normalParents(parents)
	if err != nil {
		return Lease{}, s.fail("set lineage", l.Key, err)
	}
	vals := map[string]types.AttributeValue{":seen": num(l.Counter), ":one": num(1)}
	set, remove := lineageClauses(vals, ps, start)
	update := "SET " + strings.Join(append([]string{"lease_counter = lease_counter + :one"}, set...), ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	row, ok, exists, err := s.update(ctx, l.Key, &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String("attribute_exists(lease_key) AND attribute_not_exists(lease_owner) AND attribute_not_exists(checkpoint) AND lease_counter = :seen"),
		UpdateExpression:          aws.String(update),
		ExpressionAttributeValues: vals,
	})
	switch {
	case err != nil:
		return Lease{}, s.fail("set lineage", l.Key, err)
	case ok:
		return row, nil
	case !exists:
		return Lease{}, s.fail("set lineage", l.Key, ErrLeaseNotFound)
	}
	return Lease{}, s.fail("set lineage", l.Key, errorf("%w: row has owner %q counter %d checkpoint %q; expected a free row at counter %d without a checkpoint", ErrLeaseHeld, row.Owner, row.Counter, row.Checkpoint, l.Counter))
}

// DeleteFinished implements LineageStore with one conditional DeleteItem.
func (s *DynamoStore) DeleteFinished(ctx context.Context, l Lease) (bool, error) {
	if err := l.Key.Validate(); err != nil {
		return false, s.fail("delete finished", l.Key, err)
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(s.table),
		Key:                 keyAttr(l.Key),
		ConditionExpression: aws.String("checkpoint = :end AND lease_counter = :seen"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":end": str(ShardEnd), ":seen": num(l.Counter),
		},
	})
	if err != nil {
		if _, ok := condFailed(err); ok {
			return false, nil
		}
		return false, s.fail("delete finished", l.Key, err)
	}
	return true, nil
}

// StreamIdentity implements IdentityStore.
func (s *DynamoStore) StreamIdentity(ctx context.Context, stream string) (StreamIdentity, error) {
	key := identityKey(stream)
	if err := ValidateStreamName(stream); err != nil {
		return StreamIdentity{}, s.fail("get stream identity", key, err)
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            keyAttr(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return StreamIdentity{}, s.fail("get stream identity", key, err)
	}
	if len(out.Item) == 0 {
		return StreamIdentity{}, s.fail("get stream identity", key, ErrLeaseNotFound)
	}
	id, err := decodeIdentity(stream, out.Item)
	if err != nil {
		return StreamIdentity{}, s.fail("get stream identity", key, err)
	}
	return id, nil
}

// RecordStreamIdentity implements IdentityStore with one conditional PutItem
// (and a read when a row exists).
func (s *DynamoStore) RecordStreamIdentity(ctx context.Context, id StreamIdentity) (StreamIdentity, bool, error) {
	key := identityKey(id.Stream)
	if err := validIdentity(id); err != nil {
		return StreamIdentity{}, false, s.fail("record stream identity", key, err)
	}
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.table),
		Item:                identityItem(id),
		ConditionExpression: aws.String("attribute_not_exists(lease_key)"),
	})
	created := err == nil
	if _, ok := condFailed(err); err != nil && !ok {
		return StreamIdentity{}, false, s.fail("record stream identity", key, err)
	}
	have := StreamIdentity{Stream: id.Stream, ARN: id.ARN, Created: time.Unix(0, id.Created.UnixNano())}
	if !created {
		if have, err = s.StreamIdentity(ctx, id.Stream); err != nil {
			return StreamIdentity{}, false, err
		}
	}
	// The fence floor's epoch follows the recorded incarnation.
	if _, err := s.raiseEpoch(ctx, id.Stream, epochOf(have)); err != nil {
		return StreamIdentity{}, false, s.fail("record stream identity", key, err)
	}
	return have, created, nil
}

// ResetStream implements IdentityStore: a Scan, a DeleteItem per row of the
// stream, and a PutItem.
func (s *DynamoStore) ResetStream(ctx context.Context, id StreamIdentity) (int, error) {
	key := identityKey(id.Stream)
	if err := validIdentity(id); err != nil {
		return 0, s.fail("reset stream", key, err)
	}
	keys, err := s.scanKeys(ctx, "begins_with(lease_key, :prefix)", map[string]types.AttributeValue{":prefix": str(id.Stream + ":")})
	if err != nil {
		return 0, s.fail("reset stream", key, err)
	}
	n := 0
	for _, k := range keys {
		if k == floorKey(id.Stream).String() {
			continue // the fence floor outlives every incarnation
		}
		if _, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(s.table),
			Key:       rawKeyAttr(k),
		}); err != nil {
			return n, s.fail("reset stream", key, errorf("delete row %q (%d of %d rows deleted; run the reset again): %w", k, n, len(keys), err))
		}
		if !isIdentityKey(k) && !strings.HasPrefix(k, id.Stream+":"+workerMark) {
			n++
		}
	}
	if _, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: identityItem(id)}); err != nil {
		return n, s.fail("reset stream", key, err)
	}
	if _, err := s.raiseEpoch(ctx, id.Stream, epochOf(id)); err != nil {
		return n, s.fail("reset stream", key, err)
	}
	return n, nil
}

// DeleteStreamRows implements StreamRemover: a Scan and a DeleteItem per
// row, each lease row's conditional on attribute_not_exists(lease_owner)
// (or, for a stale one, on its counter).
func (s *DynamoStore) DeleteStreamRows(ctx context.Context, stream string, stale map[string]int64) (deleted, held int, err error) {
	idKey := identityKey(stream)
	if err := ValidateStreamName(stream); err != nil {
		return 0, 0, s.fail("delete stream rows", idKey, err)
	}
	keys, err := s.scanKeys(ctx, "begins_with(lease_key, :prefix)", map[string]types.AttributeValue{":prefix": str(stream + ":")})
	if err != nil {
		return 0, 0, s.fail("delete stream rows", idKey, err)
	}
	for _, k := range keys {
		if isIdentityKey(k) {
			continue
		}
		in := &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: rawKeyAttr(k)}
		lease := !strings.HasPrefix(k, stream+":"+workerMark)
		if lease {
			in.ConditionExpression = aws.String("attribute_not_exists(" + attrOwner + ")")
			if c, ok := stale[strings.TrimPrefix(k, stream+":")]; ok {
				in.ConditionExpression = aws.String("attribute_not_exists(" + attrOwner + ") OR " + attrCounter + " = :c")
				in.ExpressionAttributeValues = map[string]types.AttributeValue{":c": num(c)}
			}
		}
		_, err := s.client.DeleteItem(ctx, in)
		if _, ok := condFailed(err); ok {
			held++
			continue
		}
		if err != nil {
			return deleted, held, s.fail("delete stream rows", idKey, errorf("delete row %q (%d rows deleted; call it again): %w", k, deleted, err))
		}
		if lease {
			deleted++
		}
	}
	if held == 0 {
		if _, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: rawKeyAttr(idKey.String())}); err != nil {
			return deleted, held, s.fail("delete stream rows", idKey, err)
		}
	}
	return deleted, held, nil
}

// scanKeys returns the lease_key of every row that filter (with vals)
// selects, with one consistent keys-only Scan, page by page. Its error is
// the client's, unwrapped.
func (s *DynamoStore) scanKeys(ctx context.Context, filter string, vals map[string]types.AttributeValue) ([]string, error) {
	var keys []string
	var start map[string]types.AttributeValue
	for {
		page, err := s.client.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(s.table),
			ConsistentRead:            aws.Bool(true),
			FilterExpression:          aws.String(filter),
			ProjectionExpression:      aws.String(attrKey),
			ExpressionAttributeValues: vals,
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, err
		}
		for _, item := range page.Items {
			if k, ok := item[attrKey].(*types.AttributeValueMemberS); ok {
				keys = append(keys, k.Value)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return keys, nil
		}
		start = page.LastEvaluatedKey
	}
}

var _ Rewinder = (*DynamoStore)(nil)

// RewindRow implements Rewinder with one conditional UpdateItem, fenced as
// Checkpoint is.
func (s *DynamoStore) RewindRow(ctx context.Context, held Lease, checkpoint string, start Start) (Lease, error) {
	if err := validRewind(checkpoint, start); err != nil {
		return Lease{}, s.fail("rewind", held.Key, err)
	}
	start = normalStart(start)
	vals := map[string]types.AttributeValue{}
	set, remove := rewindClauses(vals, checkpoint, start)
	update := "SET " + strings.Join(append([]string{"lease_counter = lease_counter + :one"}, set...), ", ") +
		" REMOVE " + strings.Join(remove, ", ")
	in := &dynamodb.UpdateItemInput{UpdateExpression: aws.String(update), ExpressionAttributeValues: vals}
	return s.write(ctx, "rewind", held, in, func(row Lease) bool {
		return row.Owner == held.Owner && row.Checkpoint == checkpoint && row.SubSequence == -1 && sameStart(row.Start, start)
	})
}
