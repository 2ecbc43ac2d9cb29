package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// MagicPrefix is the four bytes, F3 89 9A C2, that begin every aggregated
// record.
const MagicPrefix = "\xf3\x89\x9a\xc2"

// Field numbers of the KPL schema (see the package documentation).
const (
	fieldPartitionKeyTable    protowire.Number = 1 // AggregatedRecord.partition_key_table
	fieldExplicitHashKeyTable protowire.Number = 2 // AggregatedRecord.explicit_hash_key_table
	fieldRecords              protowire.Number = 3 // AggregatedRecord.records

	fieldPartitionKeyIndex    protowire.Number = 1 // Record.partition_key_index
	fieldExplicitHashKeyIndex protowire.Number = 2 // Record.explicit_hash_key_index
	fieldData                 protowire.Number = 3 // Record.data
)

// ErrNotAggregated is returned by [Deaggregate] and [DeaggregateInto] for data
// without the magic prefix: an ordinary record, to be used as it is.
var ErrNotAggregated = errors.New("kpl: not an aggregated record")

// ErrBadChecksum is returned when the MD5 trailer of an aggregated record does
// not match its protobuf message.
var ErrBadChecksum = errors.New("kpl: aggregated record checksum mismatch")

// ErrMalformed is returned when an aggregated record is too short to hold its
// checksum, its protobuf message does not parse, a required field is missing,
// or a key index points outside its table. The wrapping error says which.
var ErrMalformed = errors.New("kpl: malformed aggregated record")

// UserRecord is one record written by a producer, several of which the KPL
// packs into one Kinesis record.
type UserRecord struct {
	// PartitionKey is the partition key the producer gave the record.
	PartitionKey string
	// ExplicitHashKey is the explicit hash key the producer gave the record,
	// or "" if it gave none.
	ExplicitHashKey string
	// Data is the record's payload. A decoded record's Data aliases the
	// aggregated input and has no spare capacity, so appending to it copies.
	Data []byte
	// SubSequence is the zero-based position of the record within its
	// aggregate; with the Kinesis sequence number it identifies the record.
	// [Aggregate] ignores it and numbers records by their order.
	SubSequence int
}

// IsAggregated reports whether data begins with [MagicPrefix]. It does not
// check that the rest of data decodes.
func IsAggregated(data []byte) bool {
	return len(data) >= len(MagicPrefix) && string(data[:len(MagicPrefix)]) == MagicPrefix
}

// Deaggregate decodes the user records packed in an aggregated record.
//
// It verifies the length and MD5 checksum, decodes the protobuf message and
// checks every key index against its table. The error wraps
// [ErrNotAggregated] if data has no magic prefix, [ErrBadChecksum] if the
// checksum does not match and [ErrMalformed] for any other problem.
// A well-formed aggregate with no records yields an empty result.
//
// The Data of each returned record aliases data; see [UserRecord].
func Deaggregate(data []byte) ([]UserRecord, error) {
	return DeaggregateInto(nil, data)
}

// DeaggregateInto is [Deaggregate] that appends the user records to dst and
// returns the extended slice. Passing the previous result, truncated to
// length zero, reuses its storage: decoding then costs a single allocation
// (the records' keys) when the aggregate has any keys. On error dst is
// returned with its original length.
func DeaggregateInto(dst []UserRecord, data []byte) ([]UserRecord, error) {
	if !IsAggregated(data) {
		return dst, fmt.Errorf("%w: no magic prefix", ErrNotAggregated)
	}
	if len(data) < len(MagicPrefix)+md5.Size {
		return dst, fmt.Errorf("%w: %d bytes, too short for the magic prefix and %d-byte checksum",
			ErrMalformed, len(data), md5.Size)
	}
	msg := data[len(MagicPrefix) : len(data)-md5.Size]
	trailer := data[len(data)-md5.Size:]
	if sum := md5.Sum(msg); !bytes.Equal(sum[:], trailer) {
		return dst, fmt.Errorf("%w: message MD5 is %x, trailer says %x", ErrBadChecksum, sum, trailer)
	}
	base := len(dst)
	out, err := decode(dst, msg)
	if err != nil {
		clear(out[base:]) // drop references into data
		return out[:base], err
	}
	return out, nil
}

// keyBufLen is how many key table entries decode tracks without allocating.
const keyBufLen = 256

