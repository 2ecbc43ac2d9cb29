package kpl_test

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shardlease/shardlease/internal/kpl"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// frame wraps a hand-built protobuf message in the magic prefix and MD5
// trailer, independently of kpl.Aggregate.
func frame(msg ...byte) []byte {
	sum := md5.Sum(msg)
	out := append([]byte{0xf3, 0x89, 0x9a, 0xc2}, msg...)
	return append(out, sum[:]...)
}

// requireRecords compares records field by field, treating nil and empty
// Data as equal.
func requireRecords(t testing.TB, want, got []kpl.UserRecord) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].PartitionKey, got[i].PartitionKey, "record %d partition key", i)
		assert.Equal(t, want[i].ExplicitHashKey, got[i].ExplicitHashKey, "record %d explicit hash key", i)
		assert.True(t, bytes.Equal(want[i].Data, got[i].Data), "record %d data: want %q, got %q", i, want[i].Data, got[i].Data)
		assert.Equal(t, want[i].SubSequence, got[i].SubSequence, "record %d subsequence", i)
	}
}

// numbered returns records with SubSequence set to their position.
func numbered(records ...kpl.UserRecord) []kpl.UserRecord {
	for i := range records {
		records[i].SubSequence = i
	}
	return records
}

func TestRoundTrip(t *testing.T) {
	many := make([]kpl.UserRecord, 1000) // more keys than decode tracks on the stack
	for i := range many {
		many[i] = kpl.UserRecord{
			PartitionKey:    fmt.Sprintf("pk-%d", i),
			ExplicitHashKey: fmt.Sprintf("%d", i%7),
			Data:            []byte(strings.Repeat("x", i%13)),
		}
	}
	tests := []struct {
		name    string
		records []kpl.UserRecord
	}{
		{"without explicit hash keys", []kpl.UserRecord{
			{PartitionKey: "alpha", Data: []byte("one")},
			{PartitionKey: "beta", Data: []byte("two")},
			{PartitionKey: "alpha", Data: []byte("three")},
		}},
		{"with explicit hash keys", []kpl.UserRecord{
			{PartitionKey: "alpha", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte("one")},
			{PartitionKey: "beta", ExplicitHashKey: "0", Data: []byte("two")},
			{PartitionKey: "gamma", ExplicitHashKey: "0", Data: []byte("three")},
		}},
		{"mixed explicit hash keys", []kpl.UserRecord{
			{PartitionKey: "alpha", ExplicitHashKey: "42", Data: []byte("one")},
			{PartitionKey: "alpha", Data: []byte("two")},
		}},
		{"single record", []kpl.UserRecord{
			{PartitionKey: "only", Data: []byte("payload")},
		}},
		{"empty data", []kpl.UserRecord{
			{PartitionKey: "a", Data: nil},
			{PartitionKey: "b", Data: []byte{}},
			{PartitionKey: "c", Data: []byte("not empty")},
		}},
		{"empty partition key", []kpl.UserRecord{
			{PartitionKey: "", Data: []byte("x")},
		}},
		{"binary data", []kpl.UserRecord{
			{PartitionKey: "k", Data: []byte{0xf3, 0x89, 0x9a, 0xc2, 0, 0xff}},
		}},
		{"no records", nil},
		{"many records", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg := kpl.Aggregate(tt.records)
			require.True(t, kpl.IsAggregated(agg))
			got, err := kpl.Deaggregate(agg)
			require.NoError(t, err)
			requireRecords(t, numbered(tt.records...), got)
		})
	}
}

// TestGolden decodes a message written out by hand from the schema, with the
// fields out of their usual order, a tag and an unknown field.
func TestGolden(t *testing.T) {
	data := frame(
		0x1a, 0x06, // records[0], 6 bytes:
		/**/ 0x08, 0x00, // partition_key_index 0
		/**/ 0x1a, 0x02, 'h', 'i', // data "hi"
		0x0a, 0x01, 'a', // partition_key_table[0] "a"
		0x0a, 0x01, 'b', // partition_key_table[1] "b"
		0x12, 0x01, '7', // explicit_hash_key_table[0] "7"
		0x78, 0x2a, // unknown field 15, varint 42
		0x1a, 0x0b, // records[1], 11 bytes:
		/**/ 0x08, 0x01, // partition_key_index 1
		/**/ 0x10, 0x00, // explicit_hash_key_index 0
		/**/ 0x1a, 0x00, // data ""
		/**/ 0x22, 0x03, 0x0a, 0x01, 'k', // tags[0] {key "k"}
	)
	got, err := kpl.Deaggregate(data)
	require.NoError(t, err)
	requireRecords(t, []kpl.UserRecord{
		{PartitionKey: "a", Data: []byte("hi"), SubSequence: 0},
		{PartitionKey: "b", ExplicitHashKey: "7", Data: []byte{}, SubSequence: 1},
	}, got)
}

