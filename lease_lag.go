package shardlease

import (
	"context"
	"time"
)

// A holder's lag rides on the writes it makes anyway. Every renewal and
// checkpoint of a consumer carries, in its context, how far its reader is
// behind the tip of the shard and how long its checkpoint has been waiting
// (WithHolderLag); a store writes both on the row with the counter of the
// write itself. So the coordinator's listing and `shardlease list` see the
// lag of every shard, a renew interval old at most, for no extra call. A
// value whose counter is not the row's (written before an acquire, a release
// or another writer's write) is not shown: a lag belongs to one holder's run.

// Lag is how far a holder's work on a shard is behind, as the holder measured
// it.
type Lag struct {
	// BehindLatest is the MillisBehindLatest Kinesis reported on the
	// reader's last read: how far the records read are behind the tip of
	// the shard.
	BehindLatest time.Duration
	// CheckpointAge is how long the checkpoint has not moved while records
	// were behind it (read and not yet checkpointed, or reported behind by
	// Kinesis); zero for a shard that is caught up and idle.
	CheckpointAge time.Duration
}

type holderLagKey struct{}

// WithHolderLag returns a context that carries the lag of the holder making
// a write. The consumer passes it to Renew and Checkpoint once its reader
// has read; a LeaseStore writes it on the row (see HolderLag).
func WithHolderLag(ctx context.Context, l Lag) context.Context {
	return context.WithValue(ctx, holderLagKey{}, l)
}

// HolderLag returns the lag carried by ctx (see WithHolderLag) and whether
// there is one. A LeaseStore writes it on the row in Renew and Checkpoint and
// returns it in Lease.Lag, which is nil after a write that carried none
// (Acquire and Release among them). A store that keeps no lag works: the
// lease table then shows none, and the coordinator's workers-wanted gauge
// is not reported.
func HolderLag(ctx context.Context) (Lag, bool) {
	l, ok := ctx.Value(holderLagKey{}).(Lag)
	return l, ok
}

// holderLag is the lag carried by ctx as a row holds it: nil when none.
func holderLag(ctx context.Context) *Lag {
	if l, ok := HolderLag(ctx); ok {
		return &l
	}
	return nil
}
