package kpl_test

import (
	"errors"
	"testing"

	"github.com/shardlease/shardlease/internal/kpl"
)

// FuzzDeaggregate checks that no input makes Deaggregate panic, that every
// failure wraps one of the package's errors, and that whatever decodes
// survives a round trip through Aggregate.
func FuzzDeaggregate(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzDeaggregate.
	f.Fuzz(func(t *testing.T, data []byte) {
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
	})
}
