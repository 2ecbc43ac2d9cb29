package shardlease

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// A parent whose row cannot be decoded is not finished, whether Kinesis
// still lists it or not, and whatever its other children did: its children
// do not start because of it.
func TestParentsDoneCorruptParent(t *testing.T) {
	t.Parallel()
	child := Lease{Key: LeaseKey{Stream: "s", Shard: "c1"}, Parents: []string{"p"}}
	sibling := Lease{Key: LeaseKey{Stream: "s", Shard: "c2"}, Parents: []string{"p"}, Checkpoint: "49"}
	rows := map[string]Lease{"s:c1": child, "s:c2": sibling}
	listed := map[string]types.Shard{"s:p": {ShardId: aws.String("s:p")}}
	corrupt := map[string]bool{"s:p": true}
	for name, l := range map[string]map[string]types.Shard{"listed": listed, "aged out": {}} {
		if parentsDone(child, rows, l, corrupt) {
			t.Errorf("%s corrupt parent: the child may start", name)
		}
		if !parentsDone(child, rows, l, nil) {
			t.Errorf("%s parent without a row, a sibling started: the child should start", name)
		}
	}
}
