package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// TestImportUsage covers what import checks before it calls
// shardlease.Import. The import itself is tested with the library's
// fixtures.
func TestImportUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "-from", "old", "-table", "new", "-stream", "s"}, "missing -format"},
		{[]string{"import", "-format", "kcl", "-table", "new", "-stream", "s"}, "missing -from"},
		{[]string{"import", "-format", "kcl", "-from", "old", "-stream", "s"}, "missing -table"},
		{[]string{"import", "-format", "kcl2", "-from", "old", "-table", "new", "-stream", "s"}, `-format "kcl2": use kinsumer, vmware-go-kcl-v2, kcl`},
	} {
		r := runCLI(t, env{}, tc.args...)
		assert.Equal(t, 2, r.code, tc.args)
		assert.Contains(t, r.stderr, tc.want, tc.args)
	}
	r := runCLI(t, env{}, "import", "-h")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Example:\n\n\tshardlease import")
}

// TestImportVMwareKCL imports a vmware-go-kcl-v2 table through the command:
// -format kcl is refused with the format the table looks like, a row of a
// shard the stream does not list stops the import until -force, and the
// rest is copied.
func TestImportVMwareKCL(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("cli-import")
	require.NoError(t, emulator.CreateStream(ctx, kc, stream, 2))
	var seqs []string
	for i := range 3 {
		out, err := kc.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), Data: []byte{byte(i)},
			PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("0")})
		require.NoError(t, err)
		seqs = append(seqs, aws.ToString(out.SequenceNumber))
	}

	dyn := emulator.Dynamo(t)
	from := emulator.UniqueName("vapp")
	_, err := dyn.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(from),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("ShardID"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("ShardID"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	waiter := dynamodb.NewTableExistsWaiter(dyn, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
	require.NoError(t, waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(from)}, time.Minute))
	for _, item := range []map[string]types.AttributeValue{
		{"ShardID": &types.AttributeValueMemberS{Value: shard(0)}, "Checkpoint": &types.AttributeValueMemberS{Value: seqs[1]},
			"LeaseTimeout": &types.AttributeValueMemberS{Value: "2026-11-30T20:35:45.067594449Z"}},
		{"ShardID": &types.AttributeValueMemberS{Value: shard(1)}, "LeaseTimeout": &types.AttributeValueMemberS{Value: "2026-11-30T20:35:45.067594449Z"}},
		{"ShardID": &types.AttributeValueMemberS{Value: shard(9)}, "Checkpoint": &types.AttributeValueMemberS{Value: shardlease.ShardEnd}},
	} {
		_, err := dyn.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(from), Item: item})
		require.NoError(t, err)
	}
	args := []string{"-from", from, "-stream", stream, "-kinesis-endpoint", emulator.KinesisEndpoint(t)}

	r := f.run(t, env{}, "import", append([]string{"-format", "kcl"}, args...)...)
	require.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, `it looks like a vmware-go-kcl-v2 table: import it with format "vmware-go-kcl-v2"`)

	r = f.run(t, env{}, "import", append([]string{"-format", "vmware-go-kcl-v2"}, args...)...)
	require.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing was written: the rows do not fit the stream; the stream does not list 1 of their shards (shardId-000000000009)")
	rows, err := f.store.List(ctx, stream)
	require.NoError(t, err)
	require.Empty(t, rows)

	r = f.run(t, env{}, "import", append([]string{"-format", "vmware-go-kcl-v2", "-force", "-json"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	var rep importJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, 1, rep.Copied)
	assert.Equal(t, 2, rep.Skipped)
	assert.Zero(t, rep.NotInSource)
	assert.Equal(t, seqs[1], f.get(t, shardlease.LeaseKey{Stream: stream, Shard: shard(0)}).Checkpoint)
}
