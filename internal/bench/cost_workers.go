package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// costSpec is one lone worker of the cost rows: its lease duration and
// renew interval (0: the default), how many leases it holds, sessions on or
// off, and whether records flow on its shards.
type costSpec struct {
	lease    time.Duration
	renew    time.Duration
	leases   int
	sessions bool
	busy     bool
}

// String names the worker in errors and progress lines.
func (s costSpec) String() string {
	load := "idle"
	if s.busy {
		load = "busy"
	}
	return fmt.Sprintf("%d %s leases, lease %v, renew %v, sessions %v", s.leases, load, s.lease, s.renew, s.sessions)
}

// startCostWorker starts a worker alone over a new stream of s.leases
// shards of fake, on a new lease table on dynalite, every DynamoDB call
// counted with the capacity it consumed; lease rows' write units are also
// summed apart from the worker's own row's. Its handler does nothing, so
// every batch is checkpointed.
func startCostWorker(ctx context.Context, e *env, fake *shardleasetest.Kinesis, s costSpec) (*costWorker, error) {
	prefix := "idle"
	if s.busy {
		prefix = "busy"
	}
	stream := emulator.UniqueName(prefix)
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(s.leases))}); err != nil {
		return nil, err
	}
	dc := emulator.NewDynamoClient(e.dynamo)
	table := emulator.UniqueName("sessions")
	if err := shardlease.CreateTable(ctx, dc, table); err != nil {
		return nil, fmt.Errorf("create lease table %s: %w", table, err)
	}
	lw := &loneWorker{leases: s.leases, sessions: s.sessions, dyn: &dyncount.Client{DynamoDBAPI: dc, Capacity: true}}
	cw := &costWorker{loneWorker: lw, spec: s, stream: stream, table: table, rows: &rowUnits{DynamoDBAPI: lw.dyn}}
	store, err := shardlease.NewDynamoStore(cw.rows, table)
	if err != nil {
		return nil, err
	}
	opts := []shardlease.Option{shardlease.WithOwnerID(fmt.Sprintf("lone-%d", s.leases)), shardlease.WithLeaseDuration(s.lease),
		shardlease.WithShutdownTimeout(s.lease), shardlease.WithSessions(s.sessions)}
	if s.renew > 0 {
		opts = append(opts, shardlease.WithRenewInterval(s.renew))
	}
	lw.run, err = startConsumer(fake, store, stream, func(context.Context, *shardlease.Batch) error { return nil }, opts...)
	if err != nil {
		return nil, fmt.Errorf("start a worker of %s on table %s: %w", s, table, err)
	}
	return cw, nil
}

// costWorker is a lone worker of the cost rows.
type costWorker struct {
	*loneWorker
	spec          costSpec
	stream, table string
	rows          *rowUnits
}

// rowUnits sums the writes to lease rows and the write units they
// consumed, apart from those of worker rows ("stream:@owner", where a
// session lives). It
// wraps a dyncount.Client with Capacity set, whose outputs carry the
// consumed capacity; the client's totals hold both kinds.
type rowUnits struct {
	shardlease.DynamoDBAPI
	leaseMicros atomic.Int64 // millionths of a write unit
	leaseWrites atomic.Int64
}

// LeaseUnits returns the write units lease rows consumed so far.
func (r *rowUnits) LeaseUnits() float64 { return float64(r.leaseMicros.Load()) / 1e6 }

// LeaseWrites returns the writes to lease rows so far.
func (r *rowUnits) LeaseWrites() int64 { return r.leaseWrites.Load() }

// add counts cc if key names a lease row.
func (r *rowUnits) add(key map[string]dtypes.AttributeValue, cc *dtypes.ConsumedCapacity) {
	k, ok := key["lease_key"].(*dtypes.AttributeValueMemberS)
	if !ok || strings.Contains(k.Value, ":@") || cc == nil || cc.CapacityUnits == nil {
		return
	}
	r.leaseMicros.Add(int64(*cc.CapacityUnits * 1e6))
	r.leaseWrites.Add(1)
}

// PutItem counts a lease row's units.
func (r *rowUnits) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := r.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil && out != nil {
		r.add(in.Item, out.ConsumedCapacity)
	}
	return out, err
}

// UpdateItem counts a lease row's units.
func (r *rowUnits) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := r.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err == nil && out != nil {
		r.add(in.Key, out.ConsumedCapacity)
	}
	return out, err
}

// DeleteItem counts a lease row's units.
func (r *rowUnits) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	out, err := r.DynamoDBAPI.DeleteItem(ctx, in, o...)
	if err == nil && out != nil {
		r.add(in.Key, out.ConsumedCapacity)
	}
	return out, err
}
