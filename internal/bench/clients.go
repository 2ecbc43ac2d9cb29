package main

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/dyncount"
)

// countingDynamo counts the calls made through the narrow DynamoDB
// interface (see dyncount.Client). With track set it also keeps, per lease
// key, when each UpdateItem returned, and the duration of each Scan page.
type countingDynamo struct {
	dyncount.Client

	track   bool
	mu      sync.Mutex
	updated map[string][]time.Time
	scanLog []scanCall
}

type scanCall struct {
	first      bool // the first page of a listing
	start, end time.Time
}

func (c *countingDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.Client.UpdateItem(ctx, in, o...)
	if c.track && err == nil {
		key := keyOf(in)
		now := time.Now()
		c.mu.Lock()
		c.updated[key] = append(c.updated[key], now)
		c.mu.Unlock()
	}
	return out, err
}

func (c *countingDynamo) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	t0 := time.Now()
	out, err := c.Client.Scan(ctx, in, o...)
	if c.track {
		c.mu.Lock()
		c.scanLog = append(c.scanLog, scanCall{first: len(in.ExclusiveStartKey) == 0, start: t0, end: time.Now()})
		c.mu.Unlock()
	}
	return out, err
}

func keyOf(in *dynamodb.UpdateItemInput) string {
	if v, ok := in.Key["lease_key"].(*dtypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

type putter interface {
	PutRecords(ctx context.Context, params *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

// hashKeys returns an explicit hash key inside each of n evenly split
// shards (the middle of each range), so records can be put on a chosen
// shard.
func hashKeys(n int) []string {
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	out := make([]string, n)
	for i := range n {
		h := new(big.Int).Mul(space, big.NewInt(int64(2*i+1)))
		h.Div(h, big.NewInt(int64(2*n)))
		out[i] = h.String()
	}
	return out
}

// fill puts perShard records of size bytes on each of n shards of stream,
// 500 to a call, spread round robin.
func fill(ctx context.Context, kin putter, stream string, shards, perShard, size int) error {
	keys := hashKeys(shards)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	total := shards * perShard
	var batch []ktypes.PutRecordsRequestEntry
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		out, err := kin.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: batch})
		if err != nil {
			return err
		}
		if n := aws.ToInt32(out.FailedRecordCount); n > 0 {
			return fmt.Errorf("put records: %d of %d failed", n, len(batch))
		}
		batch = batch[:0]
		return nil
	}
	for i := range total {
		batch = append(batch, ktypes.PutRecordsRequestEntry{
			Data: data, PartitionKey: aws.String(fmt.Sprintf("k%d", i)), ExplicitHashKey: aws.String(keys[i%shards]),
		})
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
