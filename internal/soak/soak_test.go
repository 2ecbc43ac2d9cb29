package soak_test

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/internal/soak"
	"github.com/shardlease/shardlease/shardleasetest"
)

func TestMain(m *testing.M) { emulator.Main(m) }

// logWriter passes event lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkRan checks what every soak's result must show: the soak ran,
// produced records and found no problem, lost nothing and saw no overlap.
func checkRan(t *testing.T, res *soak.Result, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Table())
	if !res.OK() {
		t.Fatalf("the soak found %d problems", len(res.Problems))
	}
	if res.Lost != 0 || res.Produced == 0 {
		t.Fatalf("produced %d, lost %d", res.Produced, res.Lost)
	}
	if res.Overlaps != 0 {
		t.Fatalf("overlaps %d", res.Overlaps)
	}
	if res.AppliedTwice != 0 || res.StaleSinkAccepted != 0 || res.LiveRefused != 0 {
		t.Fatalf("fenced sink: effects applied twice %d, stale writes accepted %d, live holder refused %d", res.AppliedTwice, res.StaleSinkAccepted, res.LiveRefused)
	}
}

func check(t *testing.T, res *soak.Result, err error) {
	t.Helper()
	checkExcept(t, res, err)
}

// checkExcept is check with the fault kinds of optional not required to
// have been injected.
func checkExcept(t *testing.T, res *soak.Result, err error, optional ...string) {
	t.Helper()
	checkRan(t, res, err)
	if res.UntakenMax > res.UntakenBound {
		t.Fatalf("untaken max %v, bound %v", res.UntakenMax, res.UntakenBound)
	}
	for _, kind := range []string{soak.EvCrash, soak.EvCrashCoordinator, soak.EvDrain, soak.EvRestart, soak.EvSplit, soak.EvMerge, soak.EvDeleteFinished, soak.EvSlow, soak.EvShared, soak.EvMixed,
		soak.EvCrashJoint, soak.EvListsFail, soak.EvJointLeave, soak.EvCapped, soak.EvRewind, soak.EvReset, soak.EvDescribeDenied, soak.EvNoDescribe} {
		if res.Injected[kind] == 0 && !slices.Contains(optional, kind) {
			t.Errorf("no %q was injected", kind)
		}
	}
	if res.Injected[soak.EvPoison] == 0 || res.DeadLettered == 0 {
		t.Errorf("%d poison records produced, %d dead-lettered", res.Injected[soak.EvPoison], res.DeadLettered)
	}
	if res.MaxSkewSeen < 10*time.Minute {
		t.Errorf("wall clocks were skewed by at most %v", res.MaxSkewSeen)
	}
}

