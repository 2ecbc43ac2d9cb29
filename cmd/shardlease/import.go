package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/shardlease/shardlease"
)

func init() { commands = append(commands, importCommand) }

// importFormats are the -format values import accepts.
var importFormats = []string{"kinsumer", "kcl"}

var importCommand = &command{
	name:    "import",
	summary: "copy checkpoints from a kinsumer or KCL table into the lease table",
	usage: `
Usage: shardlease import -format kinsumer|kcl -from TABLE -table TABLE -stream STREAM [-json] [-region REGION] [-endpoint URL]

Copies the checkpoints of STREAM from another library's table into the
lease table, so that shardlease consumers resume where the old consumers
stopped. -format names the library that wrote the -from table:

	kinsumer    a kinsumer checkpoint table
	kcl         a Kinesis Client Library lease table

Stop the old consumers first. Each shard is reported with what was done
(copied or skipped) and why; -from is only read.

Example:

	shardlease import -format kcl -from orders-app -table orders-leases -stream orders
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		format := fs.String("format", "", "`format` of the -from table: "+strings.Join(importFormats, " or ")+" (required)")
		from := fs.String("from", "", "`table` to import from (required)")
		table := fs.String("table", "", "name of the lease `table` to import into (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name whose checkpoints to import (required)")
		asJSON := fs.Bool("json", false, "print the report as a JSON object")
		return func(ctx context.Context) error {
			if err := requireFlags("format", *format, "from", *from, "table", *table, "stream", *stream); err != nil {
				return err
			}
			if !slices.Contains(importFormats, *format) {
				return usagef("-format %q: use %s", *format, strings.Join(importFormats, " or "))
			}
			if err := shardlease.ValidateTableName(*from); err != nil {
				return usagef("-from: %v", err)
			}
			if err := shardlease.ValidateStreamName(*stream); err != nil {
				return usagef("-stream: %v", err)
			}
			client, err := st.dynamo(ctx)
			if err != nil {
				return err
			}
			store, err := shardlease.NewDynamoStore(client, *table)
			if err != nil {
				return err
			}
			if err := store.CheckTable(ctx); err != nil {
				return err
			}
			report, err := shardlease.Import(ctx, client, shardlease.ImportFormat(*format), *from, store, *stream)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(toImportJSON(report))
			}
			if len(report.Results) > 0 {
				tw := tabwriter.NewWriter(st.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "SHARD\tACTION\tCHECKPOINT\tREASON")
				for _, r := range report.Results {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Shard, r.Action, dash(r.Checkpoint), dash(r.Reason))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			fmt.Fprintf(st.stdout, "stream %s: %d copied, %d skipped from %s table %s to %s\n",
				report.Stream, report.Copied, report.Skipped, report.Format, report.FromTable, report.ToTable)
			return nil
		}
	},
}

// importJSON is the report import -json prints. The field names are part of
// the command's interface: keep them.
type importJSON struct {
	Stream    string             `json:"stream"`
	Format    string             `json:"format"`
	FromTable string             `json:"from_table"`
	ToTable   string             `json:"to_table"`
	Copied    int                `json:"copied"`
	Skipped   int                `json:"skipped"`
	Results   []importResultJSON `json:"results"`
}

type importResultJSON struct {
	Shard      string `json:"shard"`
	Action     string `json:"action"`
	Checkpoint string `json:"checkpoint"`
	Reason     string `json:"reason"`
}

func toImportJSON(r *shardlease.ImportReport) importJSON {
	j := importJSON{
		Stream: r.Stream, Format: string(r.Format), FromTable: r.FromTable, ToTable: r.ToTable,
		Copied: r.Copied, Skipped: r.Skipped, Results: make([]importResultJSON, 0, len(r.Results)),
	}
	for _, res := range r.Results {
		j.Results = append(j.Results, importResultJSON{Shard: res.Shard, Action: res.Action, Checkpoint: res.Checkpoint, Reason: res.Reason})
	}
	return j
}
