package shardlease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// recordedStream answers the Kinesis calls Import makes from a recorded
// listing of a stream's shards: ListShards returns the listing, and
// GetShardIterator accepts a sequence number inside its shard's recorded
// range. It stands in for a stream that no longer exists, whose sequence
// numbers a table recorded; the consumer is never run against it.
type recordedStream struct {
	shards []kintypes.Shard
}

var _ shardlease.KinesisAPI = (*recordedStream)(nil)

func (r *recordedStream) ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return &kinesis.ListShardsOutput{Shards: r.shards}, nil
}

func (r *recordedStream) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	for _, s := range r.shards {
		if aws.ToString(s.ShardId) != aws.ToString(in.ShardId) {
			continue
		}
		seq := aws.ToString(in.StartingSequenceNumber)
		start, end := aws.ToString(s.SequenceNumberRange.StartingSequenceNumber), aws.ToString(s.SequenceNumberRange.EndingSequenceNumber)
		if seqnum.Compare(seq, start) < 0 || (end != "" && seqnum.Compare(seq, end) > 0) {
			return nil, &kintypes.InvalidArgumentException{Message: aws.String(fmt.Sprintf("sequence number %s is outside the recorded range of shard %s", seq, aws.ToString(in.ShardId)))}
		}
		return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String("recorded")}, nil
	}
	return nil, &kintypes.ResourceNotFoundException{Message: aws.String("shard " + aws.ToString(in.ShardId) + " is not in the recording")}
}

func (r *recordedStream) GetRecords(context.Context, *kinesis.GetRecordsInput, ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	return nil, fmt.Errorf("recordedStream: the records of a recorded stream are not kept")
}

// recordedShards reads testdata/peer-tables/<dir>/shards.json.
func recordedShards(t *testing.T, dir string) *recordedStream {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "peer-tables", dir, "shards.json"))
	require.NoError(t, err)
	var rec []struct {
		ShardID, Parent, AdjacentParent, StartHash, EndHash, StartSeq, EndSeq string
	}
	require.NoError(t, json.Unmarshal(b, &rec))
	out := &recordedStream{}
	for _, r := range rec {
		s := kintypes.Shard{
			ShardId:             aws.String(r.ShardID),
			HashKeyRange:        &kintypes.HashKeyRange{StartingHashKey: aws.String(r.StartHash), EndingHashKey: aws.String(r.EndHash)},
			SequenceNumberRange: &kintypes.SequenceNumberRange{StartingSequenceNumber: aws.String(r.StartSeq)},
		}
		if r.Parent != "" {
			s.ParentShardId = aws.String(r.Parent)
		}
		if r.AdjacentParent != "" {
			s.AdjacentParentShardId = aws.String(r.AdjacentParent)
		}
		if r.EndSeq != "" {
			s.SequenceNumberRange.EndingSequenceNumber = aws.String(r.EndSeq)
		}
		out.shards = append(out.shards, s)
	}
	return out
}

// handMadeStream is the recorded listing that the hand-made rows of
// testdata/legacy fit: shards 0 to 4, shard 1 closed and split, shard 4 its
// child.
func handMadeStream() *recordedStream {
	shard := func(id, parent, end string) kintypes.Shard {
		s := kintypes.Shard{ShardId: aws.String(id), SequenceNumberRange: &kintypes.SequenceNumberRange{StartingSequenceNumber: aws.String("0")}}
		if parent != "" {
			s.ParentShardId = aws.String(parent)
		}
		if end != "" {
			s.SequenceNumberRange.EndingSequenceNumber = aws.String(end)
		}
		return s
	}
	return &recordedStream{shards: []kintypes.Shard{
		shard("shardId-000000000000", "", ""),
		shard("shardId-000000000001", "", "49599999999999999999999999999999999999999999999999999999"),
		shard("shardId-000000000002", "", ""),
		shard("shardId-000000000003", "", ""),
		shard("shardId-000000000004", "shardId-000000000001", ""),
	}}
}

// loadScan creates a table with the key schema of the DynamoDB JSON scan
// testdata/peer-tables/<dir>/<file> and puts its items, as the library that
// wrote them left them. It returns the new table's name.
func loadScan(t *testing.T, client shardlease.DynamoDBAPI, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "peer-tables", dir, file))
	require.NoError(t, err)
	var scan struct {
		Items     []json.RawMessage `json:"items"`
		KeySchema []struct {
			Key, Name, Type string
		} `json:"key_schema"`
		Table string `json:"table"`
	}
	require.NoError(t, json.Unmarshal(b, &scan))
	require.Len(t, scan.KeySchema, 1)
	require.Equal(t, "HASH", scan.KeySchema[0].Key)
	require.Equal(t, "S", scan.KeySchema[0].Type)
	table := foreignTable(t, client, scan.Table, scan.KeySchema[0].Name)
	for i, raw := range scan.Items {
		item, err := decodeItem(raw)
		require.NoError(t, err, "%s item %d", file, i)
		_, err = client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err, "%s item %d", file, i)
	}
	return table
}
