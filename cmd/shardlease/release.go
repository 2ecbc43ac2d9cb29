package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/shardlease/shardlease"
)

// defaultReleaseWait is release's default -wait: longer than a consumer's
// default lease duration (10s), so a live holder renews at least twice in it.
const defaultReleaseWait = 15 * time.Second

var releaseCommand = &command{
	name:    "release",
	summary: "free a lease whose holder is dead",
	usage: `
Usage: shardlease release -table TABLE -stream STREAM -shard SHARD [-wait DURATION | -force] [-json] [-region REGION] [-dynamodb-endpoint URL]

Frees the lease of one shard so that any consumer may take it at once,
keeping its checkpoint. Consumers take a dead worker's leases by themselves
after their lease duration; release is for when nobody is left to take them,
or to move them sooner.

Clocks are not trusted, so the holder's expiry is not consulted. Instead
release watches the lease's counter for -wait: a live holder renews its
lease several times per lease duration, and every renewal moves the
counter. If the counter stays still, the holder is dead and the lease is
released; if it moves, the command refuses and changes nothing. Make -wait
longer than the consumers' lease duration (default 10s).

With -force the lease is taken from its holder at once, without watching
(so -wait and -force exclude each other). A live holder then finds its next
renewal or checkpoint refused ("lease lost") and stops reading the shard.
The lease is left held by the command, so that no consumer reads the shard
before the old holder has stopped: consumers take it as any expired lease,
once it has stood still for the holder's lease duration (10s by default).
A lease that is free already is reported as such, and nothing is watched
or written.

The release is two fenced writes: acquire with the counter watched (under
the owner id shardlease-cli@HOSTNAME), then release (with -force: renew once
and leave it). If the holder writes in between, nothing is changed.

Example:

	shardlease release -table orders-leases -stream orders -shard shardId-000000000003 -wait 30s
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (required)")
		shard := fs.String("shard", "", "`shard` id, e.g. shardId-000000000003 (required)")
		wait := fs.Duration("wait", defaultReleaseWait, "how long the lease's counter must stay still to prove the holder dead")
		force := fs.Bool("force", false, "release at once, even from a live holder")
		asJSON := fs.Bool("json", false, "print the result as a JSON object")
		return func(ctx context.Context) error {
			if err := requireFlags("table", *table, "stream", *stream, "shard", *shard); err != nil {
				return err
			}
			key, err := leaseKey(*stream, *shard)
			if err != nil {
				return err
			}
			waitSet := false
			fs.Visit(func(f *flag.Flag) { waitSet = waitSet || f.Name == "wait" })
			if *force && waitSet {
				return usagef("-wait and -force exclude each other: -force releases at once without watching; drop one of them")
			}
			if *wait <= 0 && !*force {
				return usagef("-wait %v: must be positive (longer than the consumers' lease duration), or pass -force", *wait)
			}
			store, err := st.store(ctx, *table)
			if err != nil {
				return err
			}
			r := releaser{store: store, owner: st.env.ownerID(), wait: *wait, poll: st.env.poll, acquiring: st.env.acquiring}
			if *force {
				r.wait = 0
			}
			// Said once the lease was read and found held: a free lease
			// needs no watching.
			r.watching = func(l shardlease.Lease) {
				if !*asJSON {
					// The holder's lease duration, when longer, is waited.
					fmt.Fprintf(st.stderr, "%s is held by %s at counter %d; watching it for %v ...\n", key, l.Owner, l.Counter, max(r.wait, l.Duration))
				}
				if st.env.watching != nil {
					st.env.watching(l)
				}
			}
			res, err := r.release(ctx, key)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			switch res.Action {
			case "already_free":
				fmt.Fprintf(st.stdout, "%s is free already (counter %d); nothing changed\n", key, res.Counter)
			case "released_by_holder":
				fmt.Fprintf(st.stdout, "%s was released by its holder %s during the wait (counter %d); nothing changed\n", key, res.PreviousOwner, res.Counter)
			case "taken":
				fmt.Fprintf(st.stdout, "%s taken from %s (forced), which can no longer write to it; %s\n", key, res.PreviousOwner, stays(res.Owner, res.Counter, res.ResumeAfterMillis))
			default:
				how := fmt.Sprintf("its counter stayed at %d for %v", res.ObservedCounter, time.Duration(res.WaitMillis)*time.Millisecond)
				if *force {
					how = "forced"
				}
				fmt.Fprintf(st.stdout, "%s released from %s (%s); the lease is free (counter %d)\n", key, res.PreviousOwner, how, res.Counter)
			}
			return nil
		}
	},
}

// releaseResult is what release -json prints.
type releaseResult struct {
	Table  string `json:"table"`
	Stream string `json:"stream"`
	Shard  string `json:"shard"`
	// Action is "released", "already_free" (nothing to do),
	// "released_by_holder" (the holder released it during the wait) or
	// "taken" (-force took it from its holder and left it held by the
	// command: Owner, ResumeAfterMillis).
	Action          string `json:"action"`
	PreviousOwner   string `json:"previous_owner"`
	ObservedCounter int64  `json:"observed_counter"`
	Counter         int64  `json:"counter"`
	Checkpoint      string `json:"checkpoint"`
	Forced          bool   `json:"forced"`
	WaitedMillis    int64  `json:"waited_ms"`
	// WaitMillis is how long the counter had to stay still: the longer of
	// -wait and the holder's lease duration written on the row.
	WaitMillis int64 `json:"wait_ms"`
	// Owner is the lease's owner as the command left it: empty (free), or
	// the command's own id when -force took it from a holder.
	Owner string `json:"owner"`
	// ResumeAfterMillis is, for a lease taken from a holder, how long it
	// must stand still before a consumer takes it (see resetResult).
	ResumeAfterMillis int64 `json:"resume_after_ms"`
}

// releaser frees a lease whose counter stays still for wait (0: at once).
type releaser struct {
	store    *shardlease.DynamoStore
	owner    string
	wait     time.Duration
	poll     time.Duration
	watching func(shardlease.Lease)
	// acquiring, when set, is called with the lease read before it is
	// acquired on its counter.
	acquiring func(shardlease.Lease)
}

func (r releaser) release(ctx context.Context, key shardlease.LeaseKey) (releaseResult, error) {
	force := r.wait == 0
	l, err := getLease(ctx, r.store, key)
	if err != nil {
		return releaseResult{}, err
	}
	res := releaseResult{
		Table: r.store.Table(), Stream: key.Stream, Shard: key.Shard, Forced: force,
		PreviousOwner: l.Owner, ObservedCounter: l.Counter, Counter: l.Counter, Checkpoint: l.Checkpoint,
	}
	if !l.Held() {
		res.Action = "already_free"
		return res, nil
	}
	var keeping shardlease.Worker // the session that keeps l, if one does (see release_session.go)
	if !force {
		if keeping, err = r.keepingSession(ctx, l); err != nil {
			return res, err
		}
		if d := max(l.Duration, keeping.Duration); d > r.wait {
			// The holder's lease duration is longer: a shorter wait could
			// take the lease from a live holder that renews less often.
			r.wait = d
		}
		res.WaitMillis = r.wait.Milliseconds()
		start := time.Now()
		now, err := r.watch(ctx, l)
		res.WaitedMillis = time.Since(start).Milliseconds()
		if err != nil {
			return res, err
		}
		if !now.Held() {
			res.Action, res.Counter, res.Checkpoint = "released_by_holder", now.Counter, now.Checkpoint
			return res, nil
		}
	}
	if force {
		return r.force(ctx, res)
	}
	// The counter stood still for the holder's lease duration: the holder
	// has stopped, and the lease is freed at once.
	if err := r.endStillSession(ctx, l, keeping); err != nil {
		return res, err
	}
	if r.acquiring != nil {
		r.acquiring(l)
	}
	held, err := r.store.AcquireAt(ctx, key, r.owner, l.Counter)
	if errors.Is(err, shardlease.ErrLeaseHeld) {
		err = fmt.Errorf("%s: its holder %s wrote to it at the end of the wait, so it is alive; nothing was changed: stop that worker, or pass -force: %w", key, l.Owner, err)
	}
	if err != nil {
		return res, err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
	defer cancel()
	rel, err := r.store.Release(fctx, held)
	if err != nil {
		return res, fmt.Errorf("release: %w (the lease stays with %s at counter %d until a consumer takes it after its lease duration)", err, r.owner, held.Counter)
	}
	res.Action, res.Counter, res.Checkpoint = "released", rel.Counter, rel.Checkpoint
	return res, nil
}

// force takes the lease of res from its holder at once with
// shardlease.ResetCheckpoint, keeping its progress: the lease is left held
// by the command for the holder's lease duration (a lease freed meanwhile
// is released at once).
func (r releaser) force(ctx context.Context, res releaseResult) (releaseResult, error) {
	key := shardlease.LeaseKey{Stream: res.Stream, Shard: res.Shard}
	rep, err := shardlease.ResetCheckpoint(ctx, hooked(r.store, r.acquiring), key, "", shardlease.WithResetHandover(), shardlease.WithResetOwner(r.owner))
	if err != nil {
		return res, err
	}
	res.Counter, res.Checkpoint = rep.Lease.Counter, rep.Lease.Checkpoint
	if rep.TakenFrom == "" {
		// Its holder released it between the command's read and the
		// reset's: the reset took the free row and released it at once.
		res.Action = "released_by_holder"
		return res, nil
	}
	res.Action, res.PreviousOwner, res.ObservedCounter = "released", rep.TakenFrom, rep.Previous.Counter
	res.Owner, res.ResumeAfterMillis = rep.Lease.Owner, rep.ResumeAfter.Milliseconds()
	if rep.Lease.Owner != "" {
		res.Action = "taken"
	}
	return res, nil
}

// watch re-reads l until r.wait has passed, and fails as soon as its counter
// moves while it is held. It returns the lease as last read; a free lease
// ends the watch early.
func (r releaser) watch(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	poll := r.poll
	if poll <= 0 {
		poll = min(max(r.wait/10, 50*time.Millisecond), time.Second)
	}
	timer := time.NewTimer(r.wait)
	defer timer.Stop()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	if r.watching != nil {
		r.watching(l)
	}
	last := l
	for {
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("%s: interrupted while watching; nothing was changed: %w", l.Key, ctx.Err())
		case <-timer.C:
			return last, nil
		case <-ticker.C:
		}
		now, err := getLease(ctx, r.store, l.Key)
		if err != nil {
			return last, err
		}
		last = now
		switch {
		case !now.Held():
			return now, nil
		case now.Counter != l.Counter || now.Owner != l.Owner:
			return now, fmt.Errorf("%s: its counter moved from %d to %d during the wait (owner %s), so its holder is alive; nothing was changed: stop that worker, or pass -force",
				l.Key, l.Counter, now.Counter, now.Owner)
		}
	}
}
