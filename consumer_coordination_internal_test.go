package shardlease

import (
	"testing"

	"github.com/shardlease/shardlease/internal/balance"
)

// A leaving coordinator passes the lead to live holders, never to the
// owner left on a finished row (its release failed, or it crashed at the
// shard's end): the last listing's rows reach balance marked finished.
func TestPassLeadSkipsFinishedRows(t *testing.T) {
	t.Parallel()
	row := func(shard, owner, checkpoint string) Lease {
		return Lease{Key: LeaseKey{Stream: "s", Shard: shard}, Owner: owner, Counter: 3, Checkpoint: checkpoint}
	}
	var rows []balance.Row
	for _, l := range []Lease{
		row("a-parent", "gone", ShardEnd),
		row("b-child", "me", "49"),
		row("c-child", "w1", "49"),
		row("d-child", "w2", "49"),
	} {
		rows = append(rows, rowOf(l))
	}
	var owners []string
	for _, it := range balance.PassLead(rows, "me", "b-child") {
		owners = append(owners, it.Row.Owner)
	}
	if len(owners) != 2 || owners[0] != "w1" || owners[1] != "w2" {
		t.Fatalf("lead passed to %v; want [w1 w2], not the finished row's owner", owners)
	}
}
