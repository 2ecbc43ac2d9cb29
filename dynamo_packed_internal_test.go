package shardlease

import (
	"testing"
	"time"
)

// FuzzPackedCodec checks that every packed checkpoint survives a round trip
// through its name and value on a worker row, and that no value makes the
// decoder panic.
func FuzzPackedCodec(f *testing.F) {
	for _, cp := range []string{"49590338271490256608559692538361571095921575989136588898", "1", "0", "007", ShardEnd, "AT_SEQUENCE", "12345678901234567890123456789"} {
		f.Add("orders", "shardId-000000000003", int64(7), cp, int64(-1), int64(-1), int64(0))
		f.Add("other", "shard.1", int64(1<<40), cp, int64(3), int64(1500), int64(20000))
	}
	f.Fuzz(func(t *testing.T, stream, shard string, counter int64, cp string, sub, behind, age int64) {
		k := LeaseKey{Stream: stream, Shard: shard}
		if k.Validate() != nil || cp == "" || counter < 0 || sub < -1 || behind < -1 || age < 0 {
			return
		}
		e := PackedCheckpoint{Key: k, Counter: counter, Checkpoint: cp, SubSequence: sub}
		if behind >= 0 {
			e.Lag = &Lag{BehindLatest: time.Duration(behind) * time.Millisecond, CheckpointAge: time.Duration(age) * time.Millisecond}
		}
		row := LeaseKey{Stream: "orders", Shard: "@w"}
		v := encodePacked(e)
		got, err := decodePacked(row, packedName(row.Stream, k), v)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if got.Key != e.Key || got.Counter != e.Counter || got.Checkpoint != e.Checkpoint || got.SubSequence != e.SubSequence || (got.Lag == nil) != (e.Lag == nil) || (e.Lag != nil && *got.Lag != *e.Lag) {
			t.Fatalf("round trip: wrote %+v, read %+v", e, got)
		}
		_, _ = decodePacked(row, shard, v[:len(v)/2])
	})
}