// TestAggregateGolden checks the encoder against bytes written out by hand:
// a repeated key is stored once.
func TestAggregateGolden(t *testing.T) {
	got := kpl.Aggregate([]kpl.UserRecord{
		{PartitionKey: "a", Data: []byte("hi")},
		{PartitionKey: "a", ExplicitHashKey: "7", Data: []byte("x")},
	})
	want := frame(
		0x0a, 0x01, 'a', // partition_key_table[0] "a"
		0x12, 0x01, '7', // explicit_hash_key_table[0] "7"
		0x1a, 0x06, 0x08, 0x00, 0x1a, 0x02, 'h', 'i', // records[0] {0, data "hi"}
		0x1a, 0x07, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x01, 'x', // records[1] {0, 0, data "x"}
	)
	assert.Equal(t, want, got)
}

func TestCorrupt(t *testing.T) {
	valid := kpl.Aggregate([]kpl.UserRecord{{PartitionKey: "a", Data: []byte("hello")}})
	flip := func(i int) []byte {
		b := bytes.Clone(valid)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name   string
		data   []byte
		want   error
		detail string // part of the message, naming the problem
	}{
		{"bad MD5 trailer", flip(len(valid) - 1), kpl.ErrBadChecksum, "trailer says"},
		{"message changed under MD5", flip(len(kpl.MagicPrefix) + 2), kpl.ErrBadChecksum, "trailer says"},
		{"magic only", []byte(kpl.MagicPrefix), kpl.ErrMalformed, "too short"},
		{"15 bytes after magic", append([]byte(kpl.MagicPrefix), make([]byte, 15)...), kpl.ErrMalformed, "too short"},
		{"truncated record", frame(0x0a, 0x01, 'a', 0x1a, 0x06, 0x08, 0x00, 0x1a, 0x02, 'h'), kpl.ErrMalformed, "unexpected EOF"},
		{"truncated key", frame(0x0a, 0x05, 'a'), kpl.ErrMalformed, "unexpected EOF"},
		{"truncated data in record", frame(0x0a, 0x01, 'a', 0x1a, 0x04, 0x08, 0x00, 0x1a, 0x05), kpl.ErrMalformed, "record 0: at byte 3: unexpected EOF"},
		{"truncated tag", frame(0x0a, 0x01, 'a', 0x80), kpl.ErrMalformed, "unexpected EOF"},
		{"varint overflow", frame(0x0a, 0x01, 'a', 0x1a, 0x0d,
			0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x1a, 0x00), kpl.ErrMalformed, "overflow"},
		{"field number zero", frame(0x02, 0x00), kpl.ErrMalformed, "invalid field number"},
		{"stray end group", frame(0x0c), kpl.ErrMalformed, "end group"},
		{"partition key index out of table", frame(0x0a, 0x01, 'a', 0x1a, 0x04, 0x08, 0x01, 0x1a, 0x00), kpl.ErrMalformed, "partition key index 1 outside a table of 1"},
		{"partition key index with empty table", frame(0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00), kpl.ErrMalformed, "partition key index 0 outside a table of 0"},
		{"huge partition key index", frame(0x0a, 0x01, 'a', 0x1a, 0x0d,
			0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x1a, 0x00), kpl.ErrMalformed, "partition key index 18446744073709551615 outside"},
		{"explicit hash key index out of table", frame(0x0a, 0x01, 'a', 0x12, 0x01, '7',
			0x1a, 0x06, 0x08, 0x00, 0x10, 0x01, 0x1a, 0x00), kpl.ErrMalformed, "explicit hash key index 1 outside a table of 1"},
		{"explicit hash key index with no table", frame(0x0a, 0x01, 'a',
			0x1a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x00), kpl.ErrMalformed, "explicit hash key index 0 outside a table of 0"},
		{"missing data", frame(0x0a, 0x01, 'a', 0x1a, 0x02, 0x08, 0x00), kpl.ErrMalformed, "data missing"},
		{"data with wrong wire type", frame(0x0a, 0x01, 'a', 0x1a, 0x04, 0x08, 0x00, 0x18, 0x00), kpl.ErrMalformed, "data missing"},
		{"missing partition key index", frame(0x0a, 0x01, 'a', 0x1a, 0x02, 0x1a, 0x00), kpl.ErrMalformed, "partition_key_index missing"},
		{"plain data", []byte("hello"), kpl.ErrNotAggregated, "no magic prefix"},
		{"partial magic", []byte(kpl.MagicPrefix[:3]), kpl.ErrNotAggregated, "no magic prefix"},
		{"empty", nil, kpl.ErrNotAggregated, "no magic prefix"},
	}
	sentinels := []error{kpl.ErrBadChecksum, kpl.ErrMalformed, kpl.ErrNotAggregated}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kpl.Deaggregate(tt.data)
			require.ErrorIs(t, err, tt.want)
			assert.ErrorContains(t, err, tt.detail)
			assert.Empty(t, got)
			for _, s := range sentinels {
				if s != tt.want {
					assert.NotErrorIs(t, err, s)
				}
			}
		})
	}
}

