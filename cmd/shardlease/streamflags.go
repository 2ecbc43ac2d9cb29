package main

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
)

// streamStore checks the required -table and -stream and returns the
// store of the table (see store).
func (st *cli) streamStore(ctx context.Context, table, stream string) (*shardlease.DynamoStore, error) {
	if err := requireFlags("table", table, "stream", stream); err != nil {
		return nil, err
	}
	if err := checkStreamName(stream); err != nil {
		return nil, err
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
	if err := checkStreamName(stream); err != nil {
		return nil, err
	}
	return st.kinesisClient(ctx)
}

// checkStreamName validates -stream: a usage error when it is no stream
// name, saying where the name is in an ARN given instead.
func checkStreamName(stream string) error {
	err := shardlease.ValidateStreamName(stream)
	if err == nil {
		return nil
	}
	if strings.HasPrefix(stream, "arn:") {
		name := stream[strings.LastIndex(stream, "/")+1:]
		return usagef("-stream %s: give the stream's name, not its ARN: -stream %s (the part after \"stream/\")", stream, name)
	}
	return usagef("-stream: %v", err)
}
