package shardlease_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// flakyHolder loses the reply of one write that landed, then fails every
// write of the holder for a while, lets exactly one through (the resent
// renewal, recognised as the holder's own), and fails them again.
type flakyHolder struct {
	shardlease.LeaseStore
	lease time.Duration

	mu    sync.Mutex
	armed bool
	t0    time.Time // when the lost renewal landed
	let   bool      // the one write let through
}

func (s *flakyHolder) gate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t0.IsZero() {
		return nil
	}
	since := time.Since(s.t0)
	if since >= s.lease/2 && !s.let {
		s.let = true
		return nil
	}
	if since < s.lease*2 {
		return errUnavailable
	}
	return nil
}

// write runs a holder's write through the failures.
func (s *flakyHolder) write(do func() (shardlease.Lease, error)) (shardlease.Lease, error) {
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	s.mu.Unlock()
	if armed {
		if _, err := do(); err != nil {
			return shardlease.Lease{}, err
		}
		s.mu.Lock()
		s.t0 = time.Now()
		s.mu.Unlock()
		return shardlease.Lease{}, errConnReset
	}
	if err := s.gate(); err != nil {
		return shardlease.Lease{}, err
	}
	return do()
}

func (s *flakyHolder) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	return s.write(func() (shardlease.Lease, error) { return s.LeaseStore.Renew(ctx, l, e) })
}

func (s *flakyHolder) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	return s.write(func() (shardlease.Lease, error) { return s.LeaseStore.Checkpoint(ctx, l, cp, sub, e) })
}

func (s *flakyHolder) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	if err := s.gate(); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Acquire(ctx, k, owner, observed)
}

func (s *flakyHolder) Release(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	return s.write(func() (shardlease.Lease, error) { return s.LeaseStore.Release(ctx, l) })
}

// A renewal resent after its reply was lost, and recognised as the
// holder's own, dates the lease from when it first landed: other workers
// time the lease from then, so the holder hands no batch after they may
// have taken it.
func TestConsumerResentWriteDatesLeaseFromFirstAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := &world{name: "fake", kin: fake, stream: "orders",
			lease: 10 * time.Second, renew: 10 * time.Second / 3, take: 2 * time.Second, idle: time.Second}
		_, err := fake.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		mem := shardlease.NewMemoryStore()
		var mu sync.Mutex
		var takenByB time.Time
		mem.OnWrite(func(op string, before, after shardlease.Lease) {
			if op == "acquire" && shardlease.OwnerName(after.Owner) == "b" {
				mu.Lock()
				takenByB = time.Now()
				mu.Unlock()
			}
		})
		w.store = mem
		flaky := &flakyHolder{LeaseStore: mem, lease: w.lease}
		var handedA []time.Time
		handlerA := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			handedA = append(handedA, time.Now())
			mu.Unlock()
			return nil
		}
		a := startWorker(t, w, w.kin, flaky, handlerA, w.opts("a")...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		b := startWorker(t, w, w.kin, mem, newHandled().handler("b"), w.opts("b")...)

		p := &produced{}
		flaky.mu.Lock()
		flaky.armed = true
		flaky.mu.Unlock()
		waitFor(t, 10*w.lease, "b takes the shard", func() bool {
			w.put(t, p, 1, 1) // a record every poll: a always has a batch to hand
			return len(b.c.Held()) == 1
		})
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))

		mu.Lock()
		defer mu.Unlock()
		flaky.mu.Lock()
		assert.True(t, flaky.let, "the resent renewal went through")
		flaky.mu.Unlock()
		for _, at := range handedA {
			assert.True(t, at.Before(takenByB), "a handed a batch at %v, after b took the lease at %v", at, takenByB)
		}
	})
}
