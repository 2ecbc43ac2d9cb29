package foreign

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/seqnum"
)

// stringAttr returns item[name] as a string; present is false when it is
// missing or NULL, ok is false when it has another type.
func stringAttr(item map[string]types.AttributeValue, name string) (v string, present, ok bool) {
	switch av := item[name].(type) {
	case nil, *types.AttributeValueMemberNULL:
		return "", false, true
	case *types.AttributeValueMemberS:
		return av.Value, true, true
	}
	return "", true, false
}

// validCheckpoint reports whether checkpoint is one shardlease writes: a
// sequence number (decimal digits) or SHARD_END.
func validCheckpoint(checkpoint string) bool {
	return checkpoint == seqnum.ShardEnd || seqnum.IsSequence(checkpoint)
}

// startPosition reports whether checkpoint is one of the start positions
// that the KCL (and vmware-go-kcl-v2) keep for a shard before its first
// record is processed.
func startPosition(checkpoint string) bool {
	return checkpoint == "TRIM_HORIZON" || checkpoint == "LATEST" || checkpoint == "AT_TIMESTAMP"
}
