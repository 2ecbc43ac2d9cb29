package main

import (
	"time"
)

// costModel is what a worker's lease table writes cost, as two rates: the
// write units a worker pays whatever it holds (its heartbeat or session
// row, its metrics, its share of a leader's lock), and the write units
// each lease it holds adds (renewals, checkpoints). Both are a minute's.
type costModel struct {
	perWorker float64 // write units a worker-minute
	perLease  float64 // write units a lease-minute
}

// at returns the write units per lease-minute of a worker holding k leases.
func (m costModel) at(k int) float64 {
	if k < 1 {
		k = 1
	}
	return m.perLease + m.perWorker/float64(k)
}

// modelFrom returns the model of a worker measured holding k leases, whose
// writes cost workerUnits on its own row (heartbeat, session) and
// leaseUnits on its lease rows, over w.
func modelFrom(k int, workerUnits, leaseUnits float64, w time.Duration) costModel {
	return costModel{perWorker: workerUnits / w.Minutes(), perLease: leaseUnits / float64(k) / w.Minutes()}
}

// The Java KCL 3.x's defaults that its model uses.
const (
	// kclEpsilon is subtracted from a third of the lease duration (the
	// KCL's failoverTimeMillis) to give its renewal interval.
	kclEpsilon = 25 * time.Millisecond
	// kclMetricsEvery is how often a worker writes its WorkerMetricStats
	// row (workerMetricsReporterFreqInMillis, 30 s).
	kclMetricsEvery = 30 * time.Second
	// kclLeaderEvery is how often the elected leader heartbeats its lock
	// in the coordinator state table (DynamoDBLockBasedLeaderDecider, 30 s).
	kclLeaderEvery = 30 * time.Second
	// kclCheckpointsPerMinute is the application checkpoints a lease-minute
	// the model assumes: one a minute, as the KCL's samples checkpoint.
	kclCheckpointsPerMinute = 1.0
)

// kclModel returns the Java KCL 3.x's writes as a costModel, for a lease
// duration (failoverTimeMillis) of lease and a fleet of workers workers.
// Its assumptions:
//
//   - every lease is renewed by its holder with a write of its own every
//     lease/3 - 25 ms (the LeaseRenewer's interval), whatever the records;
//   - the application checkpoints each lease once a minute, a write of its
//     own (the checkpointer writes the lease row);
//   - every worker writes its WorkerMetricStats row every 30 s;
//   - the leader heartbeats its lock every 30 s, shared by the fleet;
//   - every row is under 1 KB, so a write is one write unit; lease
//     assignments and the leader's scans are left out (they move when
//     leases do, or are reads).
//
// At lease 10 s and 10 leases a worker it is 19.3 write units a
// lease-minute: 18.1 renewals, 1 checkpoint, 0.2 metrics.
func kclModel(lease time.Duration, workers int) costModel {
	renew := lease/3 - kclEpsilon
	return costModel{
		perWorker: time.Minute.Seconds()/kclMetricsEvery.Seconds() + time.Minute.Seconds()/kclLeaderEvery.Seconds()/float64(max(workers, 1)),
		perLease:  time.Minute.Seconds()/renew.Seconds() + kclCheckpointsPerMinute,
	}
}
