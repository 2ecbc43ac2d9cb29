package main

import (
	"context"
	"flag"

	"github.com/shardlease/shardlease"
)

func init() { commands = append(commands, exportCommand) }

var exportCommand = &command{
	name:    "export",
	summary: "print a stream's checkpoints as JSON, to import elsewhere or later",
	usage: `
Usage: shardlease export -table TABLE -stream STREAM [-region REGION] [-dynamodb-endpoint URL]

Prints the progress of every shard of STREAM as a JSON document (format
"shardlease-checkpoints", version 1): the stream, its identity if the table
records one, and per shard the checkpoint, sub-sequence, parents and where
a reader starts without a checkpoint. It writes nothing. A stream of which
the table holds no lease is an error (exit status 1) that names the
streams the table does hold, rather than an empty export.

Import it with 'shardlease import -format shardlease-json -from FILE' into
another lease table (of any region or account), or into the same one with
-overwrite to put the stream back to the exported state.

Example:

	shardlease export -table orders-leases -stream orders > checkpoints.json
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (required)")
		return func(ctx context.Context) error {
			store, err := st.streamStore(ctx, *table, *stream)
			if err != nil {
				return err
			}
			cps, err := shardlease.Export(ctx, store, *stream)
			if err != nil {
				return err
			}
			if len(cps.Shards) == 0 {
				return st.streamNotInTable(ctx, *table, *stream)
			}
			return st.printJSON(cps)
		}
	},
}
