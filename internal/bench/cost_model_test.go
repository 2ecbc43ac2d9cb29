package main

import (
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
