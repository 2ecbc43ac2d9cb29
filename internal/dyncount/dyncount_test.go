package dyncount_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
)

// fake answers the counted calls with empty outputs and records what
// reached it; the calls it does not override would panic.
type fake struct {
	shardlease.DynamoDBAPI
	calls []string
}

func (f *fake) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.calls = append(f.calls, "get")
	return &dynamodb.GetItemOutput{}, nil
}

func (f *fake) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.calls = append(f.calls, "put")
	return &dynamodb.PutItemOutput{}, nil
}

func (f *fake) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.calls = append(f.calls, "update")
	return &dynamodb.UpdateItemOutput{}, nil
}

func (f *fake) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	f.calls = append(f.calls, "delete")
	return &dynamodb.DeleteItemOutput{}, nil
}

func (f *fake) Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	f.calls = append(f.calls, "scan")
	return &dynamodb.ScanOutput{}, nil
}

func TestCounts(t *testing.T) {
	ctx := t.Context()
	f := &fake{}
	c := &dyncount.Client{DynamoDBAPI: f}
	assert.Zero(t, c.Calls())

	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{})
	require.NoError(t, err)
	for range 2 {
		_, err = c.Scan(ctx, &dynamodb.ScanInput{})
		require.NoError(t, err)
	}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{})
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{})
	require.NoError(t, err)
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{})
	require.NoError(t, err)

	assert.Equal(t, []string{"get", "scan", "scan", "put", "update", "delete"}, f.calls, "every call is passed on")
	assert.Equal(t, int64(3), c.Reads(), "GetItem and each Scan page")
	assert.Equal(t, int64(3), c.Writes(), "PutItem, UpdateItem and DeleteItem")
	assert.Equal(t, int64(6), c.Calls())
	for op, n := range map[dyncount.Op]int64{dyncount.OpGetItem: 1, dyncount.OpScan: 2, dyncount.OpPutItem: 1, dyncount.OpUpdateItem: 1, dyncount.OpDeleteItem: 1} {
		assert.Equal(t, n, c.Count(op), op.String())
	}
}

// capacityFake answers with the consumed capacity DynamoDB would report, and
// only when it was asked for.
type capacityFake struct {
	shardlease.DynamoDBAPI
	asked int
}

func (f *capacityFake) used(asked types.ReturnConsumedCapacity, units float64) *types.ConsumedCapacity {
	if asked != types.ReturnConsumedCapacityTotal {
		return nil
	}
	f.asked++
	return &types.ConsumedCapacity{CapacityUnits: aws.Float64(units)}
}

func (f *capacityFake) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{ConsumedCapacity: f.used(in.ReturnConsumedCapacity, 0.5)}, nil
}

func (f *capacityFake) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{ConsumedCapacity: f.used(in.ReturnConsumedCapacity, 1)}, nil
}

func (f *capacityFake) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return &dynamodb.ScanOutput{ConsumedCapacity: f.used(in.ReturnConsumedCapacity, 3)}, nil
}

func TestCapacity(t *testing.T) {
	ctx := t.Context()
	f := &capacityFake{}
	c := &dyncount.Client{DynamoDBAPI: f, Capacity: true}
	in := &dynamodb.ScanInput{}
	for range 2 {
		_, err := c.Scan(ctx, in)
		require.NoError(t, err)
	}
	assert.Empty(t, in.ReturnConsumedCapacity, "the caller's input is left as it was")
	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{})
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{})
	require.NoError(t, err)

	assert.Equal(t, 4, f.asked, "every call asks for its consumed capacity")
	assert.InDelta(t, 6.0, c.Units(dyncount.OpScan), 1e-9)
	assert.InDelta(t, 6.5, c.ReadUnits(), 1e-9, "Scan pages and GetItem")
	assert.InDelta(t, 1.0, c.WriteUnits(), 1e-9)
	assert.Equal(t, "UpdateItem", dyncount.OpUpdateItem.String())

	fix := &dyncount.Client{DynamoDBAPI: f, Capacity: true, ConsistentScanFix: true}
	_, err = fix.Scan(ctx, &dynamodb.ScanInput{ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	_, err = fix.Scan(ctx, &dynamodb.ScanInput{ConsistentRead: aws.Bool(false)})
	require.NoError(t, err)
	assert.InDelta(t, 9.0, fix.ReadUnits(), 1e-9, "a consistent page counts twice what the server reported")
	f.asked = 4

	off := &dyncount.Client{DynamoDBAPI: f}
	_, err = off.Scan(ctx, &dynamodb.ScanInput{})
	require.NoError(t, err)
	assert.Equal(t, 4, f.asked, "without Capacity nothing is asked")
	assert.Zero(t, off.ReadUnits())
}
