package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
)

var listCommand = &command{
	name:    "list",
	summary: "show every lease of a stream, or of every stream: owner, counter, checkpoint, ...",
	usage: `
Usage: shardlease list -table TABLE [-stream STREAM] [-json] [-watch [-every 5s]] [-region REGION] [-dynamodb-endpoint URL]

Lists every lease of STREAM in the lease table, ordered by shard id:

	SHARD       the shard id
	OWNER       the holder's owner id, or "free"
	COUNTER     the fencing counter; every write bumps it, so a counter that
	            keeps moving means a live holder
	CHECKPOINT  the last processed sequence number ("/N" adds the sub-sequence
	            number inside an aggregated record), SHARD_END once the shard
	            was read to its end, or "-" when nothing was processed yet
	PARENTS     the shards this one was split or merged from
	HANDOFF     the owner the holder was asked to hand the lease to, or "-"
	EXPIRY      when the holder thinks its lease runs out, by the holder's own
	            clock: for information only, never trusted (clocks skew)

A line below the table names the worker coordinating the stream (the holder
of the first readable lease: the lowest shard id not finished whose parents
are) and its deputy, the worker named to watch it. Another names the finished shards (SHARD_END) whose rows
wait for cleanup: a consumer deletes such a row once Kinesis no longer lists
the shard (its records aged out of the stream's retention) and every child
has a checkpoint of its own; children still waiting to start are named. A
last line names the workers that hold no lease but keep a worker row
(running, or stopped within a lease duration), with their row's counter.

A stream of which the table holds neither a lease nor a worker row is an
error (exit status 1) that names the streams the table does hold.

Without -stream it lists the leases of every stream in the table (a group
of consumers reading several streams keeps them in one table) as one table
with a STREAM column first, ordered by stream and then shard id. Below it a
line for each stream gives its number of leases, how many are held and
their owners, and a last line the totals: streams, leases, held, owners.
The lines about coordination, cleanup and idle workers need -stream.

With -json it prints an array of objects with the fields stream, shard,
lease_key, owner ("" when free), held, counter, checkpoint ("" when none),
sub_sequence (null unless inside an aggregated record), parents,
handoff_to ("" when none), note (what the coordinating worker last asked of
the holder: "wake N", "deputy SHARD N" or "lead N"; "" when none), holder_expiry (RFC 3339, null when not set),
start (where a reader starts while there is no checkpoint: TRIM_HORIZON,
LATEST or "AT_TIMESTAMP <RFC 3339>"; "" when the row does not say) and
waiting_for_cleanup (true for a finished shard's row), and, when the row
carries the holder's lag, behind_latest_ms and checkpoint_age_ms.

With -watch it lists again every -every (5s) until interrupted, clearing a
terminal first, and shows each held shard's lag instead of parents and
expiry, as its holder's last renewal or checkpoint wrote it on the row (at
most a renew interval old):

	BEHIND          how far the holder's reader is behind the tip of the
	                shard (MillisBehindLatest)
	CHECKPOINT AGE  how long the checkpoint has waited while records were
	                behind it: a stuck handler shows here; 0s when the
	                shard is caught up and idle

"-" means the row carries no lag: the lease is free, or its holder has not
read yet (or runs a release that does not write it). With -json it prints
one JSON array a line, each a listing. Each redraw is one Scan of the table
(without -stream two: one of the keys finds the streams); it makes no
Kinesis call.

Example:

	shardlease list -table orders-leases -stream orders
	shardlease list -table orders-leases -stream orders -watch -every 2s
	shardlease list -table orders-leases
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name whose leases to list (default: every stream in the table)")
		asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
		watch := fs.Bool("watch", false, "redraw the table every -every until interrupted, with each shard's lag and checkpoint age")
		every := fs.Duration("every", 5*time.Second, "how often -watch redraws (at least 1s)")
		return func(ctx context.Context) error {
			l, err := st.newLister(ctx, *table, *stream, *asJSON)
			if err != nil {
				return err
			}
			if !*watch {
				return l.once(ctx, false)
			}
			if *every < time.Second {
				return usagef("-every %v: redraw at most once a second (each redraw scans the stream's rows)", *every)
			}
			return l.watch(ctx, *every)
		}
	},
}

// lister prints one stream's leases, or every stream's when stream is "".
type lister struct {
	st            *cli
	store         *shardlease.DynamoStore
	client        scanner // the store's client, for finding the streams
	table, stream string
	asJSON        bool
}

// newLister checks -table and -stream (optional) and returns a lister of
// the stream, or of every stream when stream is "".
func (st *cli) newLister(ctx context.Context, table, stream string, asJSON bool) (lister, error) {
	l := lister{st: st, table: table, stream: stream, asJSON: asJSON}
	var err error
	if stream != "" {
		l.store, err = st.streamStore(ctx, table, stream)
	} else {
		l.store, l.client, err = st.tableStore(ctx, table)
	}
	return l, err
}

// tableStore checks the required -table and returns the store of the
// table (see store) and the client under it.
func (st *cli) tableStore(ctx context.Context, table string) (*shardlease.DynamoStore, *dynamodb.Client, error) {
	if err := requireFlags("table", table); err != nil {
		return nil, nil, err
	}
	client, err := st.dynamo(ctx)
	if err != nil {
		return nil, nil, err
	}
	store, err := shardlease.NewDynamoStore(client, table)
	if err != nil {
		return nil, nil, err
	}
	if err := store.CheckTable(ctx); err != nil {
		return nil, nil, err
	}
	return store, client, nil
}

// once lists the leases once: as a table (with each shard's lag when lag is
// set), or as JSON.
func (l lister) once(ctx context.Context, lag bool) error {
	if l.stream == "" {
		return l.onceAll(ctx, lag)
	}
	st := l.st
	leases, workers, err := l.readStream(ctx)
	if err != nil {
		return err
	}
	if l.asJSON {
		return l.printJSON(leases, lag)
	}
	idle := make([]string, 0, len(workers))
	for _, w := range workers {
		idle = append(idle, fmt.Sprintf("%s (counter %d)", w.Owner, w.Counter))
	}
	if len(leases) == 0 {
		fmt.Fprintf(st.stdout, "no leases of stream %s in table %s yet: its workers (below) create them when they first sync the stream's shards\n", l.stream, l.table)
		fmt.Fprintf(st.stdout, "workers holding no lease: %s\n", strings.Join(idle, ", "))
		return nil
	}
	if err := leaseTable(st.stdout, leases, lag, false); err != nil {
		return err
	}
	if roles := rolesText(leases); roles != "" {
		fmt.Fprintln(st.stdout, roles)
	}
	if nobody := unheldText(leases, time.Now()); nobody != "" {
		fmt.Fprintln(st.stdout, nobody)
	}
	if waiting := cleanupText(leases); waiting != "" {
		fmt.Fprintf(st.stdout, "finished, waiting for cleanup: %s\n", waiting)
	}
	if len(idle) > 0 {
		fmt.Fprintf(st.stdout, "workers holding no lease: %s\n", strings.Join(idle, ", "))
	}
	return nil
}

// readStream reads the leases and worker rows of l.stream, and fails
// when the table holds neither (see streamNotInTable).
func (l lister) readStream(ctx context.Context) ([]shardlease.Lease, []shardlease.Worker, error) {
	leases, workers, err := l.store.ListWithWorkers(ctx, l.stream)
	if err != nil {
		return nil, nil, err
	}
	if len(leases) == 0 && len(workers) == 0 {
		return nil, nil, l.st.streamNotInTable(ctx, l.table, l.stream)
	}
	return leases, workers, nil
}

// readAll reads the leases of every stream in the table, ordered by
// stream and shard: one Scan of the keys finds the streams, one more reads
// their rows.
func (l lister) readAll(ctx context.Context) ([]shardlease.Lease, error) {
	streams, err := tableStreams(ctx, l.client, l.table)
	if err != nil || len(streams) == 0 {
		return nil, err
	}
	// The worker rows of one stream come along; they are not shown.
	leases, _, err := l.store.ListStreams(ctx, streams, streams[0], true)
	return leases, err
}

// printJSON prints the leases as a JSON array: indented, or with lag on
// one line, as one frame of a stream of them.
func (l lister) printJSON(leases []shardlease.Lease, lag bool) error {
	rows := make([]leaseJSON, 0, len(leases))
	for _, l := range leases {
		rows = append(rows, toLeaseJSON(l))
	}
	if lag {
		return json.NewEncoder(l.st.stdout).Encode(rows)
	}
	return l.st.printJSON(rows)
}

// onceAll lists the leases of every stream in the table once (see
// readAll).
func (l lister) onceAll(ctx context.Context, lag bool) error {
	st := l.st
	leases, err := l.readAll(ctx)
	if err != nil {
		return err
	}
	if l.asJSON {
		return l.printJSON(leases, lag)
	}
	if len(leases) == 0 {
		fmt.Fprintf(st.stdout, "no leases in table %s (check -table and -region; a consumer creates a stream's leases when it first syncs its shards)\n", l.table)
		return nil
	}
	if err := leaseTable(st.stdout, leases, lag, true); err != nil {
		return err
	}
	fmt.Fprint(st.stdout, summaryText(leases))
	return nil
}

// summaryText is a line for each stream of leases (ordered by stream)
// with its leases, how many are held and by whom, and a last line with
// the totals.
func summaryText(leases []shardlease.Lease) string {
	now := time.Now()
	var b strings.Builder
	owners := map[string]bool{}
	streams, held := 0, 0
	for i := 0; i < len(leases); {
		stream := leases[i].Key.Stream
		var n, h int
		var own []string
		for ; i < len(leases) && leases[i].Key.Stream == stream; i++ {
			n++
			if o := leases[i].Owner; o != "" {
				h++
				owners[o] = true
				if !slices.Contains(own, o) {
					own = append(own, o)
				}
			}
		}
		slices.Sort(own)
		streams, held = streams+1, held+h
		fmt.Fprintf(&b, "stream %s: %s, %d held, owners: %s\n", stream, plural(n, "lease"), h, dash(strings.Join(own, ", ")))
		if nobody := unheldText(leases[i-n:i], now); nobody != "" {
			fmt.Fprintln(&b, "  "+nobody)
		}
	}
	fmt.Fprintf(&b, "%s, %s, %d held, %s\n", plural(streams, "stream"), plural(len(leases), "lease"), held, plural(len(owners), "owner"))
	return b.String()
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// leaseTable prints the leases as a table, with a STREAM column first when
// withStream is set; with lag, each held shard's lag as its holder's last
// write reported it instead of parents and expiry.
func leaseTable(out io.Writer, leases []shardlease.Lease, lag, withStream bool) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if withStream {
		fmt.Fprint(tw, "STREAM\t")
	}
	if lag {
		fmt.Fprintln(tw, "SHARD\tOWNER\tCOUNTER\tCHECKPOINT\tBEHIND\tCHECKPOINT AGE\tHANDOFF")
	} else {
		fmt.Fprintln(tw, "SHARD\tOWNER\tCOUNTER\tCHECKPOINT\tPARENTS\tHANDOFF\tEXPIRY (HOLDER'S CLOCK)")
	}
	for _, l := range leases {
		if withStream {
			fmt.Fprintf(tw, "%s\t", l.Key.Stream)
		}
		if lag {
			behind, age := lagText(l)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
				l.Key.Shard, ownerOrFree(l.Owner), l.Counter, checkpointText(l), behind, age, dash(l.HandoffTo))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			l.Key.Shard, ownerOrFree(l.Owner), l.Counter, checkpointText(l),
			dash(strings.Join(l.Parents, ",")), dash(l.HandoffTo), expiryText(l.Expiry))
	}
	return tw.Flush()
}

// lagText is a lease's behind-latest and checkpoint age, "-" each when the
// row carries no lag (free, or its holder has not read yet).
func lagText(l shardlease.Lease) (behind, age string) {
	if l.Lag == nil || l.Owner == "" {
		return "-", "-"
	}
	return l.Lag.BehindLatest.Round(time.Millisecond).String(), l.Lag.CheckpointAge.Round(time.Second).String()
}

// clearScreen moves a terminal's cursor home and clears it.
const clearScreen = "\x1b[H\x1b[2J"

// watch lists the leases every interval until ctx ends: on a terminal it
// clears the screen before each table; elsewhere tables follow each other
// after a blank line. A listing that fails is shown and tried again.
func (l lister) watch(ctx context.Context, every time.Duration) error {
	st := l.st
	tick := time.NewTicker(every)
	defer tick.Stop()
	term := isTerminal(st.stdout)
	for frame := 0; ; frame++ {
		switch {
		case l.asJSON:
		case term:
			fmt.Fprint(st.stdout, clearScreen)
		case frame > 0:
			fmt.Fprintln(st.stdout)
		}
		switch {
		case l.asJSON:
		case l.stream == "":
			fmt.Fprintf(st.stdout, "every stream, table %s, at %s; every %v (Ctrl-C stops). Lag as each holder last wrote it, at most a renew interval old\n",
				l.table, time.Now().UTC().Format(time.RFC3339), every)
		default:
			fmt.Fprintf(st.stdout, "stream %s, table %s, at %s; every %v (Ctrl-C stops). Lag as each holder last wrote it, at most a renew interval old\n",
				l.stream, l.table, time.Now().UTC().Format(time.RFC3339), every)
		}
		if err := l.once(ctx, true); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if frame == 0 && errors.Is(err, errStreamNotInTable) {
				return err
			}
			fmt.Fprintf(st.stderr, "listing failed; trying again in %v: %v\n", every, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// isTerminal reports whether w is a character device, a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// leaseJSON is a lease as list -json prints it. The field names are part of
// the command's interface: keep them.
type leaseJSON struct {
	Stream       string   `json:"stream"`
	Shard        string   `json:"shard"`
	LeaseKey     string   `json:"lease_key"`
	Owner        string   `json:"owner"`
	Held         bool     `json:"held"`
	Counter      int64    `json:"counter"`
	Checkpoint   string   `json:"checkpoint"`
	SubSequence  *int64   `json:"sub_sequence"`
	Parents      []string `json:"parents"`
	HandoffTo    string   `json:"handoff_to"`
	Note         string   `json:"note"`
	HolderExpiry *string  `json:"holder_expiry"`
	Start        string   `json:"start"`
	Waiting      bool     `json:"waiting_for_cleanup"`
	BehindMs     *int64   `json:"behind_latest_ms,omitempty"`
	AgeMs        *int64   `json:"checkpoint_age_ms,omitempty"`
}

func toLeaseJSON(l shardlease.Lease) leaseJSON {
	j := leaseJSON{
		Stream:     l.Key.Stream,
		Shard:      l.Key.Shard,
		LeaseKey:   l.Key.String(),
		Owner:      l.Owner,
		Held:       l.Held(),
		Counter:    l.Counter,
		Checkpoint: l.Checkpoint,
		Parents:    l.Parents,
		HandoffTo:  l.HandoffTo,
		Note:       l.Note,
		Start:      l.Start.String(),
		Waiting:    l.Finished(),
	}
	if j.Parents == nil {
		j.Parents = []string{}
	}
	if l.SubSequence >= 0 {
		sub := l.SubSequence
		j.SubSequence = &sub
	}
	if !l.Expiry.IsZero() {
		s := l.Expiry.UTC().Format(time.RFC3339Nano)
		j.HolderExpiry = &s
	}
	if l.Lag != nil && l.Owner != "" {
		behind, age := l.Lag.BehindLatest.Milliseconds(), l.Lag.CheckpointAge.Milliseconds()
		j.BehindMs, j.AgeMs = &behind, &age
	}
	return j
}

func checkpointText(l shardlease.Lease) string {
	switch {
	case l.Checkpoint == "":
		return "-"
	case l.SubSequence >= 0:
		return l.Checkpoint + "/" + strconv.FormatInt(l.SubSequence, 10)
	}
	return l.Checkpoint
}

func expiryText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cleanupText names the finished rows, each with the children that have not
// started yet, or "" when there are none.
func cleanupText(leases []shardlease.Lease) string {
	var out []string
	for _, l := range leases {
		if !l.Finished() {
			continue
		}
		var waiting []string
		for _, c := range leases {
			if slices.Contains(c.Parents, l.Key.Shard) && c.Checkpoint == "" {
				waiting = append(waiting, c.Key.Shard)
			}
		}
		if len(waiting) > 0 {
			out = append(out, fmt.Sprintf("%s (child %s not started)", l.Key.Shard, strings.Join(waiting, ", ")))
		} else {
			out = append(out, l.Key.Shard+" (until Kinesis no longer lists it)")
		}
	}
	return strings.Join(out, ", ")
}

// unheldText says, for one stream's leases, that no live worker holds any
// of its unfinished leases (each is free, or its holder's expiry passed by
// the holder's clock), or "" when one does, or none is unfinished. Such a
// stream is read by nobody: its workers are gone, or it left every
// worker's set.
func unheldText(leases []shardlease.Lease, now time.Time) string {
	open := 0
	for _, l := range leases {
		if l.Finished() {
			continue
		}
		open++
		// A row handed over but not yet adopted shows no expiry: its taker
		// is about to hold it. A row a session keeps is not rewritten while
		// its holder lives: its expiry says nothing.
		if l.Owner != "" && (l.Expiry.IsZero() || l.Expiry.After(now) || l.Session != "") {
			return ""
		}
	}
	if open == 0 {
		return ""
	}
	return fmt.Sprintf("no live worker holds a lease of stream %s: each of its %s is free or its holder's expiry passed; "+
		"start a worker that reads the stream, or see 'Leases nobody takes' in docs/operating.md", leases[0].Key.Stream, plural(open, "unfinished lease"))
}

// rolesText names the worker coordinating the stream (the holder of the
// first readable lease) and its deputy, or "" when no lease is readable.
func rolesText(leases []shardlease.Lease) string {
	first, deputy, ok := roles(leases)
	if !ok {
		return ""
	}
	text := fmt.Sprintf("coordinating: %s (holds %s, the first readable lease)", ownerOrFree(first.Owner), first.Key.Shard)
	if first.Owner == "" {
		text = fmt.Sprintf("coordinating: nobody (%s, the first readable lease, is free)", first.Key.Shard)
	}
	if deputy != "" {
		text += "; deputy: " + deputy
	}
	return text
}

// roles returns the first readable lease of one stream's leases (ordered by
// shard id: the lowest not finished whose parents are), whose holder
// coordinates the stream, and the holder named its deputy ("" when none);
// ok is false when no lease is readable.
func roles(leases []shardlease.Lease) (first shardlease.Lease, deputy string, ok bool) {
	finished := map[string]bool{}
	rows := map[string]bool{}
	for _, l := range leases {
		rows[l.Key.Shard] = true
		if l.Checkpoint == shardlease.ShardEnd {
			finished[l.Key.Shard] = true
		}
	}
	for _, l := range leases {
		if !readable(l, rows, finished) {
			continue
		}
		for _, d := range leases {
			if n := balance.ParseNote(d.Note); n.Kind == balance.NoteDeputy && n.FirstOn(d.Key.Stream) == l.Key.String() && d.Owner != "" {
				return l, d.Owner, true
			}
		}
		return l, "", true
	}
	return shardlease.Lease{}, "", false
}

// readable reports whether l's shard may be read now: not finished, and no
// parent with a row is unfinished.
func readable(l shardlease.Lease, rows, finished map[string]bool) bool {
	return !finished[l.Key.Shard] && !slices.ContainsFunc(l.Parents, func(p string) bool { return rows[p] && !finished[p] })
}
