package kinesisread

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Start is where a shard without a checkpoint is read from.
type Start struct {
	// Type is TRIM_HORIZON, LATEST or AT_TIMESTAMP; empty for none.
	Type types.ShardIteratorType
	// Timestamp is the AT_TIMESTAMP position; it is ignored for the others.
	Timestamp time.Time
}

// IsZero reports whether s names no start.
func (s Start) IsZero() bool { return s.Type == "" }

// Position is where a reader starts: the one rule, for both reading modes
// and for naming the start to the caller. A reader moves it on with After
// as it reads.
type Position struct {
	// Checkpoint is the last sequence number processed; empty for none.
	Checkpoint string
	// SubSequence is the last user record processed inside the aggregate
	// Checkpoint; negative when the whole record was.
	SubSequence int64
	// Ended reports that the shard was read to its end already; nothing is
	// read then, and the other fields do not matter.
	Ended bool
	// Recorded is where the shard's row says a reader without a checkpoint
	// starts; zero for none.
	Recorded Start
	// FromStart reports that the shard must be read from its start (the
	// child of a shard this application read).
	FromStart bool
	// Initial is the configured initial position.
	Initial Start
}

// Start returns where a reader without a checkpoint starts: the recorded
// start, else the trim horizon for a shard read from its start, else the
// initial position.
func (p Position) Start() Start {
	switch {
	case !p.Recorded.IsZero():
		return p.Recorded
	case p.FromStart:
		return Start{Type: types.ShardIteratorTypeTrimHorizon}
	}
	return p.Initial
}

// After returns the position once the whole record seq was read.
func (p Position) After(seq string) Position {
	p.Checkpoint, p.SubSequence = seq, -1
	return p
}

// Iterator returns the GetShardIterator input for the shard: after the
// checkpoint; at it while its aggregate is to be read again (the caller
// skips the user records processed); else at Start.
func (p Position) Iterator(stream, shard string) *kinesis.GetShardIteratorInput {
	typ, seq, ts := p.at()
	name, arn := Ref(stream)
	return &kinesis.GetShardIteratorInput{
		StreamName: name, StreamARN: arn, ShardId: aws.String(shard),
		ShardIteratorType: typ, StartingSequenceNumber: seq, Timestamp: ts,
	}
}

// StartingPosition returns the SubscribeToShard starting position: after
// continuation, the last event's continuation sequence number, unless an
// aggregate is still to be read again; else as Iterator.
func (p Position) StartingPosition(continuation string) *types.StartingPosition {
	if continuation != "" && p.SubSequence < 0 {
		return &types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: aws.String(continuation)}
	}
	typ, seq, ts := p.at()
	return &types.StartingPosition{Type: typ, SequenceNumber: seq, Timestamp: ts}
}

// at is the iterator type of p with its sequence number or timestamp (nil
// when the type takes none).
func (p Position) at() (types.ShardIteratorType, *string, *time.Time) {
	switch {
	case p.Checkpoint != "" && p.SubSequence >= 0:
		return types.ShardIteratorTypeAtSequenceNumber, aws.String(p.Checkpoint), nil
	case p.Checkpoint != "":
		return types.ShardIteratorTypeAfterSequenceNumber, aws.String(p.Checkpoint), nil
	}
	st := p.Start()
	if st.Type == types.ShardIteratorTypeAtTimestamp {
		return st.Type, nil, aws.Time(st.Timestamp)
	}
	return st.Type, nil, nil
}