func TestIsAggregated(t *testing.T) {
	assert.True(t, kpl.IsAggregated(kpl.Aggregate(nil)))
	assert.True(t, kpl.IsAggregated([]byte(kpl.MagicPrefix)))
	for _, plain := range []string{"", "hello", `{"json":true}`, kpl.MagicPrefix[:3], "\x00" + kpl.MagicPrefix} {
		assert.False(t, kpl.IsAggregated([]byte(plain)), "%q", plain)
	}
}

func TestDataAliasesInput(t *testing.T) {
	agg := kpl.Aggregate([]kpl.UserRecord{
		{PartitionKey: "a", Data: []byte("first")},
		{PartitionKey: "a", Data: []byte("second")},
	})
	got, err := kpl.Deaggregate(agg)
	require.NoError(t, err)
	require.Len(t, got, 2)

	i := bytes.Index(agg, []byte("first"))
	require.GreaterOrEqual(t, i, 0)
	assert.Same(t, &agg[i], &got[0].Data[0], "Data aliases the input")

	// No spare capacity: appending copies rather than overwriting the next record.
	assert.Equal(t, len(got[0].Data), cap(got[0].Data))
	_ = append(got[0].Data, "XXXXXXXXXXXXXX"...)
	assert.Equal(t, "second", string(got[1].Data))
}

func TestDeaggregateInto(t *testing.T) {
	prior := kpl.UserRecord{PartitionKey: "prior", Data: []byte("kept")}
	recs := []kpl.UserRecord{
		{PartitionKey: "a", ExplicitHashKey: "1", Data: []byte("x")},
		{PartitionKey: "b", Data: []byte("y")},
	}
	dst, err := kpl.DeaggregateInto([]kpl.UserRecord{prior}, kpl.Aggregate(recs))
	require.NoError(t, err)
	requireRecords(t, append([]kpl.UserRecord{prior}, numbered(recs...)...), dst)

	// Reused storage, and dst comes back at its original length on error.
	dst, err = kpl.DeaggregateInto(dst[:1], frame(0x0a, 0x01, 'a', 0x1a, 0x02, 0x08, 0x00))
	require.ErrorIs(t, err, kpl.ErrMalformed)
	requireRecords(t, []kpl.UserRecord{prior}, dst)

	dst, err = kpl.DeaggregateInto(dst[:0], kpl.Aggregate(recs[1:]))
	require.NoError(t, err)
	requireRecords(t, numbered(recs[1:]...), dst)
}

func TestDeaggregateIntoAllocations(t *testing.T) {
	recs := make([]kpl.UserRecord, 100)
	for i := range recs {
		recs[i] = kpl.UserRecord{PartitionKey: fmt.Sprintf("pk-%d", i), Data: make([]byte, 100)}
	}
	agg := kpl.Aggregate(recs)
	dst := make([]kpl.UserRecord, 0, len(recs))
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		dst, err = kpl.DeaggregateInto(dst[:0], agg)
		if err != nil {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 1.0, "allocations per aggregate with a reused destination")
}