// TestSoak runs the soak briefly in both worlds: ten simulated minutes in
// the in-process world under fake time, and about 45 seconds on the
// emulators. internal/soak/cmd/soak runs longer soaks. The subtests run in
// parallel: each has its own stream, table and fake, and the emulator ones
// spend their time waiting in real time.
func TestSoak(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			res, err := soak.Run(t.Context(), soak.Config{
				Seed: 1, Workers: 4, Shards: 6, Duration: 10 * time.Minute, Rate: 20, Lease: 10 * time.Second,
				Kinesis: shardleasetest.NewKinesis(), Stream: "orders", Events: logWriter{t},
			})
			check(t, res, err)
			if res.Injected[soak.EvPause] == 0 {
				t.Errorf("no pause was injected")
			}
		})
	})
	t.Run("fake-fanout", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			res, err := soak.Run(t.Context(), soak.Config{
				Seed: 1, Workers: 4, Shards: 6, Duration: 10 * time.Minute, Rate: 20, Lease: 10 * time.Second,
				Kinesis: shardleasetest.NewKinesis(), Stream: "orders", Events: logWriter{t}, FanOut: "orders-app",
			})
			check(t, res, err)
			if res.Subscriptions == 0 {
				t.Errorf("no shard was read by subscription")
			}
		})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("needs the emulators; -short runs the in-process world only")
		}
		res, err := soak.Run(t.Context(), soak.Config{
			Seed: 1, Workers: 4, Shards: 4, Duration: 40 * time.Second, Rate: 50, Lease: 2 * time.Second,
			Kinesis: emulator.Kinesis(t), Dynamo: emulator.Dynamo(t),
			Stream: emulator.UniqueName("soak"), Table: emulator.UniqueName("soak-leases"), Events: logWriter{t},
		})
		check(t, res, err)
	})
	t.Run("sessions-fake", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			res, err := soak.Run(t.Context(), soak.Config{
				Seed: 1, Workers: 4, Shards: 6, Duration: 10 * time.Minute, Rate: 20, Lease: 10 * time.Second, Sessions: true,
				Kinesis: shardleasetest.NewKinesis(), Stream: "orders", Events: logWriter{t},
			})
			checkSessions(t, res, err, true)
		})
	})
	t.Run("sessions-emulator", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("needs the emulators; -short runs the in-process world only")
		}
		res, err := soak.Run(t.Context(), soak.Config{
			Seed: 1, Workers: 4, Shards: 4, Duration: 40 * time.Second, Rate: 50, Lease: 2 * time.Second, Sessions: true,
			Kinesis: emulator.Kinesis(t), Dynamo: emulator.Dynamo(t),
			Stream: emulator.UniqueName("ssoak"), Table: emulator.UniqueName("ssoak-leases"), Events: logWriter{t},
		})
		// 40 seconds make one zone loss and few fences: a taker's death
		// is drawn, not certain; and the sessions' crashes on top may
		// leave no live coordinator and deputy for the one joint fault
		// of each kind drawn, nor a coordinator for its crash.
		checkSessions(t, res, err, false, soak.EvCrashJoint, soak.EvListsFail, soak.EvJointLeave, soak.EvCrashCoordinator)
	})
	t.Run("group-fake", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			res, err := soak.Run(t.Context(), soak.Config{
				Seed: 1, Workers: 4, Shards: 3, Duration: 5 * time.Minute, Rate: 10, Lease: 10 * time.Second,
				Group: true, SourceInterval: 2 * time.Second,
				Kinesis: shardleasetest.NewKinesis(), Stream: "orders", Events: logWriter{t},
			})
			checkGroup(t, res, err, true)
		})
	})
	t.Run("mixed-fake", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			res, err := soak.Run(t.Context(), soak.Config{
				Seed: 1, Workers: 4, Shards: 3, Duration: 5 * time.Minute, Rate: 10, Lease: 10 * time.Second,
				Mixed: true, SourceInterval: 2 * time.Second,
				Kinesis: shardleasetest.NewKinesis(), Stream: "orders", Events: logWriter{t},
			})
			checkMixed(t, res, err)
		})
	})
	t.Run("group-emulator", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("needs the emulators; -short runs the in-process world only")
		}
		res, err := soak.Run(t.Context(), soak.Config{
			Seed: 1, Workers: 4, Shards: 2, Duration: 30 * time.Second, Rate: 20, Lease: 2 * time.Second,
			Group: true, SourceInterval: time.Second,
			Kinesis: emulator.Kinesis(t), Dynamo: emulator.Dynamo(t),
			Stream: emulator.UniqueName("gsoak"), Table: emulator.UniqueName("gsoak-leases"), Events: logWriter{t},
		})
		// In real time the workers that saw the stream leave may all have
		// restarted before their wait to delete its rows passed: the
		// re-add is checked when it happened.
		checkGroup(t, res, err, false)
	})
}

// checkGroup checks a group soak's result: nothing lost and no overlap on
// any stream, the fourth stream added and read in full, the third removed
// and released, and added back once its rows were deleted (required when
// readd is set), then read in full.
func checkGroup(t *testing.T, res *soak.Result, err error, readd bool) {
	t.Helper()
	checkRan(t, res, err)
	if len(res.Streams) != 4 {
		t.Fatalf("%d streams in the result, want 4", len(res.Streams))
	}
	for _, st := range res.Streams {
		if st.Lost != 0 || st.Overlaps != 0 || st.Audited == 0 || st.Handled != st.Audited {
			t.Errorf("stream %s: audited %d, handled %d, lost %d, overlaps %d", st.Name, st.Audited, st.Handled, st.Lost, st.Overlaps)
		}
	}
	added, removed := res.Streams[3], res.Streams[2]
	if added.Audited != added.Produced {
		t.Errorf("added stream %s: %d records audited of %d produced", added.Name, added.Audited, added.Produced)
	}
	if removed.HeldAfterRemoval != 0 || removed.EnteredAfterRemoval != 0 {
		t.Errorf("removed stream %s: %d leases held and %d handlers entered past %v",
			removed.Name, removed.HeldAfterRemoval, removed.EnteredAfterRemoval, removed.RemovalBound)
	}
	// Added back once its rows were deleted, it is read from its start
	// again: every record it was written is audited.
	if readd && !removed.Readded || removed.Readded && removed.Audited != removed.Produced {
		t.Errorf("removed stream %s: added back %v, %d records audited of %d produced", removed.Name, removed.Readded, removed.Audited, removed.Produced)
	}
	for _, kind := range []string{soak.EvStreamAdded, soak.EvStreamRemoved, soak.EvCrash, soak.EvRestart, soak.EvDrain, soak.EvSplit, soak.EvMerge, soak.EvShared, soak.EvMixed,
		soak.EvRewind, soak.EvReset, soak.EvDescribeDenied, soak.EvNoDescribe} {
		if res.Injected[kind] == 0 {
			t.Errorf("no %q was injected", kind)
		}
	}
	if res.Injected[soak.EvPoison] == 0 || res.DeadLettered == 0 {
		t.Errorf("%d poison records produced, %d dead-lettered", res.Injected[soak.EvPoison], res.DeadLettered)
	}
}

