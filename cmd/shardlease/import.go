package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
)

func init() { commands = append(commands, importCommand) }

// importFormats are the -format values import accepts.
var importFormats = func() []string {
	var out []string
	for _, f := range shardlease.ImportFormats() {
		out = append(out, string(f))
	}
	return out
}()

var importCommand = &command{
	name:    "import",
	summary: "copy checkpoints from a kinsumer, vmware-go-kcl-v2 or KCL table into the lease table",
	usage: `
Usage: shardlease import -format kinsumer|vmware-go-kcl-v2|kcl -from TABLE -table TABLE -stream STREAM [-force] [-json] [-region REGION] [-endpoint URL] [-kinesis-endpoint URL]

Copies the checkpoints of STREAM from another library's table into the
lease table, so that shardlease consumers resume where the old consumers
stopped. -format names the library that wrote the -from table:

	kinsumer            a kinsumer checkpoint table (<app>_checkpoints, key Shard)
	vmware-go-kcl-v2    a vmware-go-kcl-v2 table (named after the application, key ShardID)
	kcl                 a Java Kinesis Client Library lease table (key leaseKey)

Before writing anything, the rows are checked against STREAM: every shard
must be one the stream lists, and every checkpoint one Kinesis accepts for
its shard; otherwise nothing is written and the error says which rows do
not fit (the other libraries' rows do not name their stream). -force skips
rows of shards the stream no longer lists (closed and aged out of its
retention) instead. Each row written gets the shard's parents from the
stream.

Stop the old consumers, and any shardlease consumer of STREAM, first. Each
shard is reported with what was done (copied, skipped, or not in source)
and why; -from is only read.

Example:

	shardlease import -format kcl -from orders-app -table orders-leases -stream orders
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		format := fs.String("format", "", "`format` of the -from table: "+strings.Join(importFormats, " or ")+" (required)")
		from := fs.String("from", "", "`table` to import from (required)")
		table := fs.String("table", "", "name of the lease `table` to import into (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name whose checkpoints to import (required)")
		asJSON := fs.Bool("json", false, "print the report as a JSON object")
		force := fs.Bool("force", false, "skip rows of shards the stream no longer lists instead of refusing the import")
		kinesisEndpoint := fs.String("kinesis-endpoint", "", "Kinesis endpoint `URL` (for an emulator; default: the region's)")
		return func(ctx context.Context) error {
			if err := requireFlags("format", *format, "from", *from, "table", *table, "stream", *stream); err != nil {
				return err
			}
			if !slices.Contains(importFormats, *format) {
				return usagef("-format %q: use %s", *format, strings.Join(importFormats, ", "))
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
			kin, err := st.kinesis(ctx, *kinesisEndpoint)
			if err != nil {
				return err
			}
			var opts []shardlease.ImportOption
			if *force {
				opts = append(opts, shardlease.WithImportForce())
			}
			report, err := shardlease.Import(ctx, client, kin, shardlease.ImportFormat(*format), *from, store, *stream, opts...)
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
			fmt.Fprintf(st.stdout, "stream %s: %d copied, %d skipped from %s table %s to %s; %d shards of the stream not in the source\n",
				report.Stream, report.Copied, report.Skipped, report.Format, report.FromTable, report.ToTable, report.NotInSource)
			return nil
		}
	},
}

// importJSON is the report import -json prints. The field names are part of
// the command's interface: keep them.
type importJSON struct {
	Stream      string             `json:"stream"`
	Format      string             `json:"format"`
	FromTable   string             `json:"from_table"`
	ToTable     string             `json:"to_table"`
	Copied      int                `json:"copied"`
	Skipped     int                `json:"skipped"`
	NotInSource int                `json:"not_in_source"`
	Results     []importResultJSON `json:"results"`
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
		Copied: r.Copied, Skipped: r.Skipped, NotInSource: r.NotInSource, Results: make([]importResultJSON, 0, len(r.Results)),
	}
	for _, res := range r.Results {
		j.Results = append(j.Results, importResultJSON{Shard: res.Shard, Action: string(res.Action), Checkpoint: res.Checkpoint, Reason: res.Reason})
	}
	return j
}

// kinesis returns a Kinesis client built from the SDK's default
// configuration with -region applied, and endpoint if set. Call it after
// dynamo: it shares that client's transport, so that closeClient closes its
// connections too.
func (st *cli) kinesis(ctx context.Context, endpoint string) (*kinesis.Client, error) {
	var opts []func(*config.LoadOptions) error
	if st.region != "" {
		opts = append(opts, config.WithRegion(st.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if st.http != nil {
		cfg.HTTPClient = &http.Client{Transport: st.http}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1" // dynamo refused a missing region unless an endpoint is set
	}
	return kinesis.NewFromConfig(cfg, func(o *kinesis.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}
