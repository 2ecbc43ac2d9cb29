package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

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
	summary: "copy checkpoints from a kinsumer, vmware-go-kcl-v2 or KCL table, or an export, into the lease table",
	calls:   dynamoAndKinesis,
	usage: `
Usage: shardlease import -format kinsumer|vmware-go-kcl-v2|kcl -from TABLE -table TABLE -stream STREAM [-force] [-json] [-region REGION] [-dynamodb-endpoint URL] [-kinesis-endpoint URL]
       shardlease import -format shardlease-json -from FILE -table TABLE [-stream STREAM] [-overwrite] [-force] [-json] [-region REGION] [-dynamodb-endpoint URL] [-kinesis-endpoint URL]

Copies the checkpoints of STREAM from another library's table into the
lease table, so that shardlease consumers resume where the old consumers
stopped. -format names the library that wrote the -from table:

	kinsumer            a kinsumer checkpoint table (<app>_checkpoints, key Shard)
	vmware-go-kcl-v2    a vmware-go-kcl-v2 table (named after the application, key ShardID)
	kcl                 a Java Kinesis Client Library lease table (key leaseKey)
	shardlease-json     a FILE written by 'shardlease export' ("-" reads standard
	                    input); it names its stream, so -stream is optional

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

Progress already in the lease table is kept: such shards are skipped. With
-format shardlease-json, -overwrite puts every shard of the export back to
its exported progress instead, whatever the table holds (the way back to
an earlier state; the records after it are read again). It refuses, with
nothing written, while workers hold leases of the stream.

Example:

	shardlease import -format kcl -from orders-app -table orders-leases -stream orders
	shardlease import -format shardlease-json -from checkpoints.json -table orders-leases-eu
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		format := fs.String("format", "", "`format` of the -from table: "+strings.Join(importFormats, " or ")+", or "+string(shardlease.ImportShardleaseJSON)+" for an export file (required)")
		from := fs.String("from", "", "`table` (or, with -format "+string(shardlease.ImportShardleaseJSON)+", export file) to import from (required)")
		table := fs.String("table", "", "name of the lease `table` to import into (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name whose checkpoints to import (required, except with an export, which names it)")
		asJSON := fs.Bool("json", false, "print the report as a JSON object")
		force := fs.Bool("force", false, "skip rows of shards the stream no longer lists instead of refusing the import")
		overwrite := fs.Bool("overwrite", false, "with -format shardlease-json: put each shard back to the exported progress, whatever the table holds")
		return func(ctx context.Context) error {
			if *format == string(shardlease.ImportShardleaseJSON) {
				return st.importExport(ctx, *from, *table, *stream, *force, *overwrite, *asJSON)
			}
			if err := requireFlags("format", *format, "from", *from, "table", *table, "stream", *stream); err != nil {
				return err
			}
			if !slices.Contains(importFormats, *format) {
				return usagef("-format %q: use %s, %s", *format, strings.Join(importFormats, ", "), shardlease.ImportShardleaseJSON)
			}
			if *overwrite {
				return usagef("-overwrite: only with -format %s; an import from another library's table never overwrites progress", shardlease.ImportShardleaseJSON)
			}
			if err := shardlease.ValidateTableName(*from); err != nil {
				return usagef("-from: %v", err)
			}
			if err := checkStreamName(*stream); err != nil {
				return err
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
			kin, err := st.kinesisClient(ctx)
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
			return st.printImport(report, *asJSON)
		}
	},
}

// printImport prints an import's report: as JSON, or as a table and a
// summary line.
func (st *cli) printImport(report *shardlease.ImportReport, asJSON bool) error {
	if asJSON {
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

// importExport runs import -format shardlease-json: it reads the export
// in file ("-" for standard input) and imports it into table.
func (st *cli) importExport(ctx context.Context, file, table, stream string, force, overwrite, asJSON bool) error {
	if err := requireFlags("from", file, "table", table); err != nil {
		return err
	}
	cps, err := readExport(file)
	if err != nil {
		return err
	}
	if stream != "" && stream != cps.Stream {
		return usagef("-stream %s: the export in %s is of stream %s; leave -stream out or name that stream", stream, file, cps.Stream)
	}
	store, err := st.store(ctx, table)
	if err != nil {
		return err
	}
	kin, err := st.kinesisClient(ctx)
	if err != nil {
		return err
	}
	var opts []shardlease.ImportOption
	if force {
		opts = append(opts, shardlease.WithImportForce())
	}
	if overwrite {
		opts = append(opts, shardlease.WithImportOverwrite())
	}
	report, err := shardlease.ImportCheckpoints(ctx, kin, cps, store, opts...)
	if err != nil {
		return fmt.Errorf("import %s: %w", file, err)
	}
	return st.printImport(report, asJSON)
}

// readExport reads the export in file, or standard input for "-".
func readExport(file string) (*shardlease.Checkpoints, error) {
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("read the export: %w; write one with 'shardlease export -table TABLE -stream STREAM > FILE'", err)
		}
		defer f.Close()
		in = f
	}
	cps, err := shardlease.ReadCheckpoints(in)
	if err != nil {
		return nil, fmt.Errorf("read the export %s: %w", file, err)
	}
	return cps, nil
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
