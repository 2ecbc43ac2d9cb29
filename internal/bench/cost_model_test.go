package main

import (
	"math"
	"testing"
	"time"
)

func TestKCLModel(t *testing.T) {
	m := kclModel(10*time.Second, 100)
	if got := m.at(10); got < 19.25 || got > 19.4 {
		t.Errorf("KCL 3.x at L = 10s, 10 leases a worker: %.3f write units a lease-minute, want about 19.3", got)
	}
	if fast := kclModel(3*time.Second, 100).at(10); fast < 3*m.at(10) {
		t.Errorf("KCL 3.x at L = 3s: %.1f, want over three times its %.1f at 10s", fast, m.at(10))
	}
	if m.at(1) <= m.at(100) {
		t.Errorf("a worker's own writes should weigh more on fewer leases: %.2f at 1, %.2f at 100", m.at(1), m.at(100))
	}
}

func TestModelFrom(t *testing.T) {
	m := modelFrom(10, 30, 0, 30*time.Second)
	if m.perWorker != 60 || m.perLease != 0 || m.at(10) != 6 || m.at(0) != 60 {
		t.Errorf("modelFrom: %+v, at(10) %v", m, m.at(10))
	}
}

func TestCostChart(t *testing.T) {
	m := costModels{perLease: costModel{perLease: 18}, sessions: costModel{perWorker: 18}}
	c := costChart(defLease, m)
	if len(c.Series) != 3 {
		t.Fatalf("%d series, want the KCL's, per-lease renewals and sessions", len(c.Series))
	}
	for _, s := range c.Series {
		if len(s.X) != len(chartLeases) || len(s.Y) != len(chartLeases) {
			t.Errorf("series %q: %d x and %d y, want %d each", s.Name, len(s.X), len(s.Y), len(chartLeases))
		}
	}
	// At 10 leases a worker (the fourth x): the KCL's 19.3, 18 and 1.8.
	if kcl, per, ses := c.Series[0].Y[3], c.Series[1].Y[3], c.Series[2].Y[3]; kcl < 19.25 || kcl > 19.4 || per != 18 || ses != 1.8 {
		t.Errorf("at 10 leases a worker: KCL %.2f, per-lease %.2f, sessions %.2f; want 19.3, 18, 1.8", kcl, per, ses)
	}
}

func TestFailoverChart(t *testing.T) {
	c := failoverChart(map[time.Duration][]time.Duration{
		defLease:  {12 * time.Second},
		fastLease: {3 * time.Second, 4 * time.Second, 3500 * time.Millisecond},
	})
	want := []chartBar{{"L 10s worst", 12, 0}, {"L 10s median", 12, 0}, {"L 3s worst", 4, 1}, {"L 3s median", 3.5, 1}}
	if len(c.Bars) != len(want) {
		t.Fatalf("bars %+v, want %+v", c.Bars, want)
	}
	for i := range want {
		if c.Bars[i] != want[i] {
			t.Errorf("bar %d: %+v, want %+v", i, c.Bars[i], want[i])
		}
	}
	if c.Target != 5 {
		t.Errorf("target %v s, want 5", c.Target)
	}
}

func TestKeptModelFrom(t *testing.T) {
	// 9 keeps of a 800-byte row in 30 s, 500 bytes of it ten leases'
	// packed checkpoints, nothing on lease rows.
	m := keptModelFrom(10, 9, 9, 0, 800, 500, 30*time.Second)
	for _, c := range []struct {
		k    int
		want float64
	}{{1, 18}, {10, 1.8}, {14, 18.0 / 14}, {20, 1.8}, {100, 18.0 * 6 / 100}} {
		if got := m.at(c.k); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("at(%d) = %v, want %v (a keep a unit a KB of 300 bytes and 50 a lease)", c.k, got, c.want)
		}
	}
	if m.perWorker != 0 {
		t.Errorf("perWorker %v, want 0: every unit was the keeps' size", m.perWorker)
	}
}
