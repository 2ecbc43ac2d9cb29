package dyncount_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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
}
