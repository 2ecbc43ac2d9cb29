// Package dyncount wraps a DynamoDB client to count the calls made through
// the narrow shardlease.DynamoDBAPI interface, for tests and benchmarks that
// measure what the library costs.
package dyncount

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/shardlease/shardlease"
)

// Client counts reads (GetItem, each Scan page) and writes (PutItem,
// UpdateItem, DeleteItem) and passes every call on to the client it embeds. Set
// DynamoDBAPI; the counters start at zero.
type Client struct {
	shardlease.DynamoDBAPI
	gets, puts, updates, deletes, scans atomic.Int64
}

var _ shardlease.DynamoDBAPI = (*Client)(nil)

// GetItem counts a read.
func (c *Client) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.DynamoDBAPI.GetItem(ctx, in, o...)
}

// PutItem counts a write.
func (c *Client) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	return c.DynamoDBAPI.PutItem(ctx, in, o...)
}

// UpdateItem counts a write.
func (c *Client) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.updates.Add(1)
	return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// DeleteItem counts a write.
func (c *Client) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.deletes.Add(1)
	return c.DynamoDBAPI.DeleteItem(ctx, in, o...)
}

// Scan counts a read (one page).
func (c *Client) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.scans.Add(1)
	return c.DynamoDBAPI.Scan(ctx, in, o...)
}

// Reads returns the GetItem calls and Scan pages so far.
func (c *Client) Reads() int64 { return c.gets.Load() + c.scans.Load() }

// Writes returns the PutItem, UpdateItem and DeleteItem calls so far.
func (c *Client) Writes() int64 { return c.puts.Load() + c.updates.Load() + c.deletes.Load() }

// Calls returns every counted call so far.
func (c *Client) Calls() int64 { return c.Reads() + c.Writes() }