// checkMixed checks a mixed soak's result: nothing lost and no overlap on
// any stream, every stream's leases held again within the bound while a
// live worker read it, and every kind of change injected.
func checkMixed(t *testing.T, res *soak.Result, err error) {
	t.Helper()
	checkRan(t, res, err)
	if len(res.Streams) != 3 || len(res.Mixed) != 3 {
		t.Fatalf("%d streams and %d liveness figures in the result, want 3", len(res.Streams), len(res.Mixed))
	}
	for _, st := range res.Streams {
		if st.Lost != 0 || st.Overlaps != 0 || st.Produced == 0 || st.Handled != st.Produced {
			t.Errorf("stream %s: produced %d, handled %d, lost %d, overlaps %d", st.Name, st.Produced, st.Handled, st.Lost, st.Overlaps)
		}
	}
	for _, st := range res.Mixed {
		if st.UntakenMax > res.UntakenBound {
			t.Errorf("stream %s: a lease stayed untaken %v while a worker reading it had room (bound %v): %s", st.Name, st.UntakenMax, res.UntakenBound, st.UntakenLease)
		}
	}
	if res.UntakenMax > res.UntakenBound {
		t.Fatalf("untaken max %v, bound %v", res.UntakenMax, res.UntakenBound)
	}
	for _, kind := range []string{soak.EvSetChanged, soak.EvKindChanged, soak.EvCrash, soak.EvCrashCoordinator, soak.EvCrashFirst, soak.EvCrashDeputy, soak.EvCrashJoint,
		soak.EvRestart, soak.EvDrain, soak.EvSplit, soak.EvMerge, soak.EvShared, soak.EvMixed, soak.EvCapped, soak.EvRewind, soak.EvReset} {
		if res.Injected[kind] == 0 {
			t.Errorf("no %q was injected", kind)
		}
	}
	if res.Injected[soak.EvPoison] == 0 || res.DeadLettered == 0 {
		t.Errorf("%d poison records produced, %d dead-lettered", res.Injected[soak.EvPoison], res.DeadLettered)
	}
}

// checkSessions checks a soak with sessions: what every soak checks (the
// fault kinds of optional aside), no write accepted from a holder after its
// session was fenced, a lost zone's leases held again within the zone
// bound, keeps measured, and the sessions' faults injected (a taker's death
// between fence and claim required when takerDied is set).
func checkSessions(t *testing.T, res *soak.Result, err error, takerDied bool, optional ...string) {
	t.Helper()
	checkExcept(t, res, err, optional...)
	if !res.Sessions {
		t.Fatal("the result is not of a soak with sessions")
	}
	if res.StaleSessionAccepted != 0 {
		t.Fatalf("stale writes accepted after their session was fenced: %d", res.StaleSessionAccepted)
	}
	if res.ZoneMax > res.ZoneBound {
		t.Fatalf("a lost zone's lease stayed held by no live worker for %v (bound %v): %s", res.ZoneMax, res.ZoneBound, res.ZoneLease)
	}
	if res.ZonesMeasured == 0 || res.FencedByTakers == 0 || res.KeepsPerWorkerMinute == 0 {
		t.Errorf("zone losses measured %d, sessions fenced by takers %d, keeps a worker-minute %.1f", res.ZonesMeasured, res.FencedByTakers, res.KeepsPerWorkerMinute)
	}
	kinds := []string{soak.EvZoneLost, soak.EvSameID}
	if takerDied {
		kinds = append(kinds, soak.EvTakerDied)
	}
	for _, kind := range kinds {
		if res.Injected[kind] == 0 {
			t.Errorf("no %q was injected", kind)
		}
	}
}
