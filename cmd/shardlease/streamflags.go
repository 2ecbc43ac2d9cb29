package main

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
)

// streamStore checks the required -table and -stream and returns the
// store of the table (see store).
func (st *cli) streamStore(ctx context.Context, table, stream string) (*shardlease.DynamoStore, error) {
	if err := requireFlags("table", table, "stream", stream); err != nil {
		return nil, err
	}
	if err := shardlease.ValidateStreamName(stream); err != nil {
		return nil, usagef("-stream: %v", err)
	}
	return st.store(ctx, table)
}

// streamKinesis checks the required -stream, and the further required
// flags given as name and value pairs as requireFlags takes them, and
// returns a Kinesis client (see kinesisClient).
func (st *cli) streamKinesis(ctx context.Context, stream string, required ...string) (*kinesis.Client, error) {
	if err := requireFlags(append([]string{"stream", stream}, required...)...); err != nil {
		return nil, err
	}
	if err := shardlease.ValidateStreamName(stream); err != nil {
		return nil, usagef("-stream: %v", err)
	}
	return st.kinesisClient(ctx)
}
