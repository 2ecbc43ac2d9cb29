package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/shardlease/shardlease"
)

func init() { commands = append(commands, adoptStreamCommand) }

var adoptStreamCommand = &command{
	name:    "adopt-stream",
	summary: "after a stream was deleted and created again: drop the old rows, record the new stream",
	calls:   dynamoAndKinesis,
	usage: `
Usage: shardlease adopt-stream -table TABLE -stream STREAM [-json] [-region REGION] [-dynamodb-endpoint URL] [-kinesis-endpoint URL]

Consumers record which incarnation of a stream (its ARN and creation time)
the rows of the lease table belong to, and refuse to start when the stream
was deleted and created again under the same name: Kinesis reuses shard
ids, so the old checkpoints would skip records of the new stream or be
refused by Kinesis.

adopt-stream asks Kinesis for the stream as it is now and compares it with
the recorded one. When they differ, it deletes every row of the stream
(leases with their checkpoints, and worker rows) and records the new
stream; consumers started afterwards read its shards from the initial
position. When they are the same, it changes nothing. When none is recorded
yet, it records the stream as it is now and deletes nothing.

Stop every consumer of the stream first: the deletes are not fenced.

Example:

	shardlease adopt-stream -table orders-leases -stream orders
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (required)")
		asJSON := fs.Bool("json", false, "print the result as a JSON object")
		return func(ctx context.Context) error {
			store, err := st.streamStore(ctx, *table, *stream)
			if err != nil {
				return err
			}
			describer := st.env.describer
			if describer == nil {
				if describer, err = st.kinesisClient(ctx); err != nil {
					return err
				}
			}
			res, err := adoptStream(ctx, store, describer, *stream)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			switch {
			case res.Recorded == nil:
				fmt.Fprintf(st.stdout, "stream %s: recorded %s; no identity was recorded before, nothing deleted\n", *stream, res.Current)
			case !res.Changed:
				fmt.Fprintf(st.stdout, "stream %s: the rows belong to the stream as it is now (%s); nothing changed\n", *stream, res.Current)
			default:
				fmt.Fprintf(st.stdout, "stream %s: deleted %d lease rows of the stream created at %s; recorded %s\n", *stream, res.Deleted, res.Recorded.Created, res.Current)
			}
			return nil
		}
	},
}

// identityJSON is a stream identity as adopt-stream -json prints it.
type identityJSON struct {
	ARN     string `json:"arn"`
	Created string `json:"created"`
}

func (i identityJSON) String() string { return i.ARN + " (created " + i.Created + ")" }

func toIdentityJSON(id shardlease.StreamIdentity) identityJSON {
	return identityJSON{ARN: id.ARN, Created: id.Created.UTC().Format(time.RFC3339Nano)}
}

// adoptResult is what adopt-stream did.
type adoptResult struct {
	Stream   string        `json:"stream"`
	Recorded *identityJSON `json:"recorded"` // before; null when none was
	Current  identityJSON  `json:"current"`
	Changed  bool          `json:"changed"`
	Deleted  int           `json:"deleted"`
}

func adoptStream(ctx context.Context, store *shardlease.DynamoStore, d shardlease.StreamDescriber, stream string) (adoptResult, error) {
	now, err := shardlease.DescribeIdentity(ctx, d, stream)
	if err != nil {
		return adoptResult{}, err
	}
	res := adoptResult{Stream: stream, Current: toIdentityJSON(now)}
	had, err := store.StreamIdentity(ctx, stream)
	switch {
	case errors.Is(err, shardlease.ErrLeaseNotFound):
		_, _, err := store.RecordStreamIdentity(ctx, now)
		return res, err
	case err != nil:
		return res, err
	}
	rec := toIdentityJSON(had)
	res.Recorded = &rec
	if had.Same(now) {
		return res, nil
	}
	n, err := store.ResetStream(ctx, now)
	res.Changed, res.Deleted = err == nil, n
	return res, err
}
