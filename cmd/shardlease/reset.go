package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/seqnum"
)

var resetCommand = &command{
	name:    "reset",
	summary: "move a shard's checkpoint (the lease must be free, or -force)",
	usage: `
Usage: shardlease reset -table TABLE -stream STREAM -shard SHARD -to POSITION [-force] [-json] [-region REGION] [-dynamodb-endpoint URL]

Moves the checkpoint of one shard. The next consumer to take the lease
resumes reading after POSITION. POSITION is

	a sequence number   the last record to count as processed (decimal
	                    digits, as Kinesis prints them); reading resumes
	                    with the record after it
	SHARD_END           the whole shard counts as processed: it is not read
	                    again, and its child shards may start

TRIM_HORIZON, LATEST and timestamps are not supported: a checkpoint is
always a record's sequence number or SHARD_END; to move every shard of a
stream to a time, use 'shardlease rewind'. To re-read from an earlier point,
pass the sequence number of the record before it (for example from
'aws kinesis get-records').

The lease must be free: stop the consumer holding it first. With -force the
lease is taken from a live holder instead: its next renewal or checkpoint
fails with "lease lost" and it stops reading the shard; records it was
handling are handed to a handler again later (at-least-once).

The change is three fenced writes: acquire the lease with the counter just
read (under the owner id shardlease-cli@HOSTNAME), write the checkpoint,
release. If a consumer writes to the lease in between, nothing is changed.
The previous checkpoint is printed so that the change can be undone.

Example:

	shardlease reset -table orders-leases -stream orders \
		-shard shardId-000000000003 -to 49590338271490256608559692538361571095921575989136588898
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` (required)")
		stream := fs.String("stream", "", "Kinesis `stream` name (required)")
		shard := fs.String("shard", "", "`shard` id, e.g. shardId-000000000003 (required)")
		to := fs.String("to", "", "new checkpoint: a sequence `number` or SHARD_END (required)")
		force := fs.Bool("force", false, "take the lease from its holder if it is held")
		asJSON := fs.Bool("json", false, "print the result as a JSON object")
		return func(ctx context.Context) error {
			if err := requireFlags("table", *table, "stream", *stream, "shard", *shard, "to", *to); err != nil {
				return err
			}
			key, err := leaseKey(*stream, *shard)
			if err != nil {
				return err
			}
			if err := checkPosition(*to); err != nil {
				return err
			}
			store, err := st.store(ctx, *table)
			if err != nil {
				return err
			}
			res, err := reset(ctx, store, key, *to, *force, st.env.ownerID(), st.env.acquiring)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			fmt.Fprintf(st.stdout, "%s: checkpoint moved from %s to %s", key, dash(res.PreviousCheckpoint), res.Checkpoint)
			if res.PreviousOwner != "" {
				fmt.Fprintf(st.stdout, "; took the lease from %s, which can no longer write to it", res.PreviousOwner)
			}
			fmt.Fprintf(st.stdout, "; the lease is free (counter %d)\n", res.Counter)
			return nil
		}
	},
}

// checkPosition validates -to.
func checkPosition(pos string) error {
	switch pos {
	case shardlease.ShardEnd:
		return nil
	case "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER":
		return usagef("-to %s: a checkpoint is a sequence number or %s; the lease store cannot clear a checkpoint or store a starting position (see -h)", pos, shardlease.ShardEnd)
	}
	if !seqnum.IsSequence(pos) {
		return usagef("-to %q: not a sequence number (decimal digits) or %s", pos, shardlease.ShardEnd)
	}
	return nil
}

// resetResult is what reset -json prints.
type resetResult struct {
	Table              string `json:"table"`
	Stream             string `json:"stream"`
	Shard              string `json:"shard"`
	Action             string `json:"action"` // "reset"
	PreviousOwner      string `json:"previous_owner"`
	PreviousCheckpoint string `json:"previous_checkpoint"`
	Checkpoint         string `json:"checkpoint"`
	Counter            int64  `json:"counter"`
	Forced             bool   `json:"forced"`
}

// forceAttempts is how often reset -force and release -force re-read a
// lease whose holder renewed it between the read and the acquire.
const forceAttempts = 5

// reset moves key's checkpoint to pos with fenced writes.
func reset(ctx context.Context, store *shardlease.DynamoStore, key shardlease.LeaseKey, pos string, force bool, owner string, acquiring func(shardlease.Lease)) (resetResult, error) {
	before, held, err := take(ctx, store, key, owner, force, acquiring)
	if err != nil {
		return resetResult{}, err
	}
	res := resetResult{
		Table: store.Table(), Stream: key.Stream, Shard: key.Shard, Action: "reset",
		// The checkpoint replaced is the acquired row's.
		PreviousOwner: before.Owner, PreviousCheckpoint: held.Checkpoint, Checkpoint: pos, Forced: force,
	}
	// From here on the command holds the lease: finish even if interrupted,
	// so as not to leave it held.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
	defer cancel()
	cp, cpErr := store.Checkpoint(fctx, held, pos, -1, time.Now())
	if cpErr == nil {
		held = cp
	}
	rel, relErr := store.Release(fctx, held)
	switch {
	case cpErr != nil && relErr != nil:
		return res, fmt.Errorf("write checkpoint: %w; then release: %w (the lease stays with %s at counter %d until a consumer takes it after its lease duration)", cpErr, relErr, owner, held.Counter)
	case cpErr != nil:
		return res, fmt.Errorf("write checkpoint: %w (the lease was released unchanged)", cpErr)
	case relErr != nil:
		return res, fmt.Errorf("checkpoint moved to %s, but release failed: %w (the lease stays with %s at counter %d until a consumer takes it after its lease duration)", pos, relErr, owner, held.Counter)
	}
	res.Counter = rel.Counter
	return res, nil
}

// take acquires key for owner with the counter just read. A held lease is
// taken only with force; otherwise the error names the holder. It returns the
// lease as read and the handle to write with.
func take(ctx context.Context, store *shardlease.DynamoStore, key shardlease.LeaseKey, owner string, force bool, acquiring func(shardlease.Lease)) (before, held shardlease.Lease, err error) {
	for attempt := 1; ; attempt++ {
		before, err = getLease(ctx, store, key)
		if err != nil {
			return before, held, err
		}
		if before.Held() && !force {
			return before, held, fmt.Errorf("%s is held by %s (counter %d): stop that worker and run this again once the lease is free, or pass -force to take it from the holder", key, before.Owner, before.Counter)
		}
		if acquiring != nil {
			acquiring(before)
		}
		// On the exact counter read, free or held: the row changed is the
		// row shown.
		held, err = store.AcquireAt(ctx, key, owner, before.Counter)
		switch {
		case err == nil:
			return before, held, nil
		case !errors.Is(err, shardlease.ErrLeaseHeld):
			return before, held, err
		case !force:
			return before, held, fmt.Errorf("%s was taken by a consumer while this command ran; nothing was changed: %w", key, err)
		case attempt == forceAttempts:
			return before, held, fmt.Errorf("%s: its holder kept writing to it between read and acquire %d times; nothing was changed: %w", key, forceAttempts, err)
		}
	}
}
