package main

import (
	"math"
	"time"
)

// costModel is what a worker's lease table writes cost, as rates a minute:
// the write units a worker pays whatever it holds (its heartbeat, its
// metrics, its share of a leader's lock), the write units each lease it
// holds adds (renewals, checkpoints of their own), and the keeps of a row
// that grows with the leases held (a session row carrying their packed
// checkpoints), each of which costs a write unit for every 1 KB of it.
type costModel struct {
	perWorker float64 // write units a worker-minute
	perLease  float64 // write units a lease-minute
	keeps     float64 // writes a worker-minute of its growing row
	// rowBytes and entryBytes are the growing row's size without entries,
	// and what each lease held adds to it.
	rowBytes, entryBytes float64
}

// writeUnit is the bytes a write unit covers.
const writeUnit = 1024

// at returns the write units per lease-minute of a worker holding k leases.
func (m costModel) at(k int) float64 {
	k = max(k, 1)
	perKeep := math.Ceil((m.rowBytes + m.entryBytes*float64(k)) / writeUnit)
	return m.perLease + (m.perWorker+m.keeps*max(perKeep, 1))/float64(k)
}

// modelFrom returns the model of a worker measured holding k leases, whose
// writes cost workerUnits on its own row (heartbeat, session) and
// leaseUnits on its lease rows, over w.
func modelFrom(k int, workerUnits, leaseUnits float64, w time.Duration) costModel {
	return costModel{perWorker: workerUnits / w.Minutes(), perLease: leaseUnits / float64(k) / w.Minutes()}
}

// keptModelFrom returns the model of a worker measured holding k leases,
// whose keeps (keepWrites writes, keepUnits write units over w) wrote a row
// of row bytes, entries of which were its leases' (entryBytes in all), and
// whose lease rows cost leaseUnits. What the keeps cost beyond their
// size's units is the worker's own.
func keptModelFrom(k int, keepWrites int64, keepUnits, leaseUnits float64, row, entryBytes int, w time.Duration) costModel {
	m := costModel{perLease: leaseUnits / float64(k) / w.Minutes(), keeps: float64(keepWrites) / w.Minutes(),
		rowBytes: float64(row - entryBytes), entryBytes: float64(entryBytes) / float64(k)}
	perKeep := max(math.Ceil(float64(row)/writeUnit), 1)
	m.perWorker = max(0, keepUnits/w.Minutes()-m.keeps*perKeep)
	return m
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
