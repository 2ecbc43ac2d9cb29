package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

var putCommand = &command{
	name:    "put",
	summary: "write test records to a Kinesis stream",
	calls:   kinesisOnly,
	usage: `
Usage: shardlease put -stream STREAM [-data TEXT] [-count N] [-json] [-region REGION] [-kinesis-endpoint URL]

Writes N records to STREAM, one PutRecords call per 500. Record i (from 1)
has the partition key "key-i" and the data TEXT, or "record i" without
-data. Meant for trying a consumer on local emulators.

Example:

	shardlease put -stream orders -count 10
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		stream := fs.String("stream", "", "Kinesis `stream` to write to (required)")
		data := fs.String("data", "", "the `text` of every record (default: \"record i\")")
		count := fs.Int("count", 1, "how many `records` to write")
		asJSON := fs.Bool("json", false, `print the result as JSON: {"stream": ..., "records": ...}`)
		return func(ctx context.Context) error {
			if err := requireFlags("stream", *stream); err != nil {
				return err
			}
			if err := checkStreamName(*stream); err != nil {
				return err
			}
			if *count < 1 {
				return usagef("-count %d: write at least 1 record", *count)
			}
			client, err := st.kinesisClient(ctx)
			if err != nil {
				return err
			}
			for start := 1; start <= *count; start += 500 {
				var entries []kinesisPut
				for i := start; i <= *count && i < start+500; i++ {
					text := *data
					if text == "" {
						text = "record " + strconv.Itoa(i)
					}
					entries = append(entries, kinesisPut{key: "key-" + strconv.Itoa(i), data: text})
				}
				if err := putRecords(ctx, client, *stream, entries); err != nil {
					return err
				}
			}
			if *asJSON {
				return st.printJSON(struct {
					Stream  string `json:"stream"`
					Records int    `json:"records"`
				}{*stream, *count})
			}
			fmt.Fprintf(st.stdout, "wrote %d record(s) to stream %s\n", *count, *stream)
			return nil
		}
	},
}

type kinesisPut struct{ key, data string }

func kinesisRecord(e kinesisPut) types.PutRecordsRequestEntry {
	return types.PutRecordsRequestEntry{PartitionKey: aws.String(e.key), Data: []byte(e.data)}
}

// putRecords writes entries, sending again the ones Kinesis refused
// (throttling) a few times.
func putRecords(ctx context.Context, client *kinesis.Client, stream string, entries []kinesisPut) error {
	for attempt := 1; len(entries) > 0; attempt++ {
		in := &kinesis.PutRecordsInput{StreamName: aws.String(stream)}
		for _, e := range entries {
			in.Records = append(in.Records, kinesisRecord(e))
		}
		out, err := client.PutRecords(ctx, in)
		if err != nil {
			return withCredentialsHint(fmt.Errorf("put records to stream %s: %w", stream, err))
		}
		var again []kinesisPut
		var last string
		for i, r := range out.Records {
			if r.ErrorCode != nil {
				again = append(again, entries[i])
				last = aws.ToString(r.ErrorCode) + ": " + aws.ToString(r.ErrorMessage)
			}
		}
		if len(again) > 0 && attempt == 5 {
			return fmt.Errorf("put records to stream %s: %d record(s) refused 5 times, the last with %s", stream, len(again), last)
		}
		entries = again
	}
	return nil
}
