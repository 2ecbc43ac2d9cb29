package shardlease

// This file counts what the readers hold: the records and payload bytes of
// the batches a reader has made and its runner is not yet done with.
//
// A reader hands batches to its processor over an unbuffered channel, and
// the processor takes the next batch only once it is done with the one in
// hand. So a reader holds at most two batches: the processor's, and the one
// it read ahead and is handing on. When a send completes, the batch before
// it is done with; when the reader stops, it counts nothing more. The count
// costs two atomic adds per batch and a sum of the records' lengths, never
// a lock.
//
// Not counted here, and bounded elsewhere: under enhanced fan-out the SDK's
// decoder holds up to two more decoded events (its two goroutines each wait
// to hand one on), and Go's HTTP/2 transport buffers up to its stream
// flow-control window (4 MiB) of raw bytes per subscription; records in
// flight in the lanes of WithKeyConcurrency (at most WithMaxInFlight) and
// records WithBatchWindow holds back. docs/handlers.md#memory states the
// bound per shard.

import (
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// buffered is the records and payload bytes that the consumer's readers
// hold, summed over them: added to by every reader, read by Stats.
type buffered struct{ records, bytes atomic.Int64 }

// add adds n records of size bytes (negative to take them away).
func (s *buffered) add(n, size int64) {
	s.records.Add(n)
	s.bytes.Add(size)
}

// reader returns the count of one reader, which adds to s.
func (s *buffered) reader() *readAhead { return &readAhead{sum: s} }

// readAhead is one reader's part of buffered: the batch its processor has
// in hand and the one it is handing on. Only the reader uses it: one
// goroutine at a time, when a parked reader's steps move from one to the
// next (kinesisread.Starter).
type readAhead struct {
	sum          *buffered
	inHand, next batchSize
}

// batchSize is the records and payload bytes of one batch.
type batchSize struct{ records, bytes int64 }

// handing counts a batch of n records and size payload bytes that the
// reader is about to hand on.
func (ra *readAhead) handing(n int, size int64) {
	ra.next = batchSize{int64(n), size}
	ra.sum.add(ra.next.records, ra.next.bytes)
}

// handed records that the processor took the batch being handed on: it is
// done with the one it had in hand.
func (ra *readAhead) handed() {
	ra.sum.add(-ra.inHand.records, -ra.inHand.bytes)
	ra.inHand, ra.next = ra.next, batchSize{}
}

// close takes away everything the reader counted, once it has stopped.
func (ra *readAhead) close() {
	ra.sum.add(-ra.inHand.records-ra.next.records, -ra.inHand.bytes-ra.next.bytes)
	ra.inHand, ra.next = batchSize{}, batchSize{}
}

// payloadBytes is the size of the records' data: what a batch holds beyond
// a few hundred bytes of bookkeeping per record. De-aggregated user records
// share their aggregate's data, so it is counted once.
func payloadBytes(recs []types.Record) int64 {
	var n int64
	for i := range recs {
		n += int64(len(recs[i].Data))
	}
	return n
}
