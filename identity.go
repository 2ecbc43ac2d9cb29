package shardlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// StreamIdentity names one incarnation of a stream: a stream deleted and
// created again under the same name has the same name and ARN but another
// creation time, and Kinesis reuses its shard ids, so rows keyed
// "stream:shard" cannot tell the two apart by themselves.
type StreamIdentity struct {
	// Stream is the stream's name.
	Stream string
	// ARN is the stream's ARN.
	ARN string
	// Created is when the stream was created, as Kinesis reports it.
	Created time.Time
}

// Same reports whether id and other name the same incarnation.
func (id StreamIdentity) Same(other StreamIdentity) bool {
	return id.Stream == other.Stream && id.ARN == other.ARN && id.Created.Equal(other.Created)
}

func (id StreamIdentity) String() string {
	return fmt.Sprintf("%s (created %s)", id.ARN, id.Created.UTC().Format(time.RFC3339))
}

// IdentityStore is implemented by lease stores that record which
// incarnation of a stream its rows belong to, in one row per stream (both
// stores of this package do). The consumer checks it at start and at every
// shard sync, and refuses to run on rows of a stream that was deleted and
// created again (see ErrStreamRecreated).
type IdentityStore interface {
	// StreamIdentity returns the identity recorded for stream. None recorded
	// is an error matching ErrLeaseNotFound.
	StreamIdentity(ctx context.Context, stream string) (StreamIdentity, error)

	// RecordStreamIdentity records id for its stream if none is recorded
	// (created=true) and returns the identity recorded now, which differs
	// from id when another one was recorded before.
	RecordStreamIdentity(ctx context.Context, id StreamIdentity) (recorded StreamIdentity, created bool, err error)

	// ResetStream deletes every row of id.Stream (leases, checkpoints and
	// worker rows) and records id as the stream's identity. It is for
	// operators, with every consumer of the stream stopped: it writes
	// without fencing. It returns how many lease rows it deleted.
	ResetStream(ctx context.Context, id StreamIdentity) (deleted int, err error)
}

var (
	// ErrStreamRecreated means the lease table's rows of a stream belong to
	// an earlier stream of the same name, deleted since: their checkpoints
	// mean nothing to the stream there now. See StreamRecreatedError.
	ErrStreamRecreated = errors.New("shardlease: stream was re-created")
	// ErrCheckpointRejected means Kinesis refused to position a reader
	// after a row's checkpoint (InvalidArgumentException): the sequence
	// number is not one of the shard's. The shard is released and not read
	// until an operator acts (Stats.CheckpointsRejected counts these).
	ErrCheckpointRejected = errors.New("shardlease: checkpoint rejected by Kinesis")
)

// StreamRecreatedError reports that the rows of a stream were written for
// another incarnation of it.
type StreamRecreatedError struct {
	Table    string // empty for stores without a table name
	Recorded StreamIdentity
	Current  StreamIdentity
}

func (e *StreamRecreatedError) Error() string {
	table := "TABLE"
	where := "the lease store"
	if e.Table != "" {
		table, where = e.Table, "table "+e.Table
	}
	return fmt.Sprintf("%v: the rows of stream %s in %s belong to the stream created at %s, but the stream now was created at %s: "+
		"it was deleted and created again, and the old checkpoints do not apply to it (Kinesis reuses shard ids). "+
		"Stop every consumer of the stream, then run 'shardlease adopt-stream -table %s -stream %s' to delete the old rows and record the new stream "+
		"(its shards are then read from the initial position), or use another lease table",
		ErrStreamRecreated, e.Current.Stream, where, e.Recorded.Created.UTC().Format(time.RFC3339Nano), e.Current.Created.UTC().Format(time.RFC3339Nano), table, e.Current.Stream)
}

// Unwrap returns ErrStreamRecreated.
func (e *StreamRecreatedError) Unwrap() error { return ErrStreamRecreated }

// tableNamer is implemented by stores with a table name (DynamoStore).
type tableNamer interface{ Table() string }

