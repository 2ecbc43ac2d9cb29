// Package dyncount wraps a DynamoDB client to count the calls made through
// the narrow shardlease.DynamoDBAPI interface, for tests and benchmarks that
// measure what the library costs.
package dyncount

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease"
)

// Client counts reads (GetItem, each Scan page) and writes (PutItem,
// UpdateItem, DeleteItem) and passes every call on to the client it embeds. Set
// DynamoDBAPI; the counters start at zero.
//
// With Capacity set, every call also asks DynamoDB for the capacity it
// consumed (ReturnConsumedCapacity TOTAL, on a copy of the input, so the
// caller's input is left as it was) and sums the units per operation: see
// ReadUnits, WriteUnits and Units.
type Client struct {
	shardlease.DynamoDBAPI
	// Capacity turns on the summing of consumed capacity units.
	Capacity bool
	// ConsistentScanFix counts a consistent Scan page at twice the units
	// the server reported. dynalite (4.0) drops ConsistentRead from Scan
	// requests and prices every page as eventually consistent; DynamoDB
	// charges a consistent page twice that.
	ConsistentScanFix bool

	gets, puts, updates, deletes, scans atomic.Int64
	// units per operation, in millionths of a capacity unit (DynamoDB
	// reports halves for eventually consistent reads).
	units [numOps]atomic.Int64
}

// Op names a counted DynamoDB operation.
type Op int

// The counted operations.
const (
	OpGetItem Op = iota
	OpPutItem
	OpUpdateItem
	OpDeleteItem
	OpScan
	numOps
)

// String returns the operation's API name.
func (o Op) String() string {
	switch o {
	case OpGetItem:
		return "GetItem"
	case OpPutItem:
		return "PutItem"
	case OpUpdateItem:
		return "UpdateItem"
	case OpDeleteItem:
		return "DeleteItem"
	case OpScan:
		return "Scan"
	}
	return "unknown"
}

const micro = 1_000_000

func (c *Client) addUnits(op Op, cc *types.ConsumedCapacity) {
	if cc != nil && cc.CapacityUnits != nil {
		c.units[op].Add(int64(*cc.CapacityUnits * micro))
	}
}

// Units returns the capacity units op consumed so far (with Capacity set).
func (c *Client) Units(op Op) float64 { return float64(c.units[op].Load()) / micro }

// ReadUnits returns the read capacity units consumed so far: GetItem and
// Scan (with Capacity set).
func (c *Client) ReadUnits() float64 { return c.Units(OpGetItem) + c.Units(OpScan) }

// WriteUnits returns the write capacity units consumed so far: PutItem,
// UpdateItem and DeleteItem (with Capacity set).
func (c *Client) WriteUnits() float64 {
	return c.Units(OpPutItem) + c.Units(OpUpdateItem) + c.Units(OpDeleteItem)
}

var _ shardlease.DynamoDBAPI = (*Client)(nil)

// GetItem counts a read.
func (c *Client) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	if !c.Capacity {
		return c.DynamoDBAPI.GetItem(ctx, in, o...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoDBAPI.GetItem(ctx, &cp, o...)
	if err == nil && out != nil {
		c.addUnits(OpGetItem, out.ConsumedCapacity)
	}
	return out, err
}

// PutItem counts a write.
func (c *Client) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	if !c.Capacity {
		return c.DynamoDBAPI.PutItem(ctx, in, o...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoDBAPI.PutItem(ctx, &cp, o...)
	if err == nil && out != nil {
		c.addUnits(OpPutItem, out.ConsumedCapacity)
	}
	return out, err
}

// UpdateItem counts a write.
func (c *Client) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.updates.Add(1)
	if !c.Capacity {
		return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoDBAPI.UpdateItem(ctx, &cp, o...)
	if err == nil && out != nil {
		c.addUnits(OpUpdateItem, out.ConsumedCapacity)
	}
	return out, err
}

// DeleteItem counts a write.
func (c *Client) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.deletes.Add(1)
	if !c.Capacity {
		return c.DynamoDBAPI.DeleteItem(ctx, in, o...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoDBAPI.DeleteItem(ctx, &cp, o...)
	if err == nil && out != nil {
		c.addUnits(OpDeleteItem, out.ConsumedCapacity)
	}
	return out, err
}

// Scan counts a read (one page).
func (c *Client) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.scans.Add(1)
	if !c.Capacity {
		return c.DynamoDBAPI.Scan(ctx, in, o...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoDBAPI.Scan(ctx, &cp, o...)
	if err == nil && out != nil {
		c.addUnits(OpScan, out.ConsumedCapacity)
		if c.ConsistentScanFix && in.ConsistentRead != nil && *in.ConsistentRead {
			c.addUnits(OpScan, out.ConsumedCapacity)
		}
	}
	return out, err
}

// Count returns the calls of op so far (each Scan page is one).
func (c *Client) Count(op Op) int64 {
	switch op {
	case OpGetItem:
		return c.gets.Load()
	case OpPutItem:
		return c.puts.Load()
	case OpUpdateItem:
		return c.updates.Load()
	case OpDeleteItem:
		return c.deletes.Load()
	case OpScan:
		return c.scans.Load()
	}
	return 0
}

// Reads returns the GetItem calls and Scan pages so far.
func (c *Client) Reads() int64 { return c.gets.Load() + c.scans.Load() }

// Writes returns the PutItem, UpdateItem and DeleteItem calls so far.
func (c *Client) Writes() int64 { return c.puts.Load() + c.updates.Load() + c.deletes.Load() }

// Calls returns every counted call so far.
func (c *Client) Calls() int64 { return c.Reads() + c.Writes() }
