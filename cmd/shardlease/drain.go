package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
)

func init() { commands = append(commands, drainCommand) }

// defaultDrainWait is drain's default -wait: a handler's default grace
// period and a few renewals.
const defaultDrainWait = time.Minute

var drainCommand = &command{
	name:    "drain",
	summary: "ask a live worker to hand every lease to the others (before a deploy)",
	usage: `
Usage: shardlease drain -table TABLE -stream STREAM (-owner NAME | -all-but NAME) [-wait DURATION] [-force] [-json] [-region REGION] [-dynamodb-endpoint URL]

Asks the worker NAME (its WithOwnerID, as 'list' shows it), or every worker
but NAME, to drain: each finishes the batch in hand, writes its final
checkpoint and releases its leases to the other workers, while its process
keeps running, and takes nothing more until it stops (Consumer.Drain). The
command waits until no lease of the stream names the worker, or -wait has
passed.

A worker started without WithOwnerID has the owner id HOST-xxxxxxxx: its
host name, "-" and 8 random hex digits, new at each start. When no worker
has the owner id NAME, -owner NAME drains the workers whose id is that of a
host named NAME (the pod name, in Kubernetes).

It refuses, with exit status 1 and nothing asked:
  - an -owner that holds no lease of the stream and runs no worker of it:
    the error lists the owners that do hold leases;
  - a drain that would leave the stream to nobody: when no worker but the
    drained ones holds a lease or runs idle (a worker row), unless -force;
  - a stream of which the table holds no row: the error names the streams
    it holds.
An -owner that runs idle, holding no lease, is nothing to drain (exit 0).

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
		force := fs.Bool("force", false, "drain even when no other worker runs to take the leases (the stream is then read by nobody)")
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
			d := drainer{store: store, stream: *stream, allBut: *allBut, wait: *wait, poll: st.env.poll}
			res, err := st.startDrain(ctx, &d, *owner, *force, *asJSON)
			if err != nil || res.Drained == nil {
				return err
			}
			if res, err = d.drain(ctx, res); err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			st.printDrained(res)
			return nil
		}
	},
}

// startDrain reads the stream's rows once and decides what d is to drain
// (see planDrain): it refuses a drain of nobody, and one that would leave
// the stream to nobody unless forced. A result with no Drained means
// nothing is to be done, and has been said.
func (st *cli) startDrain(ctx context.Context, d *drainer, owner string, force, asJSON bool) (drainResult, error) {
	res := drainResult{Table: d.store.Table(), Stream: d.stream, Forced: force, Shards: []string{}, Others: []string{}}
	leases, workers, err := d.store.ListWithWorkers(ctx, d.stream)
	if err != nil {
		return res, err
	}
	if len(leases) == 0 && len(workers) == 0 {
		return res, st.streamNotInTable(ctx, d.store.Table(), d.stream)
	}
	plan := planDrain(leases, workers, owner, d.allBut, time.Now())
	where := fmt.Sprintf("table %s, stream %s", d.store.Table(), d.stream)
	nothing := ""
	switch {
	case len(plan.drain) == 0 && owner != "" && plan.idle:
		nothing = fmt.Sprintf("worker %s holds no lease of stream %s (it runs idle); nothing to drain", owner, d.stream)
	case len(plan.drain) == 0 && owner != "":
		return res, fmt.Errorf("%s: no lease is held by a worker of owner id %s, so nothing was drained; %s. "+
			"Name one of them with -owner (its owner id, as 'shardlease list' shows it without the \"#...\" incarnation). "+
			"A worker's owner id is what the service passes to WithOwnerID; without it, the host name plus \"-\" and 8 random hex digits, new at each start "+
			"(e.g. %s-1a2b3c4d): set WithOwnerID(os.Getenv(\"POD_NAME\")) so that a preStop hook can name it",
			where, owner, holdersText(plan.holders), owner)
	case len(plan.drain) == 0:
		nothing = fmt.Sprintf("every lease of stream %s is held by %s, or free; nothing to drain", d.stream, d.allBut)
	case len(plan.others) == 0 && !force:
		return res, fmt.Errorf("%s: draining %s would leave the stream to nobody: no other worker holds a lease of it or runs idle (has a worker row), "+
			"(a worker whose leases' expiry passed over a minute ago counts as gone), so its %s would not be read until a worker starts. Nothing was drained; start another worker first and run this again, "+
			"or pass -force to drain anyway", where, strings.Join(plan.drain, ", "), plural(plan.shards, "held lease"))
	}
	if nothing != "" {
		res.Drained = []string{}
		if asJSON {
			return drainResult{}, st.printJSON(res)
		}
		fmt.Fprintln(st.stdout, nothing)
		return drainResult{}, nil
	}
	d.owners = plan.owners
	res.Drained, res.Others = plan.drain, plan.others
	return res, nil
}

// printDrained says what a drain did, and to whom the leases went.
func (st *cli) printDrained(res drainResult) {
	went := fmt.Sprintf("released to the other workers (%s)", strings.Join(res.Others, ", "))
	if len(res.Others) == 0 {
		went = "released (-force): no other worker runs, so nobody reads the stream until one starts"
	}
	fmt.Fprintf(st.stdout, "drained %s: %s of stream %s %s in %v\n", strings.Join(res.Drained, ", "), plural(len(res.Shards), "lease"),
		res.Stream, went, time.Duration(res.WaitedMillis)*time.Millisecond)
}

// holdersText names the holders of leases with how many each holds, or
// says nobody holds one.
func holdersText(holders map[string]int) string {
	if len(holders) == 0 {
		return "no worker holds a lease of the stream now"
	}
	names := slices.Sorted(maps.Keys(holders))
	for i, n := range names {
		names[i] = fmt.Sprintf("%s (%s)", n, plural(holders[n], "lease"))
	}
	return "leases are held by " + strings.Join(names, ", ")
}

// drainResult is what drain -json prints.
type drainResult struct {
	Table  string `json:"table"`
	Stream string `json:"stream"`
	// Drained are the owner ids (as configured) asked to drain; empty
	// when there was nothing to drain.
	Drained []string `json:"drained"`
	// Shards are the leases they held when asked.
	Shards []string `json:"shards"`
	// Others are the owner ids of the other workers, which take the
	// leases; empty only with Forced.
	Others       []string `json:"others"`
	Forced       bool     `json:"forced"`
	WaitedMillis int64    `json:"waited_ms"`
}

// drainPlanned is what drain decides from one listing of the stream.
type drainPlanned struct {
	// drain are the owner names to drain: holders of leases only.
	drain []string
	// owners are, with -owner, the owner names the drain matches.
	owners []string
	// shards is how many leases those hold.
	shards int
	// others are the owner names of the other workers: holders of leases
	// and idle workers (worker rows), which take the drained leases.
	others []string
	// holders counts each holder's leases, by owner name.
	holders map[string]int
	// idle is set when -owner names a worker that runs holding no lease.
	idle bool
}

// planDrain decides whom to drain: with owner, the holders whose owner id
// is owner, or failing that is the library's default owner id of a host
// named owner (owner, "-" and 8 hex digits); with allBut, every holder but
// allBut. The others are every worker, holding or idle, not drained.
func planDrain(leases []shardlease.Lease, workers []shardlease.Worker, owner, allBut string, now time.Time) drainPlanned {
	p := drainPlanned{holders: map[string]int{}, others: []string{}}
	live := map[string]bool{} // holders with a lease that has not long lapsed
	for _, l := range leases {
		if l.Owner != "" {
			p.holders[shardlease.OwnerName(l.Owner)]++
			live[shardlease.OwnerName(l.Owner)] = live[shardlease.OwnerName(l.Owner)] || !lapsed(l, now)
		}
	}
	idle := map[string]bool{}
	for _, w := range workers {
		idle[shardlease.OwnerName(w.Owner)] = true
	}
	match := func(name string) bool { return name != allBut }
	if owner != "" {
		match = func(name string) bool { return name == owner }
		if p.holders[owner] == 0 && !idle[owner] {
			match = func(name string) bool { return isDefaultOwnerOf(name, owner) }
		}
		for name := range idle {
			p.idle = p.idle || match(name)
		}
	}
	for name, n := range p.holders {
		switch {
		case match(name):
			p.drain, p.shards = append(p.drain, name), p.shards+n
		case live[name]:
			p.others = append(p.others, name)
		}
	}
	for name := range idle {
		if !match(name) && p.holders[name] == 0 {
			p.others = append(p.others, name)
		}
	}
	slices.Sort(p.drain)
	slices.Sort(p.others)
	if owner != "" {
		p.owners = p.drain
	}
	return p
}

// lapsedAfter is how long past the expiry its holder wrote a lease must be
// for the command to take its holder for gone. The expiry is the holder's
// wall-clock estimate, so the margin is wide: a live holder rewrites it every
// renew interval, always into its future.
const lapsedAfter = time.Minute

// lapsed reports whether l's holder looks gone: the expiry it wrote passed
// lapsedAfter ago. Only the drain's refusal uses it (a crashed worker's rows
// are no one to leave the stream to); no lease decision does.
func lapsed(l shardlease.Lease, now time.Time) bool {
	// A row a session keeps is not rewritten while its holder lives: its
	// expiry says nothing.
	return l.Session == "" && !l.Expiry.IsZero() && now.After(l.Expiry.Add(lapsedAfter))
}

// isDefaultOwnerOf reports whether name is the owner id the library gives a
// worker of host without WithOwnerID: the host name, "-" and 8 hex digits.
func isDefaultOwnerOf(name, host string) bool {
	suffix, ok := strings.CutPrefix(name, host+"-")
	if !ok || len(suffix) != 8 {
		return false
	}
	_, err := hex.DecodeString(suffix)
	return err == nil
}

// drainer asks workers to drain through the lease table and waits for it.
type drainer struct {
	store  *shardlease.DynamoStore
	stream string
	// owners are the owner names to drain (-owner); or, with allBut set,
	// every owner but that one is.
	owners       []string
	allBut       string
	wait, poll   time.Duration
	nonceCounter int
}

// target reports whether the row's holder is to drain.
func (d *drainer) target(l shardlease.Lease) bool {
	if l.Owner == "" {
		return false
	}
	name := shardlease.OwnerName(l.Owner)
	if d.allBut == "" {
		return slices.Contains(d.owners, name)
	}
	return name != d.allBut && l.Owner != d.allBut
}

// drain notes every row of the workers to drain until none names them, or
// the wait passes.
func (d *drainer) drain(ctx context.Context, res drainResult) (drainResult, error) {
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
		if !balance.IsDrainNote(l.Note) {
			d.nonceCounter++
			_, err := d.store.Note(ctx, l, balance.DrainNoteText(fmt.Sprintf("cli-%d", d.nonceCounter)))
			if err != nil && !errors.Is(err, shardlease.ErrLeaseHeld) && !errors.Is(err, shardlease.ErrLeaseNotFound) {
				return nil, err
			}
		}
		if err := d.mail(ctx, l); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// mail tells the session that keeps l, if one does, that its row carries
// the drain note: its holder writes the row only for checkpoints, so it
// reads the note after its next keep returns the mail. It is sent at every
// pass while the row is left: a keep whose reply was lost takes the mail
// with it.
func (d *drainer) mail(ctx context.Context, l shardlease.Lease) error {
	s, ok := l.KeptBy()
	if !ok {
		return nil
	}
	_, err := d.store.MailSession(ctx, s, l.Key)
	return err
}
