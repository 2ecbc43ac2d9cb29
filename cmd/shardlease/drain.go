package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardlease/shardlease"
)

func init() { commands = append(commands, drainCommand) }

// defaultDrainWait is drain's default -wait: a handler's default grace
// period and a few renewals.
const defaultDrainWait = time.Minute

var drainCommand = &command{
	name:    "drain",
	summary: "ask a live worker to hand every lease to the others (before a deploy)",
	usage: `
Usage: shardlease drain -table TABLE -stream STREAM (-owner NAME | -all-but NAME) [-wait DURATION] [-json] [-region REGION] [-dynamodb-endpoint URL]

Asks the worker NAME (its WithOwnerID, as 'list' shows it), or every worker
but NAME, to drain: each finishes the batch in hand, writes its final
checkpoint and releases its leases to the other workers, while its process
keeps running, and takes nothing more until it stops (Consumer.Drain). The
command waits until no lease of the stream names the worker, or -wait has
passed.

The request is a note written on each row the worker holds, which its next
renewal returns (within a renew interval). The note is conditional on the
holder, like a handoff request, and changes nothing else; a note that
another write replaced is written again. A worker of an earlier release,
which knows no drain note, ignores it: the command then fails after -wait
and names the leases still held.

A Kubernetes preStop hook can run it, with terminationGracePeriodSeconds
longer than -wait (see docs/operating.md).

Example:

	shardlease drain -table orders-leases -stream orders -owner orders-7d9f-abcde
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (required)")
		owner := fs.String("owner", "", "the owner id (`name`) of the worker to drain")
		allBut := fs.String("all-but", "", "drain every worker but the one of this owner id (`name`)")
		wait := fs.Duration("wait", defaultDrainWait, "how long to wait for the leases to be released")
		asJSON := fs.Bool("json", false, "print the result as a JSON object")
		return func(ctx context.Context) error {
			if err := requireFlags("table", *table, "stream", *stream); err != nil {
				return err
			}
			if (*owner == "") == (*allBut == "") {
				return usagef("give one of -owner NAME (drain that worker) and -all-but NAME (drain every other worker)")
			}
			if *wait <= 0 {
				return usagef("-wait %v: must be positive", *wait)
			}
			if err := checkStreamName(*stream); err != nil {
				return err
			}
			store, err := st.store(ctx, *table)
			if err != nil {
				return err
			}
			d := drainer{store: store, stream: *stream, owner: *owner, allBut: *allBut, wait: *wait, poll: st.env.poll}
			res, err := d.drain(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			if len(res.Drained) == 0 {
				fmt.Fprintf(st.stdout, "no lease of stream %s names a worker to drain; nothing to do\n", *stream)
				return nil
			}
			fmt.Fprintf(st.stdout, "drained %s: %d leases of stream %s released to the other workers in %v\n",
				strings.Join(res.Drained, ", "), len(res.Shards), *stream, time.Duration(res.WaitedMillis)*time.Millisecond)
			return nil
		}
	},
}

// drainResult is what drain -json prints.
type drainResult struct {
	Table  string `json:"table"`
	Stream string `json:"stream"`
	// Drained are the owner ids (as configured) asked to drain.
	Drained []string `json:"drained"`
	// Shards are the leases they held when asked.
	Shards       []string `json:"shards"`
	WaitedMillis int64    `json:"waited_ms"`
}

// drainer asks workers to drain through the lease table and waits for it.
type drainer struct {
	store        *shardlease.DynamoStore
	stream       string
	owner        string // drain this owner
	allBut       string // or every owner but this one
	wait, poll   time.Duration
	nonceCounter int
}

// target reports whether the row's holder is to drain.
func (d *drainer) target(l shardlease.Lease) bool {
	if l.Owner == "" {
		return false
	}
	name := shardlease.OwnerName(l.Owner)
	if d.owner != "" {
		return name == d.owner || l.Owner == d.owner
	}
	return name != d.allBut && l.Owner != d.allBut
}

// drain notes every row of the workers to drain until none names them, or
// the wait passes.
func (d *drainer) drain(ctx context.Context) (drainResult, error) {
	res := drainResult{Table: d.store.Table(), Stream: d.stream}
	start := time.Now()
	poll := d.poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	for {
		left, err := d.noteHeld(ctx, &res)
		if err != nil {
			return res, err
		}
		if len(left) == 0 {
			res.WaitedMillis = time.Since(start).Milliseconds()
			return res, nil
		}
		if time.Since(start) > d.wait {
			return res, fmt.Errorf("shardlease: table %s, stream %s: after %v these leases still name a worker asked to drain: %s; "+
				"is it running a release that drains (Consumer.Drain)? A handler deaf to its context keeps its lease until it expires; "+
				"run the command again with a longer -wait, or stop the worker", d.store.Table(), d.stream, d.wait, strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("shardlease: table %s, stream %s: stopped waiting before these leases were released: %s; "+
				"the workers asked to drain go on draining; run the command again to wait for them: %w", d.store.Table(), d.stream, strings.Join(left, ", "), ctx.Err())
		case <-time.After(poll):
		}
	}
}

// noteHeld writes a drain note on each row a worker to drain holds whose
// note is not one already, records what it asked of whom in res, and
// returns the rows still held by such workers.
func (d *drainer) noteHeld(ctx context.Context, res *drainResult) ([]string, error) {
	rows, err := d.store.List(ctx, d.stream)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, l := range rows {
		if !d.target(l) {
			continue
		}
		left = append(left, fmt.Sprintf("%s (%s)", l.Key.Shard, l.Owner))
		if name := shardlease.OwnerName(l.Owner); !slices.Contains(res.Drained, name) {
			res.Drained = append(res.Drained, name)
		}
		if !slices.Contains(res.Shards, l.Key.Shard) {
			res.Shards = append(res.Shards, l.Key.Shard)
		}
		if strings.HasPrefix(l.Note, "drain") {
			continue
		}
		d.nonceCounter++
		_, err := d.store.Note(ctx, l, fmt.Sprintf("drain cli-%d", d.nonceCounter))
		if err != nil && !errors.Is(err, shardlease.ErrLeaseHeld) && !errors.Is(err, shardlease.ErrLeaseNotFound) {
			return nil, err
		}
	}
	return left, nil
}
