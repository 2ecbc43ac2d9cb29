package shardleasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// bareStore is a LeaseStore with no optional capability that keeps no
// holder lag: a MemoryStore seen through the LeaseStore methods alone, each
// returned lease without its lag.
type bareStore struct{ inner *shardlease.MemoryStore }

func noLag(l shardlease.Lease, err error) (shardlease.Lease, error) {
	l.Lag = nil
	return l, err
}

func (b bareStore) Create(ctx context.Context, key shardlease.LeaseKey, parents []string) (bool, error) {
	return b.inner.Create(ctx, key, parents)
}

func (b bareStore) Get(ctx context.Context, key shardlease.LeaseKey) (shardlease.Lease, error) {
	return noLag(b.inner.Get(ctx, key))
}

func (b bareStore) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	rows, err := b.inner.List(ctx, stream)
	for i := range rows {
		rows[i].Lag = nil
	}
	return rows, err
}

func (b bareStore) Acquire(ctx context.Context, key shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	return noLag(b.inner.Acquire(ctx, key, owner, observed))
}

func (b bareStore) Renew(ctx context.Context, held shardlease.Lease, expiry time.Time) (shardlease.Lease, error) {
	return noLag(b.inner.Renew(ctx, held, expiry))
}

func (b bareStore) Checkpoint(ctx context.Context, held shardlease.Lease, checkpoint string, subSequence int64, expiry time.Time) (shardlease.Lease, error) {
	return noLag(b.inner.Checkpoint(ctx, held, checkpoint, subSequence, expiry))
}

func (b bareStore) Release(ctx context.Context, held shardlease.Lease) (shardlease.Lease, error) {
	return noLag(b.inner.Release(ctx, held))
}

func (b bareStore) RequestHandoff(ctx context.Context, current shardlease.Lease, taker string) (shardlease.Lease, error) {
	return noLag(b.inner.RequestHandoff(ctx, current, taker))
}

// A store with no optional capability passes the suite: the subtests of
// every capability it lacks, and those of the lag it does not keep, skip it
// instead of failing it.
func TestConformanceOfABareStore(t *testing.T) {
	t.Parallel()
	shardleasetest.RunStoreConformance(t, func(t *testing.T) shardlease.LeaseStore {
		return bareStore{inner: shardlease.NewMemoryStore()}
	})
}
