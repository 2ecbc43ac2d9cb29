package shardlease_test

// The failover bounds on a mixed table (issue 34): Consumers and Groups on
// one lease table, whatever their stream sets. Each test settles a mixed
// fleet (see fleet_mixed_world_test.go), crashes workers of a chosen role,
// and asserts the README's bound from the crash to the moment every lease
// they ran is run by a live worker that reads its stream (1.4 L for a
// crashed worker, 2.5 L for a crashed coordinator, or it and a deputy
// together), and that no shard ever had two readers at once.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// mixedWorlds runs fn in both worlds over streams of shards shards each,
// with the default take interval (2L/5), as a fleet runs.
func mixedWorlds(t *testing.T, shards int32, fn func(t *testing.T, w *world)) {
	worlds(t, shards, func(t *testing.T, w *world) {
		w.timed(t)
		fn(t, liveWorld(w))
	})
}

// rolloutFleet is one Group mid-rollout: the old workers o1 and o2 read
// orders and orders-b, the new workers n1 and n2 also orders-c, two shards
// each. It returns the fleet settled, and the three stream names.
func rolloutFleet(t *testing.T, w *world) (*mixedFleet, []string) {
	t.Helper()
	names := groupStreams(t, w, 2, 2)
	f := newMixedFleet(t, w, names...)
	f.group(t, "o1", "readers", names[:2]...)
	f.group(t, "o2", "readers", names[:2]...)
	f.group(t, "n1", "readers", names...)
	f.group(t, "n2", "readers", names...)
	f.settle(t)
	return f, names
}

// TestFleetMixedRolloutCrashOfANewWorker: mid-rollout, a new worker running
// leases of the stream only the new workers read crashes while the other
// new worker has room: its leases are run again within the bound of its
// role (a plain worker is preferred).
func TestFleetMixedRolloutCrashOfANewWorker(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 2, func(t *testing.T, w *world) {
		f, names := rolloutFleet(t, w)
		var runsNew, plainNew []*mixedMember
		plain := f.plain(t, names[2])
		for _, m := range f.members[2:] {
			if slices.ContainsFunc(m.held(), func(k shardlease.LeaseKey) bool { return k.Stream == names[2] }) {
				runsNew = append(runsNew, m)
				if slices.Contains(plain, m) {
					plainNew = append(plainNew, m)
				}
			}
		}
		require.NotEmpty(t, runsNew, "a new worker runs a lease of %s\nroles:%s", names[2], f.roles(t))
		victim := slices.Concat(plainNew, runsNew)[0]
		f.failover(t, fmt.Sprintf("new worker %s", victim), victim)
	})
}

// TestFleetMixedRolloutCrashOfTheNewStreamsCoordinator: mid-rollout, the
// new worker that runs the first lease of the stream only the new workers
// read crashes: its leases are run again within 2.5 L.
func TestFleetMixedRolloutCrashOfTheNewStreamsCoordinator(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 2, func(t *testing.T, w *world) {
		f, names := rolloutFleet(t, w)
		victim := f.firstHolder(t, names[2])
		f.failover(t, fmt.Sprintf("%s, holder of %s's first lease", victim, names[2]), victim)
	})
}

// sharedStreamFleet is two Groups of different names on one table sharing
// a stream: x1..x3 of group x read orders and orders-b, y1..y3 of group y
// read orders-b and orders-c, three shards each. It returns the fleet
// settled, and the three stream names (the shared one second).
func sharedStreamFleet(t *testing.T, w *world) (*mixedFleet, []string) {
	t.Helper()
	names := groupStreams(t, w, 2, 3)
	f := newMixedFleet(t, w, names...)
	for i := 1; i <= 3; i++ {
		f.group(t, fmt.Sprintf("x%d", i), "x", names[0], names[1])
		f.group(t, fmt.Sprintf("y%d", i), "y", names[1], names[2])
	}
	f.settle(t)
	return f, names
}

// TestFleetMixedTwoGroupsShareAStreamFirstRowHolderCrashes: the worker
// that runs the shared stream's first lease crashes, whichever group it is
// of: its leases are run again within 2.5 L.
func TestFleetMixedTwoGroupsShareAStreamFirstRowHolderCrashes(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 3, func(t *testing.T, w *world) {
		f, names := sharedStreamFleet(t, w)
		victim := f.firstHolder(t, names[1])
		f.failover(t, fmt.Sprintf("%s, holder of the shared %s's first lease", victim, names[1]), victim)
	})
}

// TestFleetMixedTwoGroupsShareAStreamPlainWorkerCrashes: a worker that
// does not coordinate crashes (one that is no deputy either if there is
// one, running a lease of the shared stream if it can; each stream's
// coordinator names deputies among its readers, so in this fleet of six
// every worker may have a role): its leases are run again within 1.4 L.
func TestFleetMixedTwoGroupsShareAStreamPlainWorkerCrashes(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 3, func(t *testing.T, w *world) {
		f, names := sharedStreamFleet(t, w)
		plain := slices.Concat(f.plain(t, names[1]), f.plain(t, ""), f.nonCoordinating(t, names[1]))
		require.NotEmpty(t, plain, "a worker that does not coordinate runs a lease\nroles:%s", f.roles(t))
		f.failover(t, fmt.Sprintf("worker %s, which does not coordinate", plain[0]), plain[0])
	})
}