// DescribeIdentity returns the identity of stream as Kinesis describes it
// now. A missing stream is a *StreamNotFoundError.
func DescribeIdentity(ctx context.Context, d StreamDescriber, stream string) (StreamIdentity, error) {
	out, err := d.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) {
			return StreamIdentity{}, &StreamNotFoundError{Stream: stream, Err: err}
		}
		return StreamIdentity{}, errorf("shardlease: stream %s: describe stream summary: %w", stream, err)
	}
	if out.StreamDescriptionSummary == nil {
		return StreamIdentity{}, errorf("shardlease: stream %s: describe stream summary returned no description", stream)
	}
	sum := out.StreamDescriptionSummary
	return StreamIdentity{Stream: stream, ARN: aws.ToString(sum.StreamARN), Created: aws.ToTime(sum.StreamCreationTimestamp)}, nil
}

// checkIdentity learns the stream's identity and compares it with the one
// recorded in the store (recording it when none is) at the first call, and
// with the one seen first at later calls. A mismatch is a
// *StreamRecreatedError, which ends Run.
func (co *coordinator) checkIdentity(ctx context.Context) error {
	c := co.c
	if co.noIdentity {
		return nil
	}
	d, ok := c.kin.(StreamDescriber)
	if !ok {
		co.noIdentity = true
		c.log.Info("the Kinesis client has no DescribeStreamSummary: the stream's identity is not checked (a re-created stream is not detected)")
		return nil
	}
	now, err := DescribeIdentity(ctx, d, c.stream)
	if err != nil {
		var denied *types.AccessDeniedException
		if errors.As(err, &denied) {
			co.noIdentity = true
			c.log.Warn("not allowed to describe the stream: its identity is not checked (a re-created stream is not detected); allow kinesis:DescribeStreamSummary", "err", err)
			return nil
		}
		return err
	}
	if co.identity != nil {
		if !co.identity.Same(now) {
			return co.recreated(*co.identity, now)
		}
		return nil
	}
	is, ok := c.store.(IdentityStore)
	if !ok {
		co.identity = &now
		return nil
	}
	recorded, created, err := is.RecordStreamIdentity(ctx, now)
	if err != nil {
		return errorf("shardlease: stream %s: record the stream's identity: %w", c.stream, err)
	}
	if !recorded.Same(now) {
		return co.recreated(recorded, now)
	}
	if created {
		c.log.Info("recorded the stream's identity", "arn", now.ARN, "created", now.Created)
	}
	co.identity = &now
	return nil
}

func (co *coordinator) recreated(recorded, now StreamIdentity) error {
	e := &StreamRecreatedError{Recorded: recorded, Current: now}
	if tn, ok := co.c.store.(tableNamer); ok {
		e.Table = tn.Table()
	}
	co.c.log.Error("stream re-created; not reading it", "err", e)
	return e
}

// checkpointRejected handles a GetShardIterator error for a reader
// positioned at the checkpoint (seq, sub): if Kinesis refused the sequence
// number, it logs and counts the refusal, marks the runner so that its
// shard is not taken again until the next shard sync interval, and reports
// true (the reader stops and the lease is released with its checkpoint).
func (r *leaseRunner) checkpointRejected(err error, seq string, sub int64) bool {
	var inv *types.InvalidArgumentException
	if seq == "" || seq == ShardEnd || !errors.As(err, &inv) {
		return false
	}
	r.rejected.Store(true)
	r.c.rejectedCheckpoint(r.shard)
	err = errorf("%w: stream %s shard %s: Kinesis refused to read after checkpoint %s (sub-sequence %d): %w",
		ErrCheckpointRejected, r.key.Stream, r.shard, seq, sub, err)
	r.log.Error("checkpoint rejected; the shard is not read until an operator acts: if the stream was re-created, stop the consumers and run 'shardlease adopt-stream'; if the row was edited, move its checkpoint with 'shardlease reset'. Retried after a shard sync interval", "err", err)
	return true
}
