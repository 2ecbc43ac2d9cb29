package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

var createStreamCommand = &command{
	name:    "create-stream",
	summary: "create a Kinesis stream on a local emulator (does nothing if it exists)",
	calls:   kinesisOnly,
	usage: `
Usage: shardlease create-stream -stream STREAM [-shards N] [-json] [-region REGION] [-kinesis-endpoint URL]

Creates the Kinesis stream STREAM with N shards on a local emulator (see
'shardlease emulators') and waits until it is active. If the stream exists
already nothing is changed. It needs an endpoint: -kinesis-endpoint, or
AWS_ENDPOINT_URL_KINESIS (or AWS_ENDPOINT_URL) in the environment; streams
on AWS cost money by the hour and are created with your usual tooling.

Example:

	shardlease create-stream -stream orders -shards 2
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		stream := fs.String("stream", "", "name of the Kinesis `stream` to create (required)")
		shards := fs.Int("shards", 1, "number of `shards`")
		asJSON := fs.Bool("json", false, `print the result as JSON: {"stream": ..., "shards": ..., "action": "created" or "exists"}`)
		return func(ctx context.Context) error {
			if err := requireFlags("stream", *stream); err != nil {
				return err
			}
			if err := checkStreamName(*stream); err != nil {
				return err
			}
			if *shards < 1 || *shards > 1000 {
				return usagef("-shards %d: use 1 to 1000", *shards)
			}
			if st.kinesisEndpoint == "" && os.Getenv("AWS_ENDPOINT_URL_KINESIS") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
				return usagef("no Kinesis endpoint: create-stream is for local emulators; pass -kinesis-endpoint or set AWS_ENDPOINT_URL_KINESIS (printed by 'shardlease emulators')")
			}
			client, err := st.kinesisClient(ctx)
			if err != nil {
				return err
			}
			action, n, err := createStream(ctx, client, *stream, int32(*shards))
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(struct {
					Stream string `json:"stream"`
					Shards int    `json:"shards"`
					Action string `json:"action"`
				}{*stream, n, action})
			}
			if action == "created" {
				fmt.Fprintf(st.stdout, "created stream %s with %d shard(s)\n", *stream, n)
			} else {
				fmt.Fprintf(st.stdout, "stream %s exists already with %d open shard(s); nothing changed\n", *stream, n)
			}
			return nil
		}
	},
}

// createStream creates stream unless it exists and waits until it is
// active. It returns "created" or "exists" and the number of open shards.
func createStream(ctx context.Context, client *kinesis.Client, stream string, shards int32) (string, int, error) {
	action := "created"
	_, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(shards)})
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		action = "exists"
	case err != nil:
		return "", 0, withCredentialsHint(fmt.Errorf("create stream %s: %w", stream, err))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		var notFound *types.ResourceNotFoundException
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return "", 0, fmt.Errorf("wait for stream %s to become active: %w", stream, err)
		case out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive:
			return action, int(aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount)), nil
		}
		select {
		case <-ctx.Done():
			return "", 0, fmt.Errorf("wait for stream %s to become active: %w", stream, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
