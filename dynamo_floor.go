package shardlease

// The DynamoStore's side of the fence floor (see lease_floor.go): the
// reservation each acquire makes first, and the epoch raises.

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// reserve reserves the counter an acquire of key observed at observed
// writes: the next of the take round's reservations when ctx carries them
// (see reservations), else one of its own.
func (s *DynamoStore) reserve(ctx context.Context, key LeaseKey, observed int64) (fenceFloor, error) {
	if rs := reservationsOf(ctx); rs != nil {
		return rs.next(ctx, key.Stream, observed, s.reserveBlock)
	}
	return s.reserveBlock(ctx, key.Stream, 1, observed)
}

// reserveBlock reserves n counters for rows of stream observed at counters
// up to observed, with one UpdateItem on the stream's floor row that adds
// to its counter and returns it (the last of the n, each above observed and
// above every earlier reservation), and settles the floor's epoch (see
// raiseEpoch).
func (s *DynamoStore) reserveBlock(ctx context.Context, stream string, n, observed int64) (fenceFloor, error) {
	fk := floorKey(stream)
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              keyAttr(fk),
		UpdateExpression: aws.String("SET " + attrFenceCounter + " = if_not_exists(" + attrFenceCounter + ", :zero) + :n, " + attrFenceEpoch + " = if_not_exists(" + attrFenceEpoch + ", :zero)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":zero": num(0), ":n": num(s.floors.step(stream, n, observed)),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return fenceFloor{}, errorf("reserve a fence counter on row %s: %w", fk, err)
	}
	f, err := decodeFloor(fk, out.Attributes)
	if err != nil {
		return fenceFloor{}, err
	}
	s.floors.saw(stream, f.counter)
	want := knownEpoch(ctx)
	if want == 0 && f.epoch == 0 {
		if want, err = s.recordedEpoch(ctx, stream); err != nil {
			return fenceFloor{}, err
		}
	}
	if want > f.epoch {
		if f.epoch, err = s.raisedEpoch(ctx, stream, want); err != nil {
			return fenceFloor{}, err
		}
	}
	return f, nil
}

// raisedEpoch raises stream's floor epoch to epoch and returns the floor's
// epoch: epoch, or the greater one another writer raised it to first.
func (s *DynamoStore) raisedEpoch(ctx context.Context, stream string, epoch int64) (int64, error) {
	raised, err := s.raiseEpoch(ctx, stream, epoch)
	if err != nil || raised {
		return epoch, err
	}
	fk := floorKey(stream)
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyAttr(fk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, errorf("read the fence floor row %s: %w", fk, err)
	}
	f, err := decodeFloor(fk, out.Item)
	return f.epoch, err
}

// recordedEpoch is the epoch of stream's recorded identity, 0 when none is
// recorded.
func (s *DynamoStore) recordedEpoch(ctx context.Context, stream string) (int64, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            keyAttr(identityKey(stream)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil || len(out.Item) == 0 {
		return 0, err
	}
	id, err := decodeIdentity(stream, out.Item)
	if err != nil {
		return 0, err
	}
	return epochOf(id), nil
}

// raiseEpoch raises stream's floor epoch to epoch with one conditional
// UpdateItem; raised is false when the floor's epoch was epoch or more
// already.
func (s *DynamoStore) raiseEpoch(ctx context.Context, stream string, epoch int64) (raised bool, err error) {
	fk := floorKey(stream)
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(fk),
		ConditionExpression:       aws.String("attribute_not_exists(" + attrFenceEpoch + ") OR " + attrFenceEpoch + " < :e"),
		UpdateExpression:          aws.String("SET " + attrFenceEpoch + " = :e"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": num(epoch)},
	})
	if _, ok := condFailed(err); ok {
		return false, nil
	}
	if err != nil {
		return false, errorf("raise the fence epoch on row %s: %w", fk, err)
	}
	return true, nil
}

// decodeFloor reads a floor row.
func decodeFloor(key LeaseKey, item map[string]types.AttributeValue) (fenceFloor, error) {
	r := leaseRow{key: key, item: item}
	c, _, err1 := r.nonNegativeAttr(attrFenceCounter, "a non-negative counter")
	e, _, err2 := r.nonNegativeAttr(attrFenceEpoch, "a non-negative number of milliseconds")
	if err1 != nil {
		return fenceFloor{}, err1
	}
	return fenceFloor{epoch: e, counter: c}, err2
}

// sawFloorRow records the counter of item, a row of key a Scan returned,
// when it is a floor row.
func (s *DynamoStore) sawFloorRow(key string, item map[string]types.AttributeValue) {
	stream, rest, ok := strings.Cut(key, ":")
	if !ok || rest != floorKey(stream).Shard {
		return
	}
	if f, err := decodeFloor(floorKey(stream), item); err == nil {
		s.floors.saw(stream, f.counter)
	}
}
