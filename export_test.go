package shardlease

import "context"

// Hooks for the external tests of unexported parts.

// FenceEpochOf is the floor epoch l's acquire wrote on its row.
func FenceEpochOf(l Lease) int64 { return l.fenceEpoch }

// WithKnownEpoch is withKnownEpoch, for store tests.
var WithKnownEpoch = withKnownEpoch

// WithObservedRow is withObservedRow, for store tests.
var WithObservedRow = withObservedRow

// Plain is l without what the store keeps for itself (the row's
// incarnation and the fence epoch), for tests that compare whole leases.
func Plain(l Lease) Lease {
	l.incarnation, l.fenceEpoch = "", 0
	return l
}

// WithRoundReservations is a take round's context: its acquires share
// blocks of fence counters reserved for up to n takes.
func WithRoundReservations(ctx context.Context, n int) context.Context {
	return withReservations(ctx, newReservations(n))
}