// consumersAndGroup runs fn in both worlds, twice each, on a fleet of two
// Consumers of orders (c1, c2) and two workers (g1, g2) of the Group
// "readers" whose set is {orders}, over eight shards: once with the
// Consumers holding the roles, once with the Group. The first worker of
// that kind runs every lease (it coordinates) before both workers of the
// other kind start; once one of them is named deputy, the second worker of
// the first kind starts. So the coordinator's deputies are mostly of the
// other kind, the case where a deputy's note names the first lease in its
// writer's terms. fn gets the fleet settled with a deputy named.
func consumersAndGroup(t *testing.T, fn func(t *testing.T, f *mixedFleet)) {
	consumersAndGroupWith(t, nil, fn)
}

// consumersAndGroupWith is consumersAndGroup with every worker also given
// extra.
func consumersAndGroupWith(t *testing.T, extra []shardlease.Option, fn func(t *testing.T, f *mixedFleet)) {
	for _, groupFirst := range []bool{false, true} {
		name := "consumer coordinates"
		if groupFirst {
			name = "group coordinates"
		}
		t.Run(name, func(t *testing.T) {
			mixedWorlds(t, 8, func(t *testing.T, w *world) {
				w.extra = extra
				f := newMixedFleet(t, w, w.stream)
				start := map[bool]func(name string){
					false: func(name string) { f.consumer(t, name) },
					true:  func(name string) { f.group(t, name, "readers", w.stream) },
				}
				first, second := start[groupFirst], start[!groupFirst]
				names := []string{"c1", "c2", "g1", "g2"}
				if groupFirst {
					names = []string{"g1", "g2", "c1", "c2"}
				}
				first(names[0])
				f.settle(t)
				second(names[2])
				second(names[3])
				f.settle(t)
				f.waitDeputy(t)
				first(names[1])
				f.settle(t)
				f.waitDeputy(t)
				fn(t, f)
			})
		})
	}
}

// isGroup reports whether m is a Group's worker.
func isGroup(m *mixedMember) bool { return m.g != nil }

// otherKindFirst returns ms with the workers of another kind than m first.
func otherKindFirst(m *mixedMember, ms []*mixedMember) []*mixedMember {
	var other, same []*mixedMember
	for _, x := range ms {
		switch {
		case x == m:
		case isGroup(x) != isGroup(m):
			other = append(other, x)
		default:
			same = append(same, x)
		}
	}
	return append(other, same...)
}

// TestFleetMixedConsumersAndGroupCoordinatorCrashes: Consumers and Group
// workers on one stream; the worker that runs its first lease (the
// coordinator) crashes: its leases are run again within 2.5 L.
func TestFleetMixedConsumersAndGroupCoordinatorCrashes(t *testing.T) {
	t.Parallel()
	consumersAndGroup(t, func(t *testing.T, f *mixedFleet) {
		coord := f.firstHolder(t, f.w.stream)
		f.failover(t, fmt.Sprintf("coordinator %s", coord), coord)
	})
}

// TestFleetMixedConsumersAndGroupCoordinatorAndDeputyCrash: the coordinator
// and a deputy (one of the other kind if there is one) crash together:
// their leases are run again within 2.5 L.
func TestFleetMixedConsumersAndGroupCoordinatorAndDeputyCrash(t *testing.T) {
	t.Parallel()
	consumersAndGroup(t, func(t *testing.T, f *mixedFleet) {
		coord := f.firstHolder(t, f.w.stream)
		deps := otherKindFirst(coord, f.deputies(t))
		require.NotEmpty(t, deps, "a deputy other than the coordinator\nroles:%s", f.roles(t))
		f.failover(t, fmt.Sprintf("coordinator %s and deputy %s", coord, deps[0]), coord, deps[0])
	})
}

// TestFleetMixedConsumersAndGroupDeputiesCrash: every deputy other than
// the coordinator crashes (both, whichever kind they are), the coordinator
// lives: their leases are run again within the bound of their roles (1.4 L
// unless one of them coordinates).
func TestFleetMixedConsumersAndGroupDeputiesCrash(t *testing.T) {
	t.Parallel()
	consumersAndGroup(t, func(t *testing.T, f *mixedFleet) {
		coord := f.firstHolder(t, f.w.stream)
		deps := otherKindFirst(coord, f.deputies(t))
		require.NotEmpty(t, deps, "a deputy other than the coordinator\nroles:%s", f.roles(t))
		f.failover(t, fmt.Sprintf("deputies %v", deps), deps...)
	})
}

