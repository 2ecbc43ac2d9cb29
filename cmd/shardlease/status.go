package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
)

var statusCommand = &command{
	name:    "status",
	summary: "one view of a stream's (or every stream's) workers: leases held, lag, leases read by nobody",
	usage: `
Usage: shardlease status -table TABLE [-stream STREAM] [-json] [-region REGION] [-dynamodb-endpoint URL]

Shows, from the lease table, who reads STREAM and how far behind: a line
with its leases (held, free, finished), then one line per worker:

	OWNER           the worker's owner id (WithOwnerID, or its default)
	LEASES          how many leases it holds
	MAX BEHIND      the largest lag of its shards behind the tip of the
	                stream (MillisBehindLatest), "-" when no row says
	MAX CHECKPOINT AGE
	                the longest a checkpoint of its shards has waited while
	                records were behind it: a stuck handler shows here
	NOTE            coordinating (it holds the first readable lease),
	                draining (asked to by 'shardlease drain'), or handing
	                off N (asked to hand leases to another worker)

and the workers running that hold no lease (idle), and the leases nobody
holds that could be read now: a worker takes a free lease within its take
interval, so a lease free for longer means no worker runs, or none can
take it (see its log). The lag is as each holder's last renewal or
checkpoint wrote it on its row: at most a renew interval old.

Without -stream it shows every stream in the table, one block each; idle
workers are shown with -stream only. It is one or two Scans of the table and
no Kinesis call. For one worker's own view (the shards it reads, stuck
retries, its role) serve Consumer.Status over HTTP; for every lease of a
stream, 'shardlease list'.

With -json it prints {"table": ..., "streams": [...]}, each stream with
leases, held, free, finished, readable_free (the shard ids), idle_workers
(null without -stream) and workers: [{"owner", "leases", "shards",
"max_behind_latest_ms", "max_checkpoint_age_ms" (null when no row says),
"coordinating", "draining", "handing_off"}].

Example:

	shardlease status -table orders-leases -stream orders
	shardlease status -table orders-leases
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (default: every stream in the table)")
		asJSON := fs.Bool("json", false, "print the status as a JSON object")
		return func(ctx context.Context) error {
			l, err := st.newLister(ctx, *table, *stream, *asJSON)
			if err != nil {
				return err
			}
			res, err := l.status(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			if len(res.Streams) == 0 {
				fmt.Fprintf(st.stdout, "no leases in table %s (check -table, -region and -dynamodb-endpoint; a consumer creates a stream's leases when it first syncs its shards)\n", *table)
				return nil
			}
			return printStatus(st.stdout, res)
		}
	},
}

// status reads the rows of l's stream, or of every stream, and sums them
// up.
func (l lister) status(ctx context.Context) (tableStatus, error) {
	res := tableStatus{Table: l.table, Streams: []streamStatus{}}
	if l.stream != "" {
		leases, workers, err := l.readStream(ctx)
		if err != nil {
			return res, err
		}
		s := statusOf(l.stream, leases)
		s.Idle = idleOwners(workers)
		res.Streams = append(res.Streams, s)
		return res, nil
	}
	leases, err := l.readAll(ctx)
	if err != nil {
		return res, err
	}
	for i := 0; i < len(leases); { // ordered by stream
		j := i
		for j < len(leases) && leases[j].Key.Stream == leases[i].Key.Stream {
			j++
		}
		res.Streams = append(res.Streams, statusOf(leases[i].Key.Stream, leases[i:j]))
		i = j
	}
	return res, nil
}

// tableStatus is what status prints. The JSON field names are part of the
// command's interface: keep them.
type tableStatus struct {
	Table   string         `json:"table"`
	Streams []streamStatus `json:"streams"`
}

// streamStatus is one stream's status, from its rows.
type streamStatus struct {
	Stream   string `json:"stream"`
	Leases   int    `json:"leases"`
	Held     int    `json:"held"`
	Free     int    `json:"free"`
	Finished int    `json:"finished"`
	// ReadableFree are the free leases that could be read now (not
	// finished, parents finished): nobody reads them.
	ReadableFree []string       `json:"readable_free"`
	Workers      []workerStatus `json:"workers"`
	// Idle are the workers that run holding no lease; nil when not known
	// (without -stream).
	Idle []string `json:"idle_workers"`
}

// workerStatus is one holder of leases of a stream.
type workerStatus struct {
	Owner           string   `json:"owner"`
	Leases          int      `json:"leases"`
	Shards          []string `json:"shards"`
	MaxBehindMs     *int64   `json:"max_behind_latest_ms"`
	MaxCheckpointMs *int64   `json:"max_checkpoint_age_ms"`
	Coordinating    bool     `json:"coordinating"`
	Draining        bool     `json:"draining"`
	HandingOff      int      `json:"handing_off"`
}

// statusOf sums up one stream's leases, ordered by shard id.
func statusOf(stream string, leases []shardlease.Lease) streamStatus {
	s := streamStatus{Stream: stream, Leases: len(leases), ReadableFree: []string{}, Workers: []workerStatus{}}
	rows, finished := map[string]bool{}, map[string]bool{}
	for _, l := range leases {
		rows[l.Key.Shard] = true
		finished[l.Key.Shard] = l.Finished()
	}
	first, _, coordinated := roles(leases)
	byOwner := map[string]*workerStatus{}
	for _, l := range leases {
		switch {
		case l.Held():
			s.Held++
		case l.Finished():
			s.Finished++
			continue
		default:
			s.Free++
			if readable(l, rows, finished) {
				s.ReadableFree = append(s.ReadableFree, l.Key.Shard)
			}
			continue
		}
		name := shardlease.OwnerName(l.Owner)
		w := byOwner[name]
		if w == nil {
			w = &workerStatus{Owner: name, Shards: []string{}}
			byOwner[name] = w
		}
		w.add(l)
		w.Coordinating = w.Coordinating || (coordinated && first.Key == l.Key)
	}
	for _, name := range slices.Sorted(maps.Keys(byOwner)) {
		s.Workers = append(s.Workers, *byOwner[name])
	}
	return s
}

// add counts the held lease l in w.
func (w *workerStatus) add(l shardlease.Lease) {
	w.Leases++
	w.Shards = append(w.Shards, l.Key.Shard)
	if l.Lag != nil {
		behind, age := l.Lag.BehindLatest.Milliseconds(), l.Lag.CheckpointAge.Milliseconds()
		if w.MaxBehindMs == nil || behind > *w.MaxBehindMs {
			w.MaxBehindMs = &behind
		}
		if w.MaxCheckpointMs == nil || age > *w.MaxCheckpointMs {
			w.MaxCheckpointMs = &age
		}
	}
	w.Draining = w.Draining || balance.IsDrainNote(l.Note)
	if l.HandoffTo != "" {
		w.HandingOff++
	}
}

// idleOwners are the owner names of worker rows, sorted.
func idleOwners(workers []shardlease.Worker) []string {
	out := []string{}
	for _, w := range workers {
		if name := shardlease.OwnerName(w.Owner); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// printStatus prints res as text: a block per stream.
func printStatus(out io.Writer, res tableStatus) error {
	for i, s := range res.Streams {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "stream %s, table %s: %s: %d held by %s, %d free, %d finished\n",
			s.Stream, res.Table, plural(s.Leases, "lease"), s.Held, plural(len(s.Workers), "worker"), s.Free, s.Finished)
		if len(s.Workers) > 0 {
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "OWNER\tLEASES\tMAX BEHIND\tMAX CHECKPOINT AGE\tNOTE")
			for _, w := range s.Workers {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", w.Owner, w.Leases, msText(w.MaxBehindMs, time.Millisecond), msText(w.MaxCheckpointMs, time.Second), w.note())
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if len(s.Idle) > 0 {
			fmt.Fprintf(out, "idle (running, holding no lease): %s\n", strings.Join(s.Idle, ", "))
		}
		if len(s.ReadableFree) > 0 {
			fmt.Fprintf(out, "read by nobody now: %s free (%s); a worker takes a free lease within its take interval, so free for longer means no worker runs or none can take it (see the workers' logs)\n",
				plural(len(s.ReadableFree), "lease"), strings.Join(firstNames(s.ReadableFree, 5), ", "))
		}
	}
	return nil
}

// note is the NOTE column of w.
func (w workerStatus) note() string {
	var notes []string
	if w.Coordinating {
		notes = append(notes, "coordinating")
	}
	if w.Draining {
		notes = append(notes, "draining")
	}
	if w.HandingOff > 0 {
		notes = append(notes, fmt.Sprintf("handing off %d", w.HandingOff))
	}
	return dash(strings.Join(notes, ", "))
}

// msText is a count of milliseconds as a duration rounded to round, or "-"
// for nil.
func msText(ms *int64, round time.Duration) string {
	if ms == nil {
		return "-"
	}
	return (time.Duration(*ms) * time.Millisecond).Round(round).String()
}
