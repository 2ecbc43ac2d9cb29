package shardlease

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/metric"
)

// Finished reports whether l's shard was read to its end.
func (l Lease) Finished() bool { return l.Checkpoint == ShardEnd }

// cleanable reports whether the row of a finished shard can no longer
// matter, so that it may be deleted: it holds ShardEnd, Kinesis no longer
// lists the shard (its records aged out of the stream's retention), and
// every child (as Kinesis lists it, or as the rows name it) has a row with a
// checkpoint of its own. A child that has not checkpointed yet still looks
// at its parents before it starts reading, so their rows stay until then.
func cleanable(l Lease, v shardView, rows map[string]Lease) bool {
	if !l.Finished() {
		return false
	}
	if _, listed := v.listed[l.Key.Shard]; listed {
		return false
	}
	children := slices.Clone(v.children[l.Key.Shard])
	for _, r := range rows {
		if slices.Contains(r.Parents, l.Key.Shard) {
			children = append(children, r.Key.Shard)
		}
	}
	for _, child := range children {
		if r, ok := rows[child]; !ok || r.Checkpoint == "" {
			return false
		}
	}
	return true
}

// cleanup deletes the rows of finished shards that can no longer matter
// (see cleanable), each with a delete conditional on the counter seen, so
// that a row that moved since the listing stays. Every deletion is logged
// and counted (Stats.FinishedRowsDeleted). rows holds existing by shard.
func (co *coordinator) cleanup(ctx context.Context, ls LineageStore, existing []Lease, rows map[string]Lease, v shardView) {
	c := co.c
	for _, l := range existing {
		if !cleanable(l, v, rows) {
			continue
		}
		deleted, err := ls.DeleteFinished(ctx, l)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("deleting the row of a finished shard failed; retrying at the next shard sync", "shard", l.Key.Shard, "err", err)
		case deleted:
			c.stats.cleaned.Add(1)
			c.ins.cleaned.Add(bg, 1, c.ins.attrs())
			c.log.Info("deleted the row of a finished shard that Kinesis no longer lists", "shard", l.Key.Shard, "counter", l.Counter)
		}
	}
}

// lineageInstruments are the metrics of cleanup and rejected checkpoints.
type lineageInstruments struct {
	cleaned  metric.Int64Counter
	rejected metric.Int64Counter
}

func newLineageInstruments(m metric.Meter) (lineageInstruments, error) {
	var li lineageInstruments
	var err1, err2 error
	li.cleaned, err1 = m.Int64Counter("shardlease.leases.cleaned", metric.WithDescription("Rows of finished shards deleted."))
	li.rejected, err2 = m.Int64Counter("shardlease.checkpoints.rejected", metric.WithDescription("Checkpoints Kinesis refused to read after."))
	if err1 != nil {
		return li, err1
	}
	return li, err2
}

// rejectedCheckpoint counts a checkpoint Kinesis refused on shard.
func (c *Consumer) rejectedCheckpoint(shard string) {
	c.stats.rejected.Add(1)
	c.ins.rejected.Add(bg, 1, c.ins.attrs(shardAttr(shard)))
}
