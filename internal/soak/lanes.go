package soak

import "github.com/shardlease/shardlease"

// Half the worker slots (the even ones) run with per-key concurrency: four
// lanes per shard and a small bound on the records in flight, so that a
// poison record's lane fills the window and holds the shard. Their handler
// calls of one shard run at once by design, and are not counted as
// overlaps; a record handled above the watermark when such a worker stops
// with a lane still failing is handed again, and counted as explained.

// laneWorkers is how many lanes a lane worker's shards have.
const laneWorkers = 4

// withLanes reports whether the worker slot runs with per-key concurrency.
func withLanes(slot int) bool { return slot%2 == 0 }

// laneOptions returns the slot's per-key concurrency options.
func laneOptions(slot int) []shardlease.Option {
	if !withLanes(slot) {
		return nil
	}
	return []shardlease.Option{shardlease.WithKeyConcurrency(laneWorkers), shardlease.WithMaxInFlight(64)}
}
