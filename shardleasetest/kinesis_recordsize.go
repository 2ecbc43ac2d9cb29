package shardleasetest

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// A stream takes records of up to its maximum record size, data and
// partition key together: [MaxRecordSize] (1 MiB) unless CreateStream's
// MaxRecordSizeInKiB or UpdateMaxRecordSize set it, up to
// [MaxLargeRecordSize] (10 MiB), as with the service's large records. The
// limits of the calls do not depend on it: a PutRecords call carries at
// most [MaxPutRecordsSize], a GetRecords call or a subscription event at
// most [MaxReadSize] but always at least one record. The service's burst
// accounting of large records and its read throughput are not modelled.

// UpdateMaxRecordSize sets the maximum record size of the stream StreamARN
// names to MaxRecordSizeInKiB (1,024 to 10,240, else a ValidationException).
// Records put before keep their size; the change takes effect at once.
func (f *Kinesis) UpdateMaxRecordSize(ctx context.Context, params *kinesis.UpdateMaxRecordSizeInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateMaxRecordSizeOutput, error) {
	if params == nil {
		params = &kinesis.UpdateMaxRecordSizeInput{}
	}
	if err := f.begin(ctx, OpUpdateMaxRecordSize, ""); err != nil {
		return nil, err
	}
	if params.StreamARN == nil {
		return nil, invalidArgument("StreamARN is required.")
	}
	if params.MaxRecordSizeInKiB == nil {
		return nil, &types.ValidationException{Message: ptr("MaxRecordSizeInKiB is required.")}
	}
	kib, err := recordSizeKiB(*params.MaxRecordSizeInKiB)
	if err != nil {
		return nil, err
	}
	st, unlock, err := f.lockStreamARN(params.StreamARN)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st.maxRecord = kib << 10
	return &kinesis.UpdateMaxRecordSizeOutput{}, nil
}

// AllowLargeRecords lets stream take records of up to [MaxLargeRecordSize]
// (an UpdateMaxRecordSize call).
func (f *Kinesis) AllowLargeRecords(stream string) error {
	arn := fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", Region, Account, stream)
	_, err := f.UpdateMaxRecordSize(context.Background(), &kinesis.UpdateMaxRecordSizeInput{StreamARN: &arn, MaxRecordSizeInKiB: ptr(int32(MaxLargeRecordSize >> 10))})
	if err != nil {
		return fmt.Errorf("shardleasetest: let stream %s take records of up to %d MiB: %w", stream, MaxLargeRecordSize>>20, err)
	}
	return nil
}

// recordSizeKiB checks a maximum record size in KiB.
func recordSizeKiB(kib int32) (int, error) {
	if kib < MaxRecordSize>>10 || kib > MaxLargeRecordSize>>10 {
		return 0, &types.ValidationException{Message: ptr(fmt.Sprintf("MaxRecordSizeInKiB %d must be from %d to %d.", kib, MaxRecordSize>>10, MaxLargeRecordSize>>10))}
	}
	return int(kib), nil
}

// readSize is the size a record counts for against [MaxReadSize].
func readSize(r types.Record) int { return len(r.Data) + len(deref(r.PartitionKey)) }

// readEnd returns the end of the records a read from start may return:
// at most limit records and [MaxReadSize] bytes, and at least one record
// when any is there.
func readEnd(records []types.Record, start, limit int) int {
	end, size := start, 0
	for end < len(records) && end-start < limit {
		size += readSize(records[end])
		if size > MaxReadSize && end > start {
			break
		}
		end++
	}
	return end
}
