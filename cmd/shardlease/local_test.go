package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/internal/emulator"
)

// create-stream is for local endpoints: without one it refuses before any
// call, and says what to set.
func TestCreateStreamNeedsALocalEndpoint(t *testing.T) {
	awsEnv(t)
	unsetenv(t, "AWS_ENDPOINT_URL_KINESIS")
	r := runCLI(t, env{}, "create-stream", "-stream", "orders")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "shardlease create-stream: no Kinesis endpoint: create-stream is for local emulators; pass -kinesis-endpoint or set AWS_ENDPOINT_URL_KINESIS")
}

func TestCreateStreamAndPut(t *testing.T) {
	awsEnv(t)
	endpoint := emulator.KinesisEndpoint(t)
	stream := emulator.UniqueName("cli-stream")

	r := runCLI(t, env{}, "create-stream", "-kinesis-endpoint", endpoint, "-stream", stream, "-shards", "2", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `{"stream":"`+stream+`","shards":2,"action":"created"}`, r.stdout)
	r = runCLI(t, env{}, "create-stream", "-kinesis-endpoint", endpoint, "-stream", stream, "-shards", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "stream "+stream+" exists already with 2 open shard(s); nothing changed\n", r.stdout)

	// The endpoint from the environment, as the README's local path sets it.
	t.Setenv("AWS_ENDPOINT_URL_KINESIS", endpoint)
	r = runCLI(t, env{}, "put", "-stream", stream, "-count", "7")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "wrote 7 record(s) to stream "+stream+"\n", r.stdout)

	// Every record is in the stream, with its key and data.
	ctx := t.Context()
	kc := emulator.Kinesis(t)
	got := map[string]string{}
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	require.NoError(t, err)
	for _, s := range shards.Shards {
		it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		require.NoError(t, err)
		out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
		require.NoError(t, err)
		for _, rec := range out.Records {
			got[aws.ToString(rec.PartitionKey)] = string(rec.Data)
		}
	}
	want := map[string]string{}
	for i := 1; i <= 7; i++ {
		want["key-"+strconv.Itoa(i)] = "record " + strconv.Itoa(i)
	}
	assert.Equal(t, want, got)

	r = runCLI(t, env{}, "put", "-stream", "no-such-stream", "-json")
	assert.Equal(t, 1, r.code)
	var e jsonError
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r.stdout)
	assert.Contains(t, e.Error, "no-such-stream")
}

// A port in use is named, with the flag that changes it.
func TestEmulatorsPortInUse(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the emulators (Node.js)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	root := moduleRoot(t)
	r := runCLI(t, env{}, "emulators", "-dynamodb-port", strconv.Itoa(port), "-kinesis-port", "0", "-dir", filepath.Join(root, ".emulators"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "dynalite cannot listen on 127.0.0.1:"+strconv.Itoa(port)+": another process listens there")
	assert.Contains(t, r.stderr, "pass -dynamodb-port with another port")
	assert.Empty(t, r.stdout, "no environment printed for emulators that did not start")

	r = runCLI(t, env{}, "emulators", "-dynamodb-port", "4567", "-kinesis-port", "4567")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "the two emulators need two ports")
}

// With no credentials anywhere, a command says what to set instead of
// passing on the SDK's text alone.
func TestNoCredentials(t *testing.T) {
	awsEnv(t)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		unsetenv(t, k)
	}
	for _, args := range [][]string{
		{"list", "-table", "orders-leases", "-stream", "orders", "-dynamodb-endpoint", "http://127.0.0.1:1"},
		{"put", "-stream", "orders", "-kinesis-endpoint", "http://127.0.0.1:1"},
	} {
		r := runCLI(t, env{}, args...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stderr, "no AWS credentials were found: on AWS, set AWS_PROFILE", args)
		assert.Contains(t, r.stderr, "AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local", args)
	}
}

// consumers lists a stream's registered consumers and deregister-consumer
// removes one, on kinesis-local (behind the fan-out shim, which passes
// these calls through).
func TestConsumers(t *testing.T) {
	t.Parallel()
	shim := emulator.FanOut(t)
	kc := shim.Client()
	stream := emulator.UniqueName("cli-consumers")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 1))

	r := runCLI(t, env{}, "consumers", "-kinesis-endpoint", shim.Endpoint, "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "stream "+stream+" has no registered consumers\n", r.stdout)

	sum, err := kc.DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	require.NoError(t, err)
	for _, name := range []string{"orders-app", "audit"} {
		_, err := kc.RegisterStreamConsumer(t.Context(), &kinesis.RegisterStreamConsumerInput{StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String(name)})
		require.NoError(t, err)
	}
	var listed []struct{ Name, Status, ARN string }
	r = runCLI(t, env{}, "consumers", "-kinesis-endpoint", shim.Endpoint, "-stream", stream, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	names := []string{}
	for _, c := range listed {
		names = append(names, c.Name)
		assert.Contains(t, c.ARN, "/consumer/"+c.Name+":")
	}
	assert.ElementsMatch(t, []string{"orders-app", "audit"}, names)
	r = runCLI(t, env{}, "consumers", "-kinesis-endpoint", shim.Endpoint, "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "NAME")
	assert.Contains(t, r.stdout, "orders-app")

	r = runCLI(t, env{}, "deregister-consumer", "-kinesis-endpoint", shim.Endpoint, "-stream", stream, "-name", "audit")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "deregistered consumer audit of stream "+stream)
	// Deregistering takes a moment on the emulator, as on the service.
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := kc.ListStreamConsumers(t.Context(), &kinesis.ListStreamConsumersInput{StreamARN: sum.StreamDescriptionSummary.StreamARN})
		require.NoError(t, err)
		if len(out.Consumers) == 1 {
			assert.Equal(t, "orders-app", aws.ToString(out.Consumers[0].ConsumerName))
			break
		}
		require.True(t, time.Now().Before(deadline), "audit still listed: %v", out.Consumers)
		time.Sleep(20 * time.Millisecond)
	}

	r = runCLI(t, env{}, "deregister-consumer", "-kinesis-endpoint", shim.Endpoint, "-stream", stream, "-name", "nobody")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "stream "+stream+" has no consumer nobody ('shardlease consumers -stream "+stream+"' lists them)")
	r = runCLI(t, env{}, "deregister-consumer", "-kinesis-endpoint", shim.Endpoint, "-stream", stream)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "missing -name")
}
