package kinesisread

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
)

func TestPosition(t *testing.T) {
	ts := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	later := ts.Add(time.Hour)
	latest := Start{Type: types.ShardIteratorTypeLatest}
	trim := Start{Type: types.ShardIteratorTypeTrimHorizon}
	atTS := Start{Type: types.ShardIteratorTypeAtTimestamp, Timestamp: ts}
	for _, tc := range []struct {
		name string
		pos  Position
		cont string // the last event's continuation sequence number
		// want is the iterator type with its sequence number or timestamp,
		// for GetShardIterator and for SubscribeToShard alike.
		typ   types.ShardIteratorType
		seq   string
		at    time.Time
		start Start // what Start names
	}{
		{
			name: "after a checkpoint",
			pos:  Position{Checkpoint: "7", SubSequence: -1, Recorded: latest, FromStart: true, Initial: latest},
			typ:  types.ShardIteratorTypeAfterSequenceNumber, seq: "7", start: latest,
		},
		{
			name: "at a checkpoint inside an aggregate, to read it again",
			pos:  Position{Checkpoint: "7", SubSequence: 2, Initial: latest},
			typ:  types.ShardIteratorTypeAtSequenceNumber, seq: "7", start: latest,
		},
		{
			name: "the row's recorded start before reading from the start",
			pos:  Position{SubSequence: -1, Recorded: latest, FromStart: true, Initial: trim},
			typ:  types.ShardIteratorTypeLatest, start: latest,
		},
		{
			name: "a recorded timestamp",
			pos:  Position{SubSequence: -1, Recorded: atTS, Initial: latest},
			typ:  types.ShardIteratorTypeAtTimestamp, at: ts, start: atTS,
		},
		{
			name: "the trim horizon for a shard read from its start, whatever the initial position",
			pos:  Position{SubSequence: -1, FromStart: true, Initial: atTS},
			typ:  types.ShardIteratorTypeTrimHorizon, start: trim,
		},
		{
			name: "the initial timestamp",
			pos:  Position{SubSequence: -1, Initial: Start{Type: types.ShardIteratorTypeAtTimestamp, Timestamp: later}},
			typ:  types.ShardIteratorTypeAtTimestamp, at: later, start: Start{Type: types.ShardIteratorTypeAtTimestamp, Timestamp: later},
		},
		{
			name: "an initial position that takes no timestamp is sent without one",
			pos:  Position{SubSequence: -1, Initial: Start{Type: types.ShardIteratorTypeLatest, Timestamp: ts}},
			typ:  types.ShardIteratorTypeLatest, start: Start{Type: types.ShardIteratorTypeLatest, Timestamp: ts},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var at *time.Time
			if !tc.at.IsZero() {
				at = aws.Time(tc.at)
			}
			var seq *string
			if tc.seq != "" {
				seq = aws.String(tc.seq)
			}
			assert.Equal(t, &kinesis.GetShardIteratorInput{
				StreamName: aws.String("orders"), ShardId: aws.String("shardId-000000000001"),
				ShardIteratorType: tc.typ, StartingSequenceNumber: seq, Timestamp: at,
			}, tc.pos.Iterator("orders", "shardId-000000000001"))
			assert.Equal(t, &types.StartingPosition{Type: tc.typ, SequenceNumber: seq, Timestamp: at}, tc.pos.StartingPosition(""))
			assert.Equal(t, tc.start, tc.pos.Start())
		})
	}
}

func TestPositionContinuation(t *testing.T) {
	pos := Position{Checkpoint: "7", SubSequence: -1, Initial: Start{Type: types.ShardIteratorTypeLatest}}
	assert.Equal(t, &types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: aws.String("9")},
		pos.StartingPosition("9"), "a subscription made again starts after the last event")
	pos.SubSequence = 2
	assert.Equal(t, &types.StartingPosition{Type: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: aws.String("7")},
		pos.StartingPosition("9"), "an aggregate checkpointed inside and not read again yet is read again first")
	pos = pos.After("8")
	assert.Equal(t, Position{Checkpoint: "8", SubSequence: -1, Initial: pos.Initial}, pos, "After moves past the whole record")
	assert.Equal(t, &types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: aws.String("9")}, pos.StartingPosition("9"))
	assert.Equal(t, types.ShardIteratorTypeAfterSequenceNumber, pos.Iterator("orders", "s").ShardIteratorType, "polling knows no continuation")
}
