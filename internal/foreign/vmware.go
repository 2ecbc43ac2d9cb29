package foreign

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/ddbattr"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// vmwareKey is the partition key of a vmware-go-kcl-v2 lease table.
const vmwareKey = "ShardID"

// vmwareRow reads one row of a vmware-go-kcl-v2 table: the shard id in
// ShardID and the progress in Checkpoint, a sequence number or SHARD_END;
// a row without one is skipped. Its ParentShardId, like every source's
// parents, is not read. Nor are its owner attributes (AssignedTo,
// LeaseTimeout, ClaimRequest).
func vmwareRow(item map[string]types.AttributeValue, checkShard func(string) error) Row {
	shard, _, _ := stringAttr(item, vmwareKey)
	r := Row{Shard: shard, SubSequence: -1}
	if err := checkShard(shard); err != nil {
		r.Skip = fmt.Sprintf("ShardID is not a shard id: %v", err)
		return r
	}
	cp, present, ok := stringAttr(item, "Checkpoint")
	r.Checkpoint = cp
	switch {
	case !ok:
		r.Skip = fmt.Sprintf("Checkpoint is %s, want a string", ddbattr.TypeName(item["Checkpoint"]))
	case !present || cp == "":
		r.Skip, r.NoProgress = "no Checkpoint: no record was processed", true
	case startPosition(cp):
		r.Skip, r.NoProgress = cp+" means no record was processed yet", true
	case cp == seqnum.ShardEnd:
	case !validCheckpoint(cp):
		r.Skip = fmt.Sprintf("Checkpoint %q is neither a sequence number nor SHARD_END", cp)
	}
	return r
}