// TestFleetMixedConsumersAndGroupPlainWorkerCrashes: the worker that
// neither coordinates nor is a deputy crashes: its leases are run again
// within 1.4 L.
func TestFleetMixedConsumersAndGroupPlainWorkerCrashes(t *testing.T) {
	t.Parallel()
	consumersAndGroup(t, func(t *testing.T, f *mixedFleet) {
		plain := f.plain(t, "")
		require.NotEmpty(t, plain, "a plain worker runs a lease\nroles:%s", f.roles(t))
		f.failover(t, fmt.Sprintf("plain worker %s", plain[0]), plain[0])
	})
}

// removedStreamFleet is one Group "readers" of five workers, each following
// a source of its own, over orders and orders-b (three shards each); once
// settled, the sources of r1 and r2 drop orders-b, so that r3, r4 and r5
// alone read it. It returns the fleet settled again, and both names.
func removedStreamFleet(t *testing.T, w *world) (*mixedFleet, []string) {
	t.Helper()
	names := groupStreams(t, w, 1, 3)
	f := newMixedFleet(t, w, names...)
	for i := 1; i <= 5; i++ {
		f.sourced(t, fmt.Sprintf("r%d", i), "readers", names...)
	}
	f.settle(t)
	for _, m := range f.members[:2] {
		m.src.set(names[0])
	}
	f.settle(t)
	return f, names
}

// TestFleetMixedStreamRemovedFromSomeSetsReaderCrashes: a stream removed
// from some workers' sets; a worker that still reads it and runs its
// leases crashes (a plain one preferred): its leases are run again, by the
// workers that still read the stream, within the bound of its role.
func TestFleetMixedStreamRemovedFromSomeSetsReaderCrashes(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 3, func(t *testing.T, w *world) {
		f, names := removedStreamFleet(t, w)
		var readers []*mixedMember
		for _, m := range f.members[2:] {
			if slices.ContainsFunc(m.held(), func(k shardlease.LeaseKey) bool { return k.Stream == names[1] }) {
				readers = append(readers, m)
			}
		}
		require.NotEmpty(t, readers, "a worker runs a lease of %s\nroles:%s", names[1], f.roles(t))
		victim := slices.Concat(f.plain(t, names[1]), readers)[0]
		f.failover(t, fmt.Sprintf("%s, a reader of %s", victim, names[1]), victim)
	})
}

// TestFleetMixedStreamRemovedFromSomeSetsFirstRowHolderCrashes: a stream
// removed from some workers' sets; the worker that runs its first lease
// crashes: its leases are run again, by the workers that still read the
// stream, within 2.5 L.
func TestFleetMixedStreamRemovedFromSomeSetsFirstRowHolderCrashes(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 3, func(t *testing.T, w *world) {
		f, names := removedStreamFleet(t, w)
		victim := f.firstHolder(t, names[1])
		f.failover(t, fmt.Sprintf("%s, holder of %s's first lease", victim, names[1]), victim)
	})
}

// TestFleetMixedDeletedStreamCostsNoMoreListings: two Consumers of orders
// and two workers of a Group reading orders and orders-b share the table;
// orders-b is deleted from Kinesis: once its leases are let go and a shard
// sync found it gone, the fleet lists no more than with both streams.
func TestFleetMixedDeletedStreamCostsNoMoreListings(t *testing.T) {
	t.Parallel()
	mixedWorlds(t, 4, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 4)
		f := newMixedFleet(t, w, names...)
		f.consumer(t, "c1")
		f.consumer(t, "c2")
		f.group(t, "g1", "readers", names...)
		f.group(t, "g2", "readers", names...)
		f.settle(t)
		over10T := func() int64 {
			before := f.listings()
			time.Sleep(10 * w.take)
			return f.listings() - before
		}
		steady := over10T()

		f.skip(names[1])
		_, err := w.kin.(interface {
			DeleteStream(context.Context, *kinesis.DeleteStreamInput, ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
		}).DeleteStream(t.Context(), &kinesis.DeleteStreamInput{StreamName: aws.String(names[1])})
		require.NoError(t, err)
		waitFor(t, 10*w.lease, "the deleted stream's leases let go", func() bool {
			return !slices.ContainsFunc(f.members, func(m *mixedMember) bool {
				return slices.ContainsFunc(m.held(), func(k shardlease.LeaseKey) bool { return k.Stream == names[1] })
			})
		})
		// A shard sync (every 5 take intervals here) on each worker finds it gone.
		l0 := f.listings()
		waitFor(t, 10*w.lease, "a shard sync's worth of listings", func() bool { return f.listings() >= l0+6 })
		gone := over10T()
		t.Logf("%s: listings of 2 Consumers and 2 Group workers over 10 T: %d with both streams, %d with %s deleted", w.name, steady, gone, names[1])
		assert.LessOrEqual(t, gone, max(steady*3/2, steady+4), "a deleted stream makes the mixed fleet list more: %d listings over 10 T, %d before", gone, steady)
		f.assertOneReader(t)
	})
}
