package shardlease

import "context"

// shardReader reads one held shard for its lease runner, one batch ahead of
// the handler. It starts at the lease's checkpoint (sub-sequence included) or
// at the configured initial position, sends batches on out in order (the
// last batch of a closed shard has end set), and returns when ctx is done or
// the shard has ended; out is closed then. It holds nothing open once it has
// returned: the runner releases the lease only after that.
//
// Each reading mode is one implementation: polling (read_polling.go) and
// enhanced fan-out (read_fanout.go). Everything else, de-aggregation
// (Consumer.convert), checkpoints, handoff and lost leases, is the runner's
// and shared by both.
type shardReader interface {
	read(ctx context.Context, out chan<- *Batch)
}

// newReader returns the reader of the configured mode for r.
func (c *Consumer) newReader(r *leaseRunner) shardReader {
	if c.fanOut != nil {
		return fanOutReader{r}
	}
	return pollingReader{r}
}
