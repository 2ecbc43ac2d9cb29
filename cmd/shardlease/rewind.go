package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardlease/shardlease"
)

func init() { commands = append(commands, rewindCommand) }

var rewindCommand = &command{
	name:    "rewind",
	summary: "move every shard of a stream to a time, to read again what arrived since",
	calls:   dynamoAndKinesis,
	usage: `
Usage: shardlease rewind -table TABLE -stream STREAM -to TIME [-dry-run] [-handover] [-json] [-region REGION] [-dynamodb-endpoint URL] [-kinesis-endpoint URL]

Moves the progress of every shard of STREAM to TIME, so that consumers read
again every record that arrived at or after it, and none before it. TIME is
an RFC 3339 time (2026-01-02T15:04:05Z) or a duration meaning that long ago
(90m). The shards are placed by their lineage, as Kinesis lists them at the
time:

	closed before TIME   marked finished (SHARD_END): their children start
	open at TIME         read from their first record at or after TIME (AT_TIMESTAMP)
	opened after TIME    read from their first record (TRIM_HORIZON)

A shard whose consumers had not reached TIME skips the records up to it.
Shards the stream no longer lists are left as they are.

While workers hold leases of the stream, nothing is changed and the error
names the held shards: stop the consumers first. With -handover the leases
are taken from the workers instead, as 'reset -force' does: their next
renewal fails with "lease lost" and they stop reading; a batch a worker was
handling may be handed to a handler again (at-least-once). A lease taken
from a worker is left held by the command, so that no two handlers run on
one shard: consumers take it as any expired lease, once it has stood still
for the worker's lease duration (10s by default), and read from TIME.

Each shard is changed with fenced writes under the owner id
shardlease-cli@HOSTNAME: acquire on the counter just read, rewind, then
release (or, taken from a worker, renew once and leave it).
-dry-run prints what the real run would do, per shard, and writes nothing:
"would be rewound", or "would be refused: held by OWNER" where workers hold
leases (without -handover). It exits as the real run would: 0, or 1 when
that run would be refused (with -json, "refused": true then, on the report
and on each held shard). Save the checkpoints first with 'shardlease
export' to be able to go back.

Example:

	shardlease rewind -table orders-leases -stream orders -to 2026-01-02T15:04:05Z -dry-run
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (required)")
		to := fs.String("to", "", "the `time` to move to: RFC 3339, or a duration ago such as 90m (required)")
		dryRun := fs.Bool("dry-run", false, "print what would change and write nothing")
		handover := fs.Bool("handover", false, "take held leases from their workers instead of refusing")
		asJSON := fs.Bool("json", false, "print the report as a JSON object")
		return func(ctx context.Context) error {
			if err := requireFlags("table", *table, "stream", *stream, "to", *to); err != nil {
				return err
			}
			if err := checkStreamName(*stream); err != nil {
				return err
			}
			at, err := parseTime(*to, time.Now())
			if err != nil {
				return err
			}
			store, err := st.store(ctx, *table)
			if err != nil {
				return err
			}
			kin, err := st.kinesisClient(ctx)
			if err != nil {
				return err
			}
			opts := []shardlease.RewindOption{shardlease.WithRewindOwner(st.env.ownerID())}
			if *dryRun {
				opts = append(opts, shardlease.WithRewindDryRun())
			}
			if *handover {
				opts = append(opts, shardlease.WithRewindHandover())
			}
			rep, err := shardlease.Rewind(ctx, store, kin, *stream, at, opts...)
			// A dry run shows what the real run would do, refusal included,
			// and exits as it would.
			refused := *dryRun && errors.Is(err, shardlease.ErrLeaseHeld)
			if rep == nil || (err != nil && !refused) {
				return err
			}
			if *asJSON {
				if perr := st.printJSON(toRewindJSON(rep, refused)); perr != nil {
					return perr
				}
			} else if perr := printRewind(st, rep, refused, *handover); perr != nil {
				return perr
			}
			if err != nil {
				return printedError{err}
			}
			return nil
		}
	},
}

// parseTime reads -to: an RFC 3339 time, or a duration before now.
func parseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("-to %q: not an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (90m)", s)
}

// printRewind prints the report as a table and a summary line. In a dry
// run the real run would refuse (refused), each held shard that would
// change says so.
func printRewind(st *cli, rep *shardlease.RewindReport, refused, handover bool) error {
	tw := tabwriter.NewWriter(st.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tACTION\tOWNER\tCHECKPOINT\tSTARTS\tCHANGE")
	held := 0
	for _, s := range rep.Shards {
		change := rewindChange(s, rep.DryRun, handover)
		if refused && s.Changed && s.Owner != "" {
			held++
			change = fmt.Sprintf("would be refused: held by %s (stop it, or use -handover)", shardlease.OwnerName(s.Owner))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Shard, s.Action, ownerOrFree(s.Owner), dash(s.Checkpoint), startText(s), change)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if refused {
		_, err := fmt.Fprintf(st.stdout, "stream %s in table %s: dry run: the rewind would be refused and write nothing, as %s held by running workers; "+
			"stop them, or pass -handover to take their leases\n", rep.Stream, rep.Table, pluralBe(held, "shard"))
		return err
	}
	verb := "rewound"
	if rep.DryRun {
		verb = "would rewind (dry run: nothing written)"
	}
	_, err := fmt.Fprintf(st.stdout, "stream %s in table %s: %s %d of %d shards to %s\n",
		rep.Stream, rep.Table, verb, rep.Changed, len(rep.Shards), rep.To.UTC().Format(time.RFC3339Nano))
	return err
}

// rewindChange says what the rewind did, or would do, with one shard.
func rewindChange(s shardlease.RewindShard, dryRun, handover bool) string {
	change := "none: at the time already"
	switch {
	case s.Action == shardlease.RewindNotListed:
		change = "none: the stream no longer lists it"
	case s.Changed && s.Created:
		change = "row created"
	case s.Changed:
		change = "rewound"
	}
	if s.Changed && dryRun {
		change = "would be " + strings.TrimPrefix(change, "row ")
		if handover && s.Owner != "" {
			change += "; taken from " + shardlease.OwnerName(s.Owner)
		}
	}
	if s.TakenFrom != "" {
		change += "; taken from " + s.TakenFrom + ", held until it has stood still for " + resumeText(s.ResumeAfter)
	}
	return change
}

// resumeText names how long a row taken from a holder stands still before
// consumers take it: the holder's lease duration, or the consumers' own.
func resumeText(d time.Duration) string {
	if d <= 0 {
		return "the consumers' lease duration"
	}
	return fmt.Sprintf("the holder's lease duration (%v)", d)
}

// pluralBe is n and noun with "is" or "are": "1 shard is", "2 shards are".
func pluralBe(n int, noun string) string {
	if n == 1 {
		return "1 " + noun + " is"
	}
	return plural(n, noun) + " are"
}

// startText is where the shard's reader starts after the rewind.
func startText(s shardlease.RewindShard) string {
	switch s.Action {
	case shardlease.RewindFinished:
		return shardlease.ShardEnd
	case shardlease.RewindNotListed:
		return "-"
	}
	return s.To.String()
}

// rewindJSON is what rewind -json prints. The field names are part of the
// command's interface: keep them.
type rewindJSON struct {
	Table   string    `json:"table"`
	Stream  string    `json:"stream"`
	To      time.Time `json:"to"`
	DryRun  bool      `json:"dry_run"`
	Changed int       `json:"changed"`
	// Refused is set by a dry run whose real run would be refused: the
	// shards with Refused are held by running workers.
	Refused bool              `json:"refused"`
	Shards  []rewindShardJSON `json:"shards"`
}

type rewindShardJSON struct {
	Shard              string   `json:"shard"`
	Parents            []string `json:"parents"`
	Action             string   `json:"action"`
	PreviousOwner      string   `json:"previous_owner"`
	PreviousCheckpoint string   `json:"previous_checkpoint"`
	Starts             string   `json:"starts"`
	Changed            bool     `json:"changed"`
	Created            bool     `json:"created"`
	TakenFrom          string   `json:"taken_from"`
	// ResumeAfterMillis is, with TakenFrom, how long the row, left held by
	// the command, stands still before a consumer takes it (0: the
	// consumers' own lease duration).
	ResumeAfterMillis int64 `json:"resume_after_ms"`
	Refused           bool  `json:"refused"`
}

func toRewindJSON(rep *shardlease.RewindReport, refused bool) rewindJSON {
	j := rewindJSON{Table: rep.Table, Stream: rep.Stream, To: rep.To.UTC(), DryRun: rep.DryRun, Changed: rep.Changed, Refused: refused, Shards: []rewindShardJSON{}}
	for _, s := range rep.Shards {
		j.Shards = append(j.Shards, rewindShardJSON{Shard: s.Shard, Parents: append([]string{}, s.Parents...), Action: string(s.Action),
			PreviousOwner: s.Owner, PreviousCheckpoint: s.Checkpoint, Starts: startText(s), Changed: s.Changed, Created: s.Created, TakenFrom: s.TakenFrom, ResumeAfterMillis: s.ResumeAfter.Milliseconds(),
			Refused: refused && s.Changed && s.Owner != ""})
	}
	return j
}
