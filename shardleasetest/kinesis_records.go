package shardleasetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// iterator is the state a shard iterator carries.
type iterator struct {
	Fake        uint64
	Stream      string
	Incarnation uint64
	Shard       int
	Pos         int   // index of the next record to return
	Issued      int64 // unix nanoseconds
}

func encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the token types always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decode(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// PutRecord appends a record to the open shard whose hash key range holds the
// record's hash key: ExplicitHashKey if given, else the MD5 of PartitionKey
// read as a 128-bit big-endian integer. SequenceNumberForOrdering is accepted
// and has no further effect: sequence numbers always increase.
func (f *Kinesis) PutRecord(ctx context.Context, params *kinesis.PutRecordInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	if params == nil {
		params = &kinesis.PutRecordInput{}
	}
	name, err := f.beginStream(ctx, OpPutRecord, "", params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	h, err := recordHash(params.PartitionKey, params.ExplicitHashKey, len(params.Data))
	if err != nil {
		return nil, err
	}
	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := st.fits(*params.PartitionKey, len(params.Data)); err != nil {
		return nil, err
	}
	s, seq := st.put(h, *params.PartitionKey, params.Data)
	return &kinesis.PutRecordOutput{ShardId: ptr(s.id), SequenceNumber: ptr(seq), EncryptionType: types.EncryptionTypeNone}, nil
}

// PutRecords appends up to 500 records as PutRecord does, in order. An
// invalid entry fails the whole call with InvalidArgumentException; otherwise
// every entry succeeds (FailedRecordCount 0). Use a FaultFunc to fail a call.
func (f *Kinesis) PutRecords(ctx context.Context, params *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	if params == nil {
		params = &kinesis.PutRecordsInput{}
	}
	name, err := f.beginStream(ctx, OpPutRecords, "", params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	if n := len(params.Records); n < 1 || n > MaxPutRecordsEntries {
		return nil, invalidArgument("Records has %d entries; PutRecords takes 1 to %d.", n, MaxPutRecordsEntries)
	}
	hashes := make([]*big.Int, len(params.Records))
	total := 0
	for i, e := range params.Records {
		h, err := recordHash(e.PartitionKey, e.ExplicitHashKey, len(e.Data))
		if err != nil {
			return nil, fmt.Errorf("records[%d]: %w", i, err)
		}
		hashes[i] = h
		total += len(e.Data) + len(*e.PartitionKey)
	}
	if total > MaxPutRecordsSize {
		return nil, invalidArgument("Records total %d bytes; PutRecords takes at most %d.", total, MaxPutRecordsSize)
	}
	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for i, e := range params.Records {
		if err := st.fits(*e.PartitionKey, len(e.Data)); err != nil {
			return nil, fmt.Errorf("records[%d]: %w", i, err)
		}
	}
	out := &kinesis.PutRecordsOutput{FailedRecordCount: ptr(int32(0)), EncryptionType: types.EncryptionTypeNone}
	for i, e := range params.Records {
		s, seq := st.put(hashes[i], *e.PartitionKey, e.Data)
		out.Records = append(out.Records, types.PutRecordsResultEntry{ShardId: ptr(s.id), SequenceNumber: ptr(seq)})
	}
	return out, nil
}

func recordHash(key, explicit *string, dataLen int) (*big.Int, error) {
	if key == nil || *key == "" || utf8.RuneCountInString(*key) > 256 {
		return nil, invalidArgument("PartitionKey must be 1 to 256 characters.")
	}
	if dataLen+len(*key) > MaxLargeRecordSize {
		return nil, invalidArgument("Record of %d bytes (data and partition key) exceeds the limit of %d.", dataLen+len(*key), MaxLargeRecordSize)
	}
	if explicit != nil {
		h, ok := parseHashKey(*explicit)
		if !ok {
			return nil, invalidArgument("ExplicitHashKey %q is not a hash key (a decimal integer from 0 to 2^128-1).", *explicit)
		}
		return h, nil
	}
	return partitionHash(*key), nil
}

// fits checks a record's size against the stream's maximum record size.
// f.mu must be held.
func (st *stream) fits(key string, dataLen int) error {
	if n := dataLen + len(key); n > st.maxRecord {
		return invalidArgument("Record of %d bytes (data and partition key) exceeds the maximum record size of stream %s, %d KiB; UpdateMaxRecordSize raises it up to %d KiB.", n, st.name, st.maxRecord>>10, MaxLargeRecordSize>>10)
	}
	return nil
}

// put appends a record. f.mu must be held.
func (st *stream) put(h *big.Int, key string, data []byte) (*shard, string) {
	s := st.route(h)
	arrival := time.Now().Truncate(time.Millisecond).UTC()
	if n := len(s.records); n > 0 && arrival.Before(*s.records[n-1].ApproximateArrivalTimestamp) {
		arrival = *s.records[n-1].ApproximateArrivalTimestamp // never let arrival go backwards
	}
	seq := st.nextSeq(s.num)
	s.records = append(s.records, types.Record{
		Data:                        slices.Clone(data),
		PartitionKey:                ptr(key),
		SequenceNumber:              ptr(seq),
		ApproximateArrivalTimestamp: &arrival,
		EncryptionType:              types.EncryptionTypeNone,
	})
	st.poke()
	return s, seq
}

// GetShardIterator returns an iterator for a shard, open or closed:
//   - TRIM_HORIZON: the shard's first record (records are never trimmed);
//   - LATEST: just after the last record put so far;
//   - AT_SEQUENCE_NUMBER / AFTER_SEQUENCE_NUMBER: the first record whose
//     sequence number is at least / greater than StartingSequenceNumber, which
//     must have been handed out for this shard (a record's, or the shard's
//     starting or ending sequence number), else InvalidArgumentException;
//   - AT_TIMESTAMP: the first record whose ApproximateArrivalTimestamp is at
//     or after Timestamp (just after the last record if there is none).
//
// The iterator is valid for [IteratorTTL].
func (f *Kinesis) GetShardIterator(ctx context.Context, params *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if params == nil {
		params = &kinesis.GetShardIteratorInput{}
	}
	name, err := f.beginStream(ctx, OpGetShardIterator, deref(params.ShardId), params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	if params.ShardId == nil {
		return nil, invalidArgument("ShardId is required.")
	}
	var seqShard int
	switch params.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon, types.ShardIteratorTypeLatest:
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		if params.StartingSequenceNumber == nil {
			return nil, invalidArgument("StartingSequenceNumber is required for ShardIteratorType %s.", params.ShardIteratorType)
		}
		n, ok := parseSeq(*params.StartingSequenceNumber)
		if !ok {
			return nil, invalidArgument("StartingSequenceNumber %s used in GetShardIterator on shard %s in stream %s under account %s is invalid.", *params.StartingSequenceNumber, *params.ShardId, name, Account)
		}
		seqShard = n
	case types.ShardIteratorTypeAtTimestamp:
		if params.Timestamp == nil {
			return nil, invalidArgument("Timestamp is required for ShardIteratorType AT_TIMESTAMP.")
		}
	default:
		return nil, invalidArgument("ShardIteratorType %q is not one of %v.", params.ShardIteratorType, params.ShardIteratorType.Values())
	}

	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := st.shard(*params.ShardId)
	if s == nil || f.agedOut(s, time.Now()) {
		return nil, shardNotFound(name, *params.ShardId)
	}
	var pos int
	switch params.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
		pos = 0
	case types.ShardIteratorTypeLatest:
		pos = len(s.records)
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		if seqShard != s.num {
			return nil, invalidArgument("Invalid StartingSequenceNumber. It encodes %s, while it was used in a call to a shard with %s", shardID(seqShard), s.id)
		}
		// Equal-width decimal strings: string order is numeric order.
		seq := *params.StartingSequenceNumber
		after := params.ShardIteratorType == types.ShardIteratorTypeAfterSequenceNumber
		pos = sort.Search(len(s.records), func(i int) bool {
			r := *s.records[i].SequenceNumber
			if after {
				return r > seq
			}
			return r >= seq
		})
	case types.ShardIteratorTypeAtTimestamp:
		ts := *params.Timestamp
		pos = sort.Search(len(s.records), func(i int) bool {
			return !s.records[i].ApproximateArrivalTimestamp.Before(ts)
		})
	}
	it := iterator{Fake: f.id, Stream: st.name, Incarnation: st.incarnation, Shard: s.num, Pos: pos, Issued: time.Now().UnixNano()}
	return &kinesis.GetShardIteratorOutput{ShardIterator: ptr(encode(it))}, nil
}

// GetRecords returns up to Limit records (default and maximum 10,000), and
// up to [MaxReadSize] of them but at least one, from the iterator's position, MillisBehindLatest (0 once caught up, else the age
// of the oldest record not yet returned) and a NextShardIterator. An open shard
// always gets a NextShardIterator, also when no records are returned. The call
// that reaches the end of a closed shard returns the remaining records, the
// shard's ChildShards and a nil NextShardIterator.
//
// Errors: ExpiredIteratorException once the iterator is [IteratorTTL] old;
// ProvisionedThroughputExceededException when the shard's read limit is
// reached (see [WithReadLimit]); ResourceNotFoundException when the stream is
// gone; InvalidArgumentException for an iterator this fake did not issue.
func (f *Kinesis) GetRecords(ctx context.Context, params *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if params == nil {
		params = &kinesis.GetRecordsInput{}
	}
	var it iterator
	itErr := fmt.Errorf("no ShardIterator")
	if params.ShardIterator != nil {
		itErr = decode(*params.ShardIterator, &it)
	}
	hookShard := ""
	if itErr == nil {
		hookShard = shardID(it.Shard)
	}
	if err := f.begin(ctx, OpGetRecords, hookShard); err != nil {
		return nil, err
	}
	if itErr != nil || it.Fake != f.id {
		return nil, invalidArgument("Invalid ShardIterator.")
	}
	limit := MaxGetRecordsLimit
	if params.Limit != nil {
		if *params.Limit < 1 || *params.Limit > MaxGetRecordsLimit {
			return nil, invalidArgument("Limit %d must be from 1 to %d.", *params.Limit, MaxGetRecordsLimit)
		}
		limit = int(*params.Limit)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[it.Stream]
	if st == nil || st.incarnation != it.Incarnation {
		return nil, streamNotFound(it.Stream)
	}
	if it.Shard < 0 || it.Shard >= len(st.shards) || it.Pos < 0 {
		return nil, invalidArgument("Invalid ShardIterator.")
	}
	s := st.shards[it.Shard]
	now := time.Now()
	if f.agedOut(s, now) {
		return nil, shardNotFound(st.name, s.id)
	}
	issued := time.Unix(0, it.Issued)
	if now.Sub(issued) >= IteratorTTL {
		return nil, &types.ExpiredIteratorException{Message: ptr(fmt.Sprintf(
			"Iterator expired. The iterator was created at time %s while right now it is %s which is further in the future than the tolerated delay of %d milliseconds.",
			issued.UTC().Format(time.RFC1123), now.UTC().Format(time.RFC1123), IteratorTTL.Milliseconds()))}
	}
	if f.readLimit > 0 {
		s.reads = slices.DeleteFunc(s.reads, func(t time.Time) bool { return now.Sub(t) >= time.Second })
		if len(s.reads) >= f.readLimit {
			return nil, &types.ProvisionedThroughputExceededException{Message: ptr(fmt.Sprintf(
				"Rate exceeded for shard %s in stream %s under account %s.", s.id, st.name, Account))}
		}
		s.reads = append(s.reads, now)
	}

	return st.page(s, it, limit, now), nil
}

// page is the GetRecords output of up to limit records of s, a shard of st,
// from the position of iterator it, at now. f.mu must be held.
func (st *stream) page(s *shard, it iterator, limit int, now time.Time) *kinesis.GetRecordsOutput {
	start := min(it.Pos, len(s.records))
	end := readEnd(s.records, start, limit)
	out := &kinesis.GetRecordsOutput{Records: make([]types.Record, 0, end-start)}
	for _, r := range s.records[start:end] {
		// Copies, so a caller changing what it got cannot change the stream.
		r.Data = slices.Clone(r.Data)
		r.ApproximateArrivalTimestamp = ptr(*r.ApproximateArrivalTimestamp)
		r.PartitionKey = ptr(*r.PartitionKey)
		r.SequenceNumber = ptr(*r.SequenceNumber)
		out.Records = append(out.Records, r)
	}
	behind := int64(0)
	if end < len(s.records) {
		behind = max(0, now.Sub(*s.records[end].ApproximateArrivalTimestamp).Milliseconds())
	}
	out.MillisBehindLatest = ptr(behind)
	if end == len(s.records) && !s.open() {
		out.ChildShards = st.childShards(s)
		return out
	}
	next := it
	next.Pos = end
	next.Issued = now.UnixNano()
	out.NextShardIterator = ptr(encode(next))
	return out
}
