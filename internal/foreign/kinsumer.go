package foreign

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/ddbattr"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// kinsumerKey is the partition key of a kinsumer checkpoint table.
const kinsumerKey = "Shard"

// kinsumerRow reads one row of a kinsumer checkpoint table: the shard id in
// Shard, the last processed record in SequenceNumber, and Finished, which
// kinsumer sets (to the time, in unix nanoseconds) once the shard was
// consumed to its end. A finished row is copied as SHARD_END; a row
// without a SequenceNumber is skipped.
func kinsumerRow(item map[string]types.AttributeValue, checkShard func(string) error) Row {
	shard, _, _ := stringAttr(item, kinsumerKey)
	r := Row{Shard: shard, SubSequence: -1}
	if err := checkShard(shard); err != nil {
		r.Skip = fmt.Sprintf("Shard is not a shard id: %v", err)
		return r
	}
	seq, present, ok := stringAttr(item, "SequenceNumber")
	r.Checkpoint = seq
	switch item["Finished"].(type) {
	case nil, *types.AttributeValueMemberNULL:
	default: // kinsumer writes the time the shard was consumed to its end
		r.Checkpoint = seqnum.ShardEnd
		return r
	}
	switch {
	case !ok:
		r.Skip = fmt.Sprintf("SequenceNumber is %s, want a string", ddbattr.TypeName(item["SequenceNumber"]))
	case !present || seq == "":
		r.Skip, r.NoProgress = "no SequenceNumber: kinsumer never checkpointed the shard", true
	case !validCheckpoint(seq):
		r.Skip = fmt.Sprintf("SequenceNumber %q is not a sequence number", seq)
	}
	return r
}
