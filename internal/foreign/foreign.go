// Package foreign reads the rows of other Kinesis consumer libraries
// tables: how kinsumer, vmware-go-kcl-v2 and the Java KCL lay out a shard's
// progress, and how one item becomes a row that shardlease can copy.
package foreign

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease/internal/seqnum"
)

// Row is one row of a foreign table as Import reads it.
type Row struct {
	Shard       string
	Checkpoint  string // as shardlease writes it, or the raw value when Skip is set
	SubSequence int64
	Parents     []string
	Skip        string // why the row is not copied; empty to copy it
	NoProgress  bool   // skipped because the source holds no progress for the shard
	Epoch       int64  // KCL multi-stream: the stream's creation epoch
}

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

// KinsumerRow reads one row of a kinsumer checkpoint table.
func KinsumerRow(item map[string]types.AttributeValue, checkShard func(string) error) Row {
	shard, _, _ := stringAttr(item, "Shard")
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
		r.Skip = fmt.Sprintf("SequenceNumber is %s, want a string", attrType(item["SequenceNumber"]))
	case !present || seq == "":
		r.Skip, r.NoProgress = "no SequenceNumber: kinsumer never checkpointed the shard", true
	case !validCheckpoint(seq):
		r.Skip = fmt.Sprintf("SequenceNumber %q is not a sequence number", seq)
	}
	return r
}

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

// KCLRow reads one KCL lease; mine is false for a lease of another stream in
// a multi-stream table.
func KCLRow(item map[string]types.AttributeValue, stream string, checkShard func(string) error) (r Row, mine bool) {
	key, _, _ := stringAttr(item, "leaseKey")
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
		r.Skip = fmt.Sprintf("checkpoint is %s, want a string", attrType(item["checkpoint"]))
		return r, true
	case !present || cp == "":
		r.Skip, r.NoProgress = "no checkpoint: no record was processed", true
		return r, true
	case cp == "TRIM_HORIZON" || cp == "LATEST" || cp == "AT_TIMESTAMP":
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

// validCheckpoint reports whether checkpoint is one shardlease writes: a
// sequence number (decimal digits) or SHARD_END.
func validCheckpoint(checkpoint string) bool {
	if checkpoint == "" {
		return false
	}
	if checkpoint == seqnum.ShardEnd {
		return true
	}
	for i := 0; i < len(checkpoint); i++ {
		if checkpoint[i] < '0' || checkpoint[i] > '9' {
			return false
		}
	}
	return true
}

// attrType names the type of an attribute value in a reason.
func attrType(av types.AttributeValue) string {
	switch av.(type) {
	case nil:
		return "missing"
	case *types.AttributeValueMemberS:
		return "a string"
	case *types.AttributeValueMemberN:
		return "a number"
	case *types.AttributeValueMemberB:
		return "binary"
	case *types.AttributeValueMemberBOOL:
		return "a boolean"
	case *types.AttributeValueMemberNULL:
		return "null"
	case *types.AttributeValueMemberSS:
		return "a string set"
	case *types.AttributeValueMemberNS:
		return "a number set"
	case *types.AttributeValueMemberBS:
		return "a binary set"
	case *types.AttributeValueMemberL:
		return "a list"
	case *types.AttributeValueMemberM:
		return "a map"
	}
	return fmt.Sprintf("%T", av)
}
