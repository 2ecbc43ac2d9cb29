package foreign

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"
)

const (
	seq    = "49590338271490256608559692538361571095921575989136588898"
	shard3 = "shardId-000000000003"
)

// checkShard stands in for the caller's shard id check: empty ids and ids
// with a colon are refused.
func checkShard(id string) error {
	if id == "" || strings.Contains(id, ":") {
		return errors.New("bad shard id")
	}
	return nil
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

var null types.AttributeValue = &types.AttributeValueMemberNULL{Value: true}

type item = map[string]types.AttributeValue

// whole is the row of a whole-record checkpoint, as Decode returns it.
func whole(shard, checkpoint string) Row {
	return Row{Shard: shard, Checkpoint: checkpoint, SubSequence: -1}
}

// skipped is a row that is not copied.
func skipped(shard, checkpoint, why string) Row {
	return Row{Shard: shard, Checkpoint: checkpoint, SubSequence: -1, Skip: why}
}

// noProgress is a row skipped because the source has no progress for it.
func noProgress(shard, checkpoint, why string) Row {
	r := skipped(shard, checkpoint, why)
	r.NoProgress = true
	return r
}

func TestDecodeKinsumer(t *testing.T) {
	for _, tc := range []struct {
		name string
		item item
		want Row
	}{
		{"sequence number", item{"Shard": s(shard3), "SequenceNumber": s(seq), "Finished": null}, whole(shard3, seq)},
		{"finished keeps its last sequence number", item{"Shard": s(shard3), "SequenceNumber": s(seq), "Finished": n("1700000000000000000")}, whole(shard3, "SHARD_END")},
		{"finished without a sequence number", item{"Shard": s(shard3), "Finished": n("1700000000000000000")}, whole(shard3, "SHARD_END")},
		{"finished set to another type", item{"Shard": s(shard3), "SequenceNumber": null, "Finished": s("yes")}, whole(shard3, "SHARD_END")},
		{"SHARD_END as the sequence number", item{"Shard": s(shard3), "SequenceNumber": s("SHARD_END")}, whole(shard3, "SHARD_END")},
		{"null sequence number", item{"Shard": s(shard3), "SequenceNumber": null, "Finished": null},
			noProgress(shard3, "", "no SequenceNumber: kinsumer never checkpointed the shard")},
		{"no sequence number", item{"Shard": s(shard3)}, noProgress(shard3, "", "no SequenceNumber: kinsumer never checkpointed the shard")},
		{"empty sequence number", item{"Shard": s(shard3), "SequenceNumber": s("")},
			noProgress(shard3, "", "no SequenceNumber: kinsumer never checkpointed the shard")},
		{"sequence number of another type", item{"Shard": s(shard3), "SequenceNumber": n("12")},
			skipped(shard3, "", "SequenceNumber is a number, want a string")},
		{"not a sequence number", item{"Shard": s(shard3), "SequenceNumber": s("12a")},
			skipped(shard3, "12a", `SequenceNumber "12a" is not a sequence number`)},
		{"bad shard id", item{"Shard": s("a:b"), "SequenceNumber": s(seq)}, skipped("a:b", "", "Shard is not a shard id: bad shard id")},
		{"no shard id", item{"SequenceNumber": s(seq)}, skipped("", "", "Shard is not a shard id: bad shard id")},
		{"shard id of another type", item{"Shard": n("3"), "SequenceNumber": s(seq)}, skipped("", "", "Shard is not a shard id: bad shard id")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, mine := Decode(Kinsumer, tc.item, "orders", checkShard)
			require.True(t, mine)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDecodeVMwareKCL(t *testing.T) {
	for _, tc := range []struct {
		name string
		item item
		want Row
	}{
		{"sequence number", item{"ShardID": s(shard3), "Checkpoint": s(seq), "AssignedTo": s("w1")}, whole(shard3, seq)},
		{"SHARD_END", item{"ShardID": s(shard3), "Checkpoint": s("SHARD_END")}, whole(shard3, "SHARD_END")},
		{"parents are not read", item{"ShardID": s(shard3), "Checkpoint": s(seq), "ParentShardId": s("shardId-000000000001")}, whole(shard3, seq)},
		{"no checkpoint", item{"ShardID": s(shard3), "LeaseTimeout": s("2024-01-01T00:00:00Z")},
			noProgress(shard3, "", "no Checkpoint: no record was processed")},
		{"null checkpoint", item{"ShardID": s(shard3), "Checkpoint": null}, noProgress(shard3, "", "no Checkpoint: no record was processed")},
		{"empty checkpoint", item{"ShardID": s(shard3), "Checkpoint": s("")}, noProgress(shard3, "", "no Checkpoint: no record was processed")},
		{"TRIM_HORIZON", item{"ShardID": s(shard3), "Checkpoint": s("TRIM_HORIZON")},
			noProgress(shard3, "TRIM_HORIZON", "TRIM_HORIZON means no record was processed yet")},
		{"LATEST", item{"ShardID": s(shard3), "Checkpoint": s("LATEST")}, noProgress(shard3, "LATEST", "LATEST means no record was processed yet")},
		{"AT_TIMESTAMP", item{"ShardID": s(shard3), "Checkpoint": s("AT_TIMESTAMP")},
			noProgress(shard3, "AT_TIMESTAMP", "AT_TIMESTAMP means no record was processed yet")},
		{"checkpoint of another type", item{"ShardID": s(shard3), "Checkpoint": &types.AttributeValueMemberBOOL{Value: true}},
			skipped(shard3, "", "Checkpoint is a boolean, want a string")},
		{"not a checkpoint", item{"ShardID": s(shard3), "Checkpoint": s("x1")},
			skipped(shard3, "x1", `Checkpoint "x1" is neither a sequence number nor SHARD_END`)},
		{"bad shard id", item{"ShardID": s("a:b"), "Checkpoint": s(seq)}, skipped("a:b", "", "ShardID is not a shard id: bad shard id")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, mine := Decode(VMwareKCL, tc.item, "orders", checkShard)
			require.True(t, mine)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDecodeKCL(t *testing.T) {
	withSub := func(r Row, sub int64) Row { r.SubSequence = sub; return r }
	withEpoch := func(r Row, epoch int64) Row { r.Epoch = epoch; return r }
	const multi = "123456789012:orders:1600000000:" + shard3
	for _, tc := range []struct {
		name string
		item item
		want Row
		mine bool
	}{
		{"sequence number", item{"leaseKey": s(shard3), "checkpoint": s(seq)}, whole(shard3, seq), true},
		{"sub-sequence", item{"leaseKey": s(shard3), "checkpoint": s(seq), "checkpointSubSequenceNumber": n("3")}, withSub(whole(shard3, seq), 3), true},
		{"sub-sequence 0", item{"leaseKey": s(shard3), "checkpoint": s(seq), "checkpointSubSequenceNumber": n("0")}, withSub(whole(shard3, seq), 0), true},
		{"negative sub-sequence", item{"leaseKey": s(shard3), "checkpoint": s(seq), "checkpointSubSequenceNumber": n("-1")}, whole(shard3, seq), true},
		{"sub-sequence not a number", item{"leaseKey": s(shard3), "checkpoint": s(seq), "checkpointSubSequenceNumber": n("1.5")}, whole(shard3, seq), true},
		{"sub-sequence as a string", item{"leaseKey": s(shard3), "checkpoint": s(seq), "checkpointSubSequenceNumber": s("3")}, whole(shard3, seq), true},
		{"SHARD_END has no sub-sequence", item{"leaseKey": s(shard3), "checkpoint": s("SHARD_END"), "checkpointSubSequenceNumber": n("0")},
			whole(shard3, "SHARD_END"), true},
		{"parents are not read", item{"leaseKey": s(shard3), "checkpoint": s(seq), "parentShardId": &types.AttributeValueMemberSS{Value: []string{"shardId-000000000001"}}},
			whole(shard3, seq), true},
		{"TRIM_HORIZON", item{"leaseKey": s(shard3), "checkpoint": s("TRIM_HORIZON"), "checkpointSubSequenceNumber": n("0")},
			noProgress(shard3, "TRIM_HORIZON", "TRIM_HORIZON means no record was processed yet"), true},
		{"LATEST", item{"leaseKey": s(shard3), "checkpoint": s("LATEST")}, noProgress(shard3, "LATEST", "LATEST means no record was processed yet"), true},
		{"AT_TIMESTAMP", item{"leaseKey": s(shard3), "checkpoint": s("AT_TIMESTAMP")},
			noProgress(shard3, "AT_TIMESTAMP", "AT_TIMESTAMP means no record was processed yet"), true},
		{"no checkpoint", item{"leaseKey": s(shard3)}, noProgress(shard3, "", "no checkpoint: no record was processed"), true},
		{"empty checkpoint", item{"leaseKey": s(shard3), "checkpoint": s("")}, noProgress(shard3, "", "no checkpoint: no record was processed"), true},
		{"checkpoint of another type", item{"leaseKey": s(shard3), "checkpoint": n("12")}, skipped(shard3, "", "checkpoint is a number, want a string"), true},
		{"not a checkpoint", item{"leaseKey": s(shard3), "checkpoint": s("12x")},
			skipped(shard3, "12x", `checkpoint "12x" is neither a sequence number nor a KCL sentinel`), true},
		{"no lease key", item{"checkpoint": s(seq)}, skipped("", "", `leaseKey "" does not end in a shard id: bad shard id`), true},

		{"multi-stream lease of the stream", item{"leaseKey": s(multi), "checkpoint": s(seq), "checkpointSubSequenceNumber": n("2")},
			withEpoch(withSub(whole(shard3, seq), 2), 1600000000), true},
		{"multi-stream lease without progress", item{"leaseKey": s(multi), "checkpoint": s("LATEST")},
			withEpoch(noProgress(shard3, "LATEST", "LATEST means no record was processed yet"), 1600000000), true},
		{"multi-stream lease of another stream", item{"leaseKey": s("123456789012:payments:1600000000:" + shard3), "checkpoint": s(seq)},
			Row{}, false},
		{"two parts before the shard", item{"leaseKey": s("orders:1600000000:" + shard3), "checkpoint": s(seq)},
			skipped(shard3, "", `leaseKey "orders:1600000000:`+shard3+`" is neither a shard id nor account:stream:epoch:shard`), true},
		{"epoch not a number", item{"leaseKey": s("123456789012:orders:new:" + shard3), "checkpoint": s(seq)},
			skipped(shard3, "", `leaseKey "123456789012:orders:new:`+shard3+`" has creation epoch "new", not a number`), true},
		{"no shard after the epoch", item{"leaseKey": s("123456789012:orders:1600000000:"), "checkpoint": s(seq)},
			withEpoch(skipped("", "", `leaseKey "123456789012:orders:1600000000:" does not end in a shard id: bad shard id`), 1600000000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, mine := Decode(KCL, tc.item, "orders", checkShard)
			require.Equal(t, tc.mine, mine)
			if mine {
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestDecodeUnknownFormat(t *testing.T) {
	got, mine := Decode("flink", item{"leaseKey": s(shard3), "checkpoint": s(seq)}, "orders", checkShard)
	require.False(t, mine)
	require.Equal(t, Row{}, got)
}

func TestFormats(t *testing.T) {
	require.Equal(t, []Format{Kinsumer, VMwareKCL, KCL}, Formats())
	keys := map[Format]string{}
	for _, f := range Formats() {
		keys[f] = f.Key()
	}
	require.Equal(t, map[Format]string{Kinsumer: "Shard", VMwareKCL: "ShardID", KCL: "leaseKey"}, keys)
	require.Empty(t, Format("flink").Key())
}

func TestSkipOlderIncarnationsAndSort(t *testing.T) {
	const older = "lease of an older incarnation of stream orders (creation epoch 1500000000; the newest is 1600000000)"
	epoch := func(shard string, e int64, skip string) Row {
		r := whole(shard, seq)
		r.Epoch, r.Skip = e, skip
		return r
	}
	for _, tc := range []struct {
		name       string
		rows, want []Row
	}{
		{"no rows", nil, nil},
		{"single-stream rows are left alone, ordered by shard",
			[]Row{whole("shardId-2", seq), whole("shardId-0", seq), whole("shardId-1", "SHARD_END")},
			[]Row{whole("shardId-0", seq), whole("shardId-1", "SHARD_END"), whole("shardId-2", seq)}},
		{"an older incarnation is skipped and ordered after the newest",
			[]Row{epoch("shardId-0", 1500000000, ""), epoch("shardId-1", 1500000000, ""), epoch("shardId-0", 1600000000, "")},
			[]Row{epoch("shardId-0", 1600000000, ""), epoch("shardId-0", 1500000000, older), epoch("shardId-1", 1500000000, "")}},
		{"a skipped newest row still makes the older one old",
			[]Row{epoch("shardId-0", 1500000000, ""), epoch("shardId-0", 1600000000, "bad checkpoint")},
			[]Row{epoch("shardId-0", 1600000000, "bad checkpoint"), epoch("shardId-0", 1500000000, older)}},
		{"an older row keeps the reason it has",
			[]Row{epoch("shardId-0", 1500000000, "bad checkpoint"), epoch("shardId-0", 1600000000, "")},
			[]Row{epoch("shardId-0", 1600000000, ""), epoch("shardId-0", 1500000000, "bad checkpoint")}},
		{"rows of one shard and epoch keep their order",
			[]Row{epoch("shardId-0", 1600000000, "first"), epoch("shardId-0", 1600000000, "second")},
			[]Row{epoch("shardId-0", 1600000000, "first"), epoch("shardId-0", 1600000000, "second")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			SkipOlderIncarnations(tc.rows, "orders")
			Sort(tc.rows)
			require.Equal(t, tc.want, tc.rows)
		})
	}
}

func TestValidCheckpoint(t *testing.T) {
	for cp, want := range map[string]bool{"": false, seq: true, "0": true, "SHARD_END": true, "12a": false, "LATEST": false, "-1": false} {
		require.Equal(t, want, validCheckpoint(cp), "%q", cp)
	}
}
