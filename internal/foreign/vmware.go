package foreign

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/seqnum"
)

// VMwareRow reads one row of a vmware-go-kcl-v2 table. Its ParentShardId,
// like every source's parents, is not read: Import takes the parents from
// the stream.
func VMwareRow(item map[string]types.AttributeValue, checkShard func(string) error) Row {
	shard, _, _ := stringAttr(item, "ShardID")
	r := Row{Shard: shard, SubSequence: -1}
	if err := checkShard(shard); err != nil {
		r.Skip = fmt.Sprintf("ShardID is not a shard id: %v", err)
		return r
	}
	cp, present, ok := stringAttr(item, "Checkpoint")
	r.Checkpoint = cp
	switch {
	case !ok:
		r.Skip = fmt.Sprintf("Checkpoint is %s, want a string", attrType(item["Checkpoint"]))
	case !present || cp == "":
		r.Skip, r.NoProgress = "no Checkpoint: no record was processed", true
	case cp == "TRIM_HORIZON" || cp == "LATEST" || cp == "AT_TIMESTAMP":
		r.Skip, r.NoProgress = cp+" means no record was processed yet", true
	case cp == seqnum.ShardEnd:
	case !validCheckpoint(cp):
		r.Skip = fmt.Sprintf("Checkpoint %q is neither a sequence number nor SHARD_END", cp)
	}
	return r
}
