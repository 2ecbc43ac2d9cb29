// Package seqnum orders Kinesis sequence numbers and checkpoints.
package seqnum

import "strings"

// ShardEnd is the checkpoint of a shard read to its end; it orders after
// every sequence number.
const ShardEnd = "SHARD_END"

// Compare orders two checkpoints: sequence numbers as decimal integers of
// any length (up to 128 bits in Kinesis, so wider than any integer type),
// ShardEnd after all of them and "" (no checkpoint) before all.
func Compare(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == ShardEnd || b == "":
		return 1
	case b == ShardEnd || a == "":
		return -1
	}
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// IsSequence reports whether s has the form of a sequence number: one or
// more decimal digits.
func IsSequence(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
