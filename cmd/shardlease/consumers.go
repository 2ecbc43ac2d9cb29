package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

var consumersCommand = &command{
	name:    "consumers",
	summary: "list a stream's registered enhanced fan-out consumers",
	calls:   kinesisOnly,
	usage: `
Usage: shardlease consumers -stream STREAM [-json] [-region REGION] [-kinesis-endpoint URL]

Lists the stream consumers registered on STREAM (enhanced fan-out, see
WithEnhancedFanOut): name, status, when registered, ARN. Each one is billed
by the hour for every shard of the stream, read or not; remove one that is
no longer used with 'shardlease deregister-consumer'.

Example:

	shardlease consumers -stream orders
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		stream := fs.String("stream", "", "name of the Kinesis `stream` (required)")
		asJSON := fs.Bool("json", false, `print the consumers as JSON: [{"name": ..., "status": ..., "created": ..., "arn": ...}]`)
		return func(ctx context.Context) error {
			client, err := st.streamKinesis(ctx, *stream)
			if err != nil {
				return err
			}
			cs, err := listConsumers(ctx, client, *stream)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(cs)
			}
			if len(cs) == 0 {
				fmt.Fprintf(st.stdout, "stream %s has no registered consumers\n", *stream)
				return nil
			}
			tw := tabwriter.NewWriter(st.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tREGISTERED\tARN")
			for _, c := range cs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.Status, c.Created.Format(time.RFC3339), c.ARN)
			}
			return tw.Flush()
		}
	},
}

var deregisterConsumerCommand = &command{
	name:    "deregister-consumer",
	summary: "deregister a stream's enhanced fan-out consumer",
	calls:   kinesisOnly,
	usage: `
Usage: shardlease deregister-consumer -stream STREAM -name NAME [-json] [-region REGION] [-kinesis-endpoint URL]

Deregisters the stream consumer NAME of STREAM, which ends its charges. Its
open subscriptions end; a consumer still running with
WithEnhancedFanOut(NAME) registers it again when it next starts, so stop or
reconfigure those first. The lease table is not touched: checkpoints stay,
and polling consumers go on from them.

Example:

	shardlease deregister-consumer -stream orders -name orders-app
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		stream := fs.String("stream", "", "name of the Kinesis `stream` (required)")
		name := fs.String("name", "", "`name` of the consumer to deregister (required; 'shardlease consumers' lists them)")
		asJSON := fs.Bool("json", false, `print the result as JSON: {"stream": ..., "name": ..., "arn": ..., "action": "deregistered"}`)
		return func(ctx context.Context) error {
			client, err := st.streamKinesis(ctx, *stream, "name", *name)
			if err != nil {
				return err
			}
			arn, err := streamARN(ctx, client, *stream)
			if err != nil {
				return err
			}
			d, err := client.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: aws.String(arn), ConsumerName: aws.String(*name)})
			var notFound *types.ResourceNotFoundException
			if errors.As(err, &notFound) {
				return fmt.Errorf("stream %s has no consumer %s ('shardlease consumers -stream %s' lists them): %w", *stream, *name, *stream, err)
			}
			if err != nil {
				return withCredentialsHint(fmt.Errorf("describe consumer %s of stream %s: %w", *name, *stream, err))
			}
			consumerARN := aws.ToString(d.ConsumerDescription.ConsumerARN)
			if _, err := client.DeregisterStreamConsumer(ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: aws.String(consumerARN)}); err != nil {
				return fmt.Errorf("deregister consumer %s of stream %s: %w", *name, *stream, err)
			}
			if *asJSON {
				return st.printJSON(struct {
					Stream string `json:"stream"`
					Name   string `json:"name"`
					ARN    string `json:"arn"`
					Action string `json:"action"`
				}{*stream, *name, consumerARN, "deregistered"})
			}
			fmt.Fprintf(st.stdout, "deregistered consumer %s of stream %s (%s)\n", *name, *stream, consumerARN)
			return nil
		}
	},
}

// streamConsumer is one registered consumer as the consumers command prints
// it.
type streamConsumer struct {
	Name    string    `json:"name"`
	Status  string    `json:"status"`
	Created time.Time `json:"created"`
	ARN     string    `json:"arn"`
}

func streamARN(ctx context.Context, client *kinesis.Client, stream string) (string, error) {
	out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return "", fmt.Errorf("stream %s not found: check -stream, the region and the account: %w", stream, err)
	}
	if err != nil {
		return "", withCredentialsHint(fmt.Errorf("describe stream %s: %w", stream, err))
	}
	return aws.ToString(out.StreamDescriptionSummary.StreamARN), nil
}

// listConsumers lists every consumer of stream, all pages.
func listConsumers(ctx context.Context, client *kinesis.Client, stream string) ([]streamConsumer, error) {
	arn, err := streamARN(ctx, client, stream)
	if err != nil {
		return nil, err
	}
	out := []streamConsumer{}
	in := &kinesis.ListStreamConsumersInput{StreamARN: aws.String(arn)}
	for {
		page, err := client.ListStreamConsumers(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list the consumers of stream %s: %w", stream, err)
		}
		for _, c := range page.Consumers {
			out = append(out, streamConsumer{Name: aws.ToString(c.ConsumerName), Status: string(c.ConsumerStatus), Created: aws.ToTime(c.ConsumerCreationTimestamp), ARN: aws.ToString(c.ConsumerARN)})
		}
		if page.NextToken == nil {
			return out, nil
		}
		in = &kinesis.ListStreamConsumersInput{StreamARN: aws.String(arn), NextToken: page.NextToken}
	}
}