// decode appends the records of the AggregatedRecord message msg to dst.
//
// It makes three passes over the top-level fields: the first validates them
// and counts table entries, key bytes and records; the second copies all keys
// into one string; the third decodes the records.
func decode(dst []UserRecord, msg []byte) ([]UserRecord, error) {
	var nPK, nEHK, nRec, keyBytes int
	for b := msg; len(b) > 0; {
		num, typ, val, n := consumeField(b)
		if n < 0 {
			return dst, fmt.Errorf("%w: at byte %d: %w", ErrMalformed, len(msg)-len(b), protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			continue // a known field with the wrong wire type is unknown to protobuf too
		}
		switch num {
		case fieldPartitionKeyTable:
			nPK++
			keyBytes += len(val)
		case fieldExplicitHashKeyTable:
			nEHK++
			keyBytes += len(val)
		case fieldRecords:
			nRec++
		}
	}

	// Key k of the combined table (partition keys, then explicit hash keys)
	// is keys[offs[k]:offs[k+1]].
	var offsBuf [keyBufLen + 1]int
	offs := offsBuf[:0]
	if nPK+nEHK+1 > len(offsBuf) {
		offs = make([]int, 0, nPK+nEHK+1)
	}
	offs = append(offs, 0)
	var sb strings.Builder
	sb.Grow(keyBytes)
	for _, table := range [...]protowire.Number{fieldPartitionKeyTable, fieldExplicitHashKeyTable} {
		for b := msg; len(b) > 0; {
			num, typ, val, n := consumeField(b)
			b = b[n:] // the first pass saw every field parse
			if num == table && typ == protowire.BytesType {
				sb.Write(val)
				offs = append(offs, sb.Len())
			}
		}
	}
	keys := sb.String()
	key := func(k int) string { return keys[offs[k]:offs[k+1]] }

	dst = slices.Grow(dst, nRec)
	for b, i := msg, 0; len(b) > 0; {
		num, typ, val, n := consumeField(b)
		b = b[n:]
		if num != fieldRecords || typ != protowire.BytesType {
			continue
		}
		r, err := decodeRecord(val)
		if err != nil {
			return dst, fmt.Errorf("%w: record %d: %w", ErrMalformed, i, err)
		}
		if r.pk >= uint64(nPK) {
			return dst, fmt.Errorf("%w: record %d: partition key index %d outside a table of %d",
				ErrMalformed, i, r.pk, nPK)
		}
		var ehk string
		if r.hasEHK {
			if r.ehk >= uint64(nEHK) {
				return dst, fmt.Errorf("%w: record %d: explicit hash key index %d outside a table of %d",
					ErrMalformed, i, r.ehk, nEHK)
			}
			ehk = key(nPK + int(r.ehk))
		}
		dst = append(dst, UserRecord{
			PartitionKey:    key(int(r.pk)),
			ExplicitHashKey: ehk,
			Data:            r.data[:len(r.data):len(r.data)],
			SubSequence:     i,
		})
		i++
	}
	return dst, nil
}

// consumeField consumes one field of a message. For a length-delimited field
// val is its payload. n is the number of bytes consumed, or negative if b
// does not begin with a well-formed field.
func consumeField(b []byte) (num protowire.Number, typ protowire.Type, val []byte, n int) {
	num, typ, tn := protowire.ConsumeTag(b)
	if tn < 0 {
		return 0, 0, nil, tn
	}
	if typ == protowire.BytesType {
		val, n = protowire.ConsumeBytes(b[tn:])
	} else {
		n = protowire.ConsumeFieldValue(num, typ, b[tn:])
	}
	if n < 0 {
		return 0, 0, nil, n
	}
	return num, typ, val, tn + n
}

// record is a decoded Record message, its key indices not yet resolved.
type record struct {
	pk, ehk uint64
	hasEHK  bool
	data    []byte
}

// errMissing reports a required field absent from a Record message.
type errMissing string

func (e errMissing) Error() string { return "required field " + string(e) + " missing" }

// decodeRecord decodes one Record message. As protobuf does, it keeps the
// last of repeated scalar fields and skips unknown fields and tags.
func decodeRecord(b []byte) (record, error) {
	var r record
	var hasPK, hasData bool
	for off := 0; off < len(b); {
		num, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 {
			return r, fmt.Errorf("at byte %d: %w", off, protowire.ParseError(tn))
		}
		off += tn
		var n int
		switch {
		case num == fieldPartitionKeyIndex && typ == protowire.VarintType:
			r.pk, n = protowire.ConsumeVarint(b[off:])
			hasPK = true
		case num == fieldExplicitHashKeyIndex && typ == protowire.VarintType:
			r.ehk, n = protowire.ConsumeVarint(b[off:])
			r.hasEHK = true
		case num == fieldData && typ == protowire.BytesType:
			r.data, n = protowire.ConsumeBytes(b[off:])
			hasData = true
		default:
			n = protowire.ConsumeFieldValue(num, typ, b[off:])
		}
		if n < 0 {
			return r, fmt.Errorf("at byte %d: %w", off, protowire.ParseError(n))
		}
		off += n
	}
	if !hasPK {
		return r, errMissing("partition_key_index")
	}
	if !hasData {
		return r, errMissing("data")
	}
	return r, nil
}
