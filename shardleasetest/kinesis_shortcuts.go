package shardleasetest

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The shortcuts below are what a test writes by hand: one line per stream,
// record or reshard. Each one makes the SDK-shaped call it stands for, so it
// is validated, counted by [Kinesis.Calls] and shown to a [FaultFunc] like
// any other call. Records and Shards only read; they are not calls.

// Entry is one record of [Kinesis.PutBatch].
type Entry struct {
	// PartitionKey picks the shard (by its MD5) unless ExplicitHashKey is
	// set; it is required.
	PartitionKey string
	// ExplicitHashKey, a decimal hash key, overrides PartitionKey's hash.
	ExplicitHashKey string
	// Data is the record's payload.
	Data []byte
}

// AddStream creates the stream name with n shards, shardId-000000000000
// onwards, splitting the hash key space evenly (a CreateStream call). The
// stream is ACTIVE on return.
func (f *Kinesis) AddStream(name string, n int) error {
	_, err := f.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: &name, ShardCount: ptr(int32(n))})
	if err != nil {
		return fmt.Errorf("shardleasetest: create stream %s with %d shards: %w", name, n, err)
	}
	return nil
}

// Put appends one record to stream (a PutRecord call) and returns the shard
// it went to and its sequence number.
func (f *Kinesis) Put(stream, partitionKey string, data []byte) (shardID, sequenceNumber string, err error) {
	out, err := f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: &stream, PartitionKey: &partitionKey, Data: data})
	if err != nil {
		return "", "", fmt.Errorf("shardleasetest: put a record with partition key %q to stream %s: %w", partitionKey, stream, err)
	}
	return *out.ShardId, *out.SequenceNumber, nil
}

// PutBatch appends entries to stream in order, in PutRecords calls of at
// most [MaxPutRecordsEntries] entries. On an error the calls before it took
// effect and the rest were not made.
func (f *Kinesis) PutBatch(stream string, entries ...Entry) error {
	for chunk := range slices.Chunk(entries, MaxPutRecordsEntries) {
		in := &kinesis.PutRecordsInput{StreamName: &stream}
		for _, e := range chunk {
			r := types.PutRecordsRequestEntry{PartitionKey: ptr(e.PartitionKey), Data: e.Data}
			if e.ExplicitHashKey != "" {
				r.ExplicitHashKey = ptr(e.ExplicitHashKey)
			}
			in.Records = append(in.Records, r)
		}
		if _, err := f.PutRecords(context.Background(), in); err != nil {
			return fmt.Errorf("shardleasetest: put %d records to stream %s: %w", len(chunk), stream, err)
		}
	}
	return nil
}

// Split splits an open shard of stream at the middle of its hash key range
// (a SplitShard call) and returns the two children: low holds the lower
// half of the range, high the upper.
func (f *Kinesis) Split(stream, shardID string) (low, high string, err error) {
	mid, err := f.middle(stream, shardID)
	if err == nil {
		_, err = f.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: &stream, ShardToSplit: &shardID, NewStartingHashKey: ptr(mid)})
	}
	var children []string
	if err == nil {
		children, err = f.children(stream, shardID, 2)
	}
	if err != nil {
		return "", "", fmt.Errorf("shardleasetest: split shard %s of stream %s: %w", shardID, stream, err)
	}
	return children[0], children[1], nil
}

// Merge merges two open, adjacent shards of stream (a MergeShards call) and
// returns the child. The child's ParentShardId is shardID and its
// AdjacentParentShardId is adjacentID.
func (f *Kinesis) Merge(stream, shardID, adjacentID string) (child string, err error) {
	_, err = f.MergeShards(context.Background(), &kinesis.MergeShardsInput{StreamName: &stream, ShardToMerge: &shardID, AdjacentShardToMerge: &adjacentID})
	var children []string
	if err == nil {
		children, err = f.children(stream, shardID, 1)
	}
	if err != nil {
		return "", fmt.Errorf("shardleasetest: merge shards %s and %s of stream %s: %w", shardID, adjacentID, stream, err)
	}
	return children[0], nil
}

// Records returns a copy of every record in a shard of stream, open or
// closed, oldest first: what GetRecords hands out from TRIM_HORIZON. It is
// not a call: it is not counted and no FaultFunc sees it.
func (f *Kinesis) Records(stream, shardID string) ([]types.Record, error) {
	st, unlock, err := f.lockStream(stream)
	if err != nil {
		return nil, fmt.Errorf("shardleasetest: records of shard %s: %w", shardID, err)
	}
	defer unlock()
	s := st.shard(shardID)
	if s == nil {
		return nil, fmt.Errorf("shardleasetest: records: %w", shardNotFound(stream, shardID))
	}
	out := make([]types.Record, len(s.records))
	for i, r := range s.records {
		r.Data = slices.Clone(r.Data)
		out[i] = r
	}
	return out, nil
}

// Shards describes the shards of stream, open and closed, in shard id order,
// as ListShards lists them (without those aged out, see [WithRetention]). It
// is not a call: it is not counted and no FaultFunc sees it.
func (f *Kinesis) Shards(stream string) ([]types.Shard, error) {
	st, unlock, err := f.lockStream(stream)
	if err != nil {
		return nil, fmt.Errorf("shardleasetest: shards: %w", err)
	}
	defer unlock()
	now := time.Now()
	var out []types.Shard
	for _, s := range st.shards {
		if !f.agedOut(s, now) {
			out = append(out, s.describe())
		}
	}
	return out, nil
}

// middle returns the hash key that splits a shard's range in two halves.
func (f *Kinesis) middle(stream, shardID string) (string, error) {
	st, unlock, err := f.lockStream(stream)
	if err != nil {
		return "", err
	}
	defer unlock()
	s := st.shard(shardID)
	if s == nil {
		return "", shardNotFound(stream, shardID)
	}
	width := new(big.Int).Sub(s.end, s.start)
	return new(big.Int).Add(s.start, width.Add(width, big.NewInt(1)).Rsh(width, 1)).String(), nil
}

// children returns the children of a shard of stream, which must number n
// (the stream may have been deleted and made again since the reshard).
func (f *Kinesis) children(stream, shardID string, n int) ([]string, error) {
	st, unlock, err := f.lockStream(stream)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := st.shard(shardID)
	if s == nil {
		return nil, shardNotFound(stream, shardID)
	}
	if len(s.children) != n {
		return nil, fmt.Errorf("shard %s has %d children, not %d: was the stream made again meanwhile?", shardID, len(s.children), n)
	}
	return slices.Clone(s.children), nil
}
