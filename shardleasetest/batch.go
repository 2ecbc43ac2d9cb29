package shardleasetest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardlease/shardlease"
)

// batchSeq numbers the records NewBatch makes, across calls, so that their
// sequence numbers increase as a shard's do.
var batchSeq atomic.Uint64

// NewBatch returns a batch of records from stream's shard shardID, as a
// consumer hands one to a handler, for a test that calls the handler
// itself: no stream, store or consumer is needed.
//
// A record given without a SequenceNumber gets one: 56 decimal digits,
// greater than any NewBatch handed out before, naming the shard as the
// in-process stream's do; its SubSequenceNumber is then -1 (a plain record,
// not part of a KPL aggregate). A record without an
// ApproximateArrivalTimestamp gets time.Now(). Other fields are kept; the
// records are copied.
//
// Batch.Checkpoint and Batch.Flush need the lease of a running consumer: a
// batch from NewBatch has none, and they return an error matching
// shardlease.ErrInvalidConfig that says so; a handler that calls them is
// tested with a consumer (see [Run]). Its Fence is the zero token.
func NewBatch(stream, shardID string, records ...shardlease.Record) *shardlease.Batch {
	recs := slices.Clone(records)
	now := time.Now().Truncate(time.Millisecond).UTC()
	for i := range recs {
		r := &recs[i]
		if r.SequenceNumber == "" {
			r.SequenceNumber = fmt.Sprintf("%s%0*d%0*d", seqPrefix, seqCounterWidth, batchSeq.Add(1), seqShardWidth, shardNumber(shardID))
			r.SubSequenceNumber = -1
		}
		if r.ApproximateArrivalTimestamp.IsZero() {
			r.ApproximateArrivalTimestamp = now
		}
		r.Data = slices.Clone(r.Data)
	}
	return &shardlease.Batch{Stream: stream, ShardID: shardID, Records: recs}
}

// shardNumber is the number in a shard id such as shardId-000000000003, or
// 0 for an id of another form or too long for a sequence number.
func shardNumber(shardID string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(shardID, "shardId-"))
	if err != nil || n < 0 || len(strconv.Itoa(n)) > seqShardWidth {
		return 0
	}
	return n
}
