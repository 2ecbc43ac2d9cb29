package foreign

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/ddbattr"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// kclKey is the partition key of a Java KCL lease table.
const kclKey = "leaseKey"

// kclRow reads one KCL lease: the shard id in leaseKey (in multi-stream
// mode "account:stream:epoch:shard"), the progress in checkpoint, a
// sequence number, SHARD_END or a start position, and the sub-sequence in
// checkpointSubSequenceNumber. A start position means no record was
// processed: the row is skipped. mine is false for a lease of another
// stream in a multi-stream table.
func kclRow(item map[string]types.AttributeValue, stream string, checkShard func(string) error) (r Row, mine bool) {
	key, _, _ := stringAttr(item, kclKey)
	r = Row{Shard: key, SubSequence: -1}
	if i := strings.LastIndexByte(key, ':'); i >= 0 {
		// Multi-stream mode: "account:stream:epoch:shard".
		r.Shard = key[i+1:]
		parts := strings.Split(key[:i], ":")
		if len(parts) != 3 {
			r.Skip = fmt.Sprintf("leaseKey %q is neither a shard id nor account:stream:epoch:shard", key)
			return r, true
		}
		if parts[1] != stream {
			return r, false
		}
		epoch, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			r.Skip = fmt.Sprintf("leaseKey %q has creation epoch %q, not a number", key, parts[2])
			return r, true
		}
		r.Epoch = epoch
	}
	if err := checkShard(r.Shard); err != nil {
		r.Skip = fmt.Sprintf("leaseKey %q does not end in a shard id: %v", key, err)
		return r, true
	}
	cp, present, ok := stringAttr(item, "checkpoint")
	r.Checkpoint = cp
	switch {
	case !ok:
		r.Skip = fmt.Sprintf("checkpoint is %s, want a string", ddbattr.TypeName(item["checkpoint"]))
		return r, true
	case !present || cp == "":
		r.Skip, r.NoProgress = "no checkpoint: no record was processed", true
		return r, true
	case startPosition(cp):
		r.Skip, r.NoProgress = cp+" means no record was processed yet", true
		return r, true
	case cp == seqnum.ShardEnd:
		return r, true
	case !validCheckpoint(cp):
		r.Skip = fmt.Sprintf("checkpoint %q is neither a sequence number nor a KCL sentinel", cp)
		return r, true
	}
	if v, ok := item["checkpointSubSequenceNumber"].(*types.AttributeValueMemberN); ok {
		if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil && n >= 0 {
			r.SubSequence = n
		}
	}
	return r, true
}
