package kpl_test

import (
	"bytes"
	"crypto/md5"
	"errors"
	"testing"

	"github.com/shardlease/shardlease/internal/kpl"
)

// FuzzDeaggregate checks that no input makes Deaggregate panic, that every
// failure wraps one of the package's errors, and that whatever decodes
// survives a round trip through Aggregate.
//
// A mutated input almost never keeps a valid MD5, which would stop the
// fuzzer at the checksum; so each input is also decoded with its trailer
// recomputed, reaching the protobuf decoder with whatever the mutation did
// to the message.
func FuzzDeaggregate(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzDeaggregate.
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDeaggregate(t, data)
		if kpl.IsAggregated(data) && len(data) >= len(kpl.MagicPrefix)+md5.Size {
			fixed := bytes.Clone(data)
			sum := md5.Sum(fixed[len(kpl.MagicPrefix) : len(fixed)-md5.Size])
			copy(fixed[len(fixed)-md5.Size:], sum[:])
			checkDeaggregate(t, fixed)
		}
	})
}

func checkDeaggregate(t *testing.T, data []byte) {
	t.Helper()
	records, err := kpl.Deaggregate(data)
	if err != nil {
		if !errors.Is(err, kpl.ErrMalformed) && !errors.Is(err, kpl.ErrBadChecksum) &&
			!errors.Is(err, kpl.ErrNotAggregated) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		if len(records) != 0 {
			t.Fatalf("error %v with %d records", err, len(records))
		}
		return
	}
	if !kpl.IsAggregated(data) {
		t.Fatal("decoded data without the magic prefix")
	}
	again, err := kpl.Deaggregate(kpl.Aggregate(records))
	if err != nil {
		t.Fatalf("re-aggregated records do not decode: %v", err)
	}
	requireRecords(t, records, again)
}
