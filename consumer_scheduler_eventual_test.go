package shardlease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// scanKinds counts Scan pages by their consistency.
type scanKinds struct {
	shardlease.DynamoDBAPI
	consistent, eventual atomic.Int64
}

func (s *scanKinds) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if aws.ToBool(in.ConsistentRead) {
		s.consistent.Add(1)
	} else {
		s.eventual.Add(1)
	}
	return s.DynamoDBAPI.Scan(ctx, in, o...)
}

// Take rounds list the stream with an eventually consistent Scan, which
// costs half the read capacity of a consistent one; the worker still takes
// every lease.
func TestTakeRoundsListEventually(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs dynalite")
	}
	ctx := t.Context()
	client, table := dynamoTable(t)
	scans := &scanKinds{DynamoDBAPI: client}
	store, err := shardlease.NewDynamoStore(scans, table)
	require.NoError(t, err)
	kin := shardleasetest.NewKinesis()
	_, err = kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(4)})
	require.NoError(t, err)
	c, err := shardlease.NewConsumer(kin, store, "orders", nopHandler,
		shardlease.WithOwnerID("a"), shardlease.WithLeaseDuration(time.Second))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	waitFor(t, 10*time.Second, "every lease held and five eventually consistent listings", func() bool {
		return len(c.Held()) == 4 && scans.eventual.Load() >= 5
	})
	cancel()
	require.NoError(t, <-done)
	t.Logf("scans: %d eventually consistent, %d consistent", scans.eventual.Load(), scans.consistent.Load())
	assert.Greater(t, scans.eventual.Load(), scans.consistent.Load(), "most listings are eventually consistent")
}
