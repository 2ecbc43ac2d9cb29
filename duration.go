package shardlease

import (
	"context"
	"time"
)

// The holder's lease duration is written on the row (attribute
// lease_duration, milliseconds) by every acquire, renewal and checkpoint of
// a consumer, so that a worker configured with a shorter lease duration
// (during a rolling deploy that changes WithLeaseDuration) still waits out
// the holder's: a taker judges a lease expired only once its counter stood
// still for the longer of its own lease duration and the row's.

type holderDurationKey struct{}

// WithHolderLeaseDuration returns a context that carries the lease duration
// of the worker making a write. The consumer passes it to Acquire, Renew and
// Checkpoint; a LeaseStore writes it on the row (see HolderLeaseDuration).
func WithHolderLeaseDuration(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, holderDurationKey{}, d)
}

// HolderLeaseDuration returns the lease duration carried by ctx (see
// WithHolderLeaseDuration), or 0. A LeaseStore writes a positive one on the
// row in Acquire, Renew and Checkpoint and returns it in Lease.Duration;
// Acquire without one clears the row's. A store that keeps no duration
// works, but then a fleet must not mix lease durations.
func HolderLeaseDuration(ctx context.Context) time.Duration {
	d, _ := ctx.Value(holderDurationKey{}).(time.Duration)
	return max(d, 0)
}

// expiresAfter is how long a taker whose own lease duration is own waits,
// with l's counter standing still, before it may take l: the longer of its
// own and the holder's lease duration written on the row.
func expiresAfter(l Lease, own time.Duration) time.Duration {
	return max(own, l.Duration)
}
