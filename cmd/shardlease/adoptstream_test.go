package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// The stream is deleted and created again with the in-process fake:
// kinesalite stamps creation times in whole seconds, so a stream created
// again within a second would look the same.
func TestAdoptStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")
	fake := shardleasetest.NewKinesis()
	create := func() shardlease.StreamIdentity {
		_, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		id, err := shardlease.DescribeIdentity(ctx, fake, stream)
		require.NoError(t, err)
		return id
	}
	first := create()
	e := env{describer: fake}

	// Nothing recorded yet: record, delete nothing.
	l := f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(0)}, "worker-a")
	r := f.run(t, e, "adopt-stream", "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "no identity was recorded before, nothing deleted")
	got, err := f.store.StreamIdentity(ctx, stream)
	require.NoError(t, err)
	assert.True(t, first.Same(got))
	assert.Equal(t, l.Counter, f.get(t, l.Key).Counter)

	// The same stream: nothing changes.
	r = f.run(t, e, "adopt-stream", "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing changed")
	f.get(t, l.Key)

	// Re-created: the old rows go, the new stream is recorded.
	_, err = fake.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)})
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond) // creation times must differ; a real deletion takes seconds
	second := create()
	require.False(t, first.Same(second))
	r = f.run(t, e, "adopt-stream", "-stream", stream, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct {
		Changed  bool           `json:"changed"`
		Deleted  int            `json:"deleted"`
		Recorded map[string]any `json:"recorded"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	assert.True(t, res.Changed)
	assert.Equal(t, 1, res.Deleted)
	assert.Equal(t, first.ARN, res.Recorded["arn"])
	_, err = f.store.Get(ctx, l.Key)
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
	got, err = f.store.StreamIdentity(ctx, stream)
	require.NoError(t, err)
	assert.True(t, second.Same(got))

	// A missing stream is an error naming it.
	r = f.run(t, e, "adopt-stream", "-stream", "no-such-stream")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no-such-stream")
}
