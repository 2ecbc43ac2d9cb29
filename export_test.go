package shardlease

// Hooks for the external tests of unexported parts.

// FenceEpochOf is the floor epoch l's acquire wrote on its row.
func FenceEpochOf(l Lease) int64 { return l.fenceEpoch }

// WithKnownEpoch is withKnownEpoch, for store tests.
var WithKnownEpoch = withKnownEpoch

// WithObservedRow is withObservedRow, for store tests.
var WithObservedRow = withObservedRow
