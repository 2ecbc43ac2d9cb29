package shardlease

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// HandoffWithdrawer is implemented by lease stores that let a taker withdraw
// a handoff request it made (both stores of this package do). A worker that
// shuts down withdraws its pending requests, so that no holder hands a lease
// to a worker that is gone. With a store without it, such a lease waits a
// lease duration for the gone taker instead.
type HandoffWithdrawer interface {
	// WithdrawHandoff removes the handoff request naming taker from key's
	// row, without bumping the counter. It reports whether it removed one;
	// a request already answered, or naming another taker, is left alone
	// and is not an error. A holder releasing the lease afterwards frees it
	// instead of handing it to taker.
	WithdrawHandoff(ctx context.Context, key LeaseKey, taker string) (bool, error)
}

var (
	_ HandoffWithdrawer = (*MemoryStore)(nil)
	_ HandoffWithdrawer = (*DynamoStore)(nil)
)

// WithdrawHandoff implements HandoffWithdrawer.
func (m *MemoryStore) WithdrawHandoff(ctx context.Context, key LeaseKey, taker string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, memErr("withdraw handoff", key, err)
	}
	if taker == "" {
		return false, memErr("withdraw handoff", key, errorf("%w: taker owner id is empty", ErrInvalidConfig))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	row, ok := m.rows[key]
	if !ok || row.HandoffTo != taker {
		return false, nil
	}
	before := row
	row.HandoffTo = ""
	m.wrote("withdraw handoff", before, row)
	return true, nil
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
