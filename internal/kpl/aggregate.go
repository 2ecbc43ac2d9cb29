package kpl

import (
	"crypto/md5"

	"google.golang.org/protobuf/encoding/protowire"
)

// Aggregate packs records into one aggregated record in the KPL format, the
// inverse of [Deaggregate]. Each distinct partition key and explicit hash key
// is stored once in its table; a record whose ExplicitHashKey is "" gets no
// explicit hash key index. SubSequence is ignored. The result is a fresh
// slice sharing nothing with records.
//
// Aggregate does not enforce the limits Kinesis puts on a record's size or
// on key lengths; it is meant for tests and benchmarks.
func Aggregate(records []UserRecord) []byte {
	type indices struct {
		pk, ehk uint64
		hasEHK  bool
	}
	idx := make([]indices, len(records))
	pkIndex := make(map[string]uint64)
	ehkIndex := make(map[string]uint64)
	var pkTable, ehkTable []string
	size := 0
	intern := func(index map[string]uint64, table *[]string, field protowire.Number, k string) uint64 {
		i, ok := index[k]
		if !ok {
			i = uint64(len(*table))
			index[k] = i
			*table = append(*table, k)
			size += protowire.SizeTag(field) + protowire.SizeBytes(len(k))
		}
		return i
	}
	recSize := func(r UserRecord, ix indices) int {
		n := protowire.SizeTag(fieldPartitionKeyIndex) + protowire.SizeVarint(ix.pk) +
			protowire.SizeTag(fieldData) + protowire.SizeBytes(len(r.Data))
		if ix.hasEHK {
			n += protowire.SizeTag(fieldExplicitHashKeyIndex) + protowire.SizeVarint(ix.ehk)
		}
		return n
	}
	for i, r := range records {
		ix := indices{pk: intern(pkIndex, &pkTable, fieldPartitionKeyTable, r.PartitionKey)}
		if r.ExplicitHashKey != "" {
			ix.ehk = intern(ehkIndex, &ehkTable, fieldExplicitHashKeyTable, r.ExplicitHashKey)
			ix.hasEHK = true
		}
		idx[i] = ix
		size += protowire.SizeTag(fieldRecords) + protowire.SizeBytes(recSize(r, ix))
	}

	out := make([]byte, 0, len(MagicPrefix)+size+md5.Size)
	out = append(out, MagicPrefix...)
	for _, k := range pkTable {
		out = protowire.AppendTag(out, fieldPartitionKeyTable, protowire.BytesType)
		out = protowire.AppendString(out, k)
	}
	for _, k := range ehkTable {
		out = protowire.AppendTag(out, fieldExplicitHashKeyTable, protowire.BytesType)
		out = protowire.AppendString(out, k)
	}
	for i, r := range records {
		ix := idx[i]
		out = protowire.AppendTag(out, fieldRecords, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(recSize(r, ix)))
		out = protowire.AppendTag(out, fieldPartitionKeyIndex, protowire.VarintType)
		out = protowire.AppendVarint(out, ix.pk)
		if ix.hasEHK {
			out = protowire.AppendTag(out, fieldExplicitHashKeyIndex, protowire.VarintType)
			out = protowire.AppendVarint(out, ix.ehk)
		}
		out = protowire.AppendTag(out, fieldData, protowire.BytesType)
		out = protowire.AppendBytes(out, r.Data)
	}
	sum := md5.Sum(out[len(MagicPrefix):])
	return append(out, sum[:]...)
}
