package shardlease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// A renewal or checkpoint whose reply is lost after it landed is sent again
// unchanged, so that DynamoStore recognises it as the worker's own write:
// the worker keeps its lease instead of giving it up and leaving the shard
// unread for a lease duration.
func TestConsumerLostReplyKeepsLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the emulators")
	}
	client, table := dynamoTable(t)
	wrapped := &lostReply{DynamoDBAPI: client}
	store, err := shardlease.NewDynamoStore(wrapped, table)
	require.NoError(t, err)
	kc := emulator.Kinesis(t)
	w := &world{name: "emulator", kin: kc, store: store, stream: emulator.UniqueName("orders"),
		lease: 2 * time.Second, renew: 2 * time.Second / 3, take: 300 * time.Millisecond, idle: 50 * time.Millisecond}
	require.NoError(t, emulator.CreateStream(t.Context(), kc, w.stream, 1))
	p := &produced{}
	h := newHandled()
	// Pinned to per-lease renewals: it counts the lease row's renewals and their lost replies.
	a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithSessions(false))...)
	waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })

	for _, what := range []string{"renewal", "checkpoint"} {
		if what == "checkpoint" {
			w.put(t, p, 5, 2)
		}
		before := w.leases(t)[0].Counter
		wrapped.armed.Store(true)
		waitFor(t, 10*w.lease, "the "+what+" whose reply is lost", func() bool { return !wrapped.armed.Load() })
		waitFor(t, 10*w.lease, "two more writes by a", func() bool { return w.leases(t)[0].Counter >= before+3 })
		assert.Zero(t, a.c.Stats().LeasesLost, "a lost reply to the %s cost the lease", what)
		assert.Equal(t, "a", shardlease.OwnerName(w.leases(t)[0].Owner))
	}
	waitFor(t, 10*w.lease, "every record handled", func() bool { return h.distinct() == 5 })
	require.NoError(t, a.stop(t))
	assert.Zero(t, h.duplicates())
}
