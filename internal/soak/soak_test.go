package soak_test

import (
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

func check(t *testing.T, res *soak.Result, err error) {
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
	if res.UntakenMax > res.UntakenBound {
		t.Fatalf("untaken max %v, bound %v", res.UntakenMax, res.UntakenBound)
	}
	for _, kind := range []string{soak.EvCrash, soak.EvCrashCoordinator, soak.EvDrain, soak.EvRestart, soak.EvSplit, soak.EvMerge, soak.EvDeleteFinished, soak.EvSlow, soak.EvShared, soak.EvMixed,
		soak.EvCrashJoint, soak.EvListsFail, soak.EvJointLeave, soak.EvCapped} {
		if res.Injected[kind] == 0 {
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
// emulators. internal/soak/cmd/soak runs longer soaks.
func TestSoak(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
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
}
