// Package kpl decodes records written by the Kinesis Producer Library (KPL)
// with aggregation enabled, and encodes such records for tests and
// benchmarks.
//
// # Format
//
// The KPL packs many user records into one Kinesis record:
//
//	+---------------+--------------------------+------------------+
//	| magic (4 B)   | AggregatedRecord message | MD5 (16 B)       |
//	| F3 89 9A C2   | (protobuf, proto2)       | of the message   |
//	+---------------+--------------------------+------------------+
//
// The message follows the KPL's published schema:
//
//	message AggregatedRecord {
//	  repeated string partition_key_table     = 1;
//	  repeated string explicit_hash_key_table = 2;
//	  repeated Record records                 = 3;
//	}
//	message Record {
//	  required uint64 partition_key_index     = 1;
//	  optional uint64 explicit_hash_key_index = 2;
//	  required bytes  data                    = 3;
//	  repeated Tag    tags                    = 4;
//	}
//	message Tag {
//	  required string key   = 1;
//	  optional string value = 2;
//	}
//
// Key indices are zero-based positions in the key tables. Tags are not
// used by the KPL and are skipped, as are fields the schema does not
// name, the way any protobuf decoder skips unknown fields.
//
// # Decoding
//
// [IsAggregated] tells whether a Kinesis record carries the magic prefix;
// [Deaggregate] and [DeaggregateInto] verify the length and checksum,
// decode the message and check every key index against its table. Any
// problem is reported as an error wrapping [ErrMalformed] or
// [ErrBadChecksum]; no input makes them panic.
//
// The Kinesis Client Library treats a record that has the magic prefix but
// fails to decode as an ordinary, non-aggregated record. Callers that want
// that behaviour check for the errors above and pass the record through
// whole; this package leaves the choice to them.
//
// # Memory
//
// The Data of each decoded [UserRecord] aliases the input slice: it is
// valid as long as the input is, and changes to one show in the other.
// All partition and explicit hash keys of one aggregate share a single
// string allocation, so decoding costs a fixed number of allocations per
// aggregate rather than one per user record: [Deaggregate] makes two (the
// result and the keys), [DeaggregateInto] with a reused destination slice
// one. An aggregate whose key tables hold more than 256 entries in all
// costs one more, for scratch space.
package kpl
