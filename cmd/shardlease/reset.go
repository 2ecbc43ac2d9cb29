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
handling are handed to a handler again later (at-least-once). A lease taken
from a holder is left held by the command after the change, so that no
consumer reads the shard before the old holder has stopped: consumers take
it as any expired lease, once it has stood still for the holder's lease
duration (10s by default). A free lease is released at once.

The change is fenced writes: acquire the lease with the counter just read
(under the owner id shardlease-cli@HOSTNAME), write the checkpoint, then
release it (or, taken from a holder, renew it once and leave it). If a
consumer writes to the lease in between, nothing is changed. The previous
checkpoint is printed so that the change can be undone.

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
			res, err := reset(ctx, store, key, *to, *force, st.env)
			if err != nil {
				return err
			}
			if *asJSON {
				return st.printJSON(res)
			}
			fmt.Fprintf(st.stdout, "%s: checkpoint moved from %s to %s", key, dash(res.PreviousCheckpoint), res.Checkpoint)
			if res.PreviousOwner != "" {
				fmt.Fprintf(st.stdout, "; took the lease from %s, which can no longer write to it; %s\n", res.PreviousOwner, stays(res.Owner, res.Counter, res.ResumeAfterMillis))
				return nil
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
	// Owner is the lease's owner as the command left it: empty (free), or
	// the command's own id when it took the lease from a holder.
	Owner string `json:"owner"`
	// ResumeAfterMillis is, for a lease taken from a holder, how long it
	// must stand still before a consumer takes it: the holder's lease
	// duration, or 0 when its row carried none (the consumers' own).
	ResumeAfterMillis int64 `json:"resume_after_ms"`
}

// reset moves key's checkpoint to pos with shardlease.ResetCheckpoint, after
// refusing a held lease without force with the command's own hint.
func reset(ctx context.Context, store *shardlease.DynamoStore, key shardlease.LeaseKey, pos string, force bool, e env) (resetResult, error) {
	before, err := getLease(ctx, store, key)
	if err != nil {
		return resetResult{}, err
	}
	if before.Held() && !force {
		return resetResult{}, fmt.Errorf("%s is held by %s (counter %d): stop that worker and run this again once the lease is free, or pass -force to take it from the holder", key, before.Owner, before.Counter)
	}
	opts := []shardlease.ResetOption{shardlease.WithResetOwner(e.ownerID())}
	if force {
		opts = append(opts, shardlease.WithResetHandover())
	}
	rep, err := shardlease.ResetCheckpoint(ctx, hooked(store, e.acquiring), key, pos, opts...)
	if err != nil {
		if errors.Is(err, shardlease.ErrLeaseNotFound) {
			err = fmt.Errorf("%w; check -stream and -shard ('shardlease list -table %s -stream %s' shows the stream's shards)", err, store.Table(), key.Stream)
		}
		return resetResult{}, err
	}
	return resetResult{
		Table: rep.Table, Stream: key.Stream, Shard: key.Shard, Action: "reset",
		PreviousOwner: rep.TakenFrom, PreviousCheckpoint: rep.Previous.Checkpoint, Checkpoint: pos,
		Counter: rep.Lease.Counter, Forced: force, Owner: rep.Lease.Owner, ResumeAfterMillis: rep.ResumeAfter.Milliseconds(),
	}, nil
}

// stays says that a lease taken from a holder stays with owner at counter
// until consumers take it, after resumeMillis (0: their own lease duration).
func stays(owner string, counter, resumeMillis int64) string {
	wait := resumeText(time.Duration(resumeMillis) * time.Millisecond)
	return fmt.Sprintf("the lease stays with %s (counter %d): a consumer takes it once it has stood still for %s, when the old holder has stopped", owner, counter, wait)
}

// hookedStore calls acquiring with the row last read before each
// AcquireAt: tests write to the row between the command's read and its
// acquire with it. One goroutine, the command's, uses it.
type hookedStore struct {
	*shardlease.DynamoStore
	acquiring func(shardlease.Lease)
	last      shardlease.Lease
}

// hooked returns store, or store with acquiring called before each
// acquire when acquiring is set.
func hooked(store *shardlease.DynamoStore, acquiring func(shardlease.Lease)) shardlease.LeaseStore {
	if acquiring == nil {
		return store
	}
	return &hookedStore{DynamoStore: store, acquiring: acquiring}
}

// Get reads the row and remembers it.
func (s *hookedStore) Get(ctx context.Context, key shardlease.LeaseKey) (shardlease.Lease, error) {
	l, err := s.DynamoStore.Get(ctx, key)
	s.last = l
	return l, err
}

// AcquireAt calls acquiring with the row last read, then acquires.
func (s *hookedStore) AcquireAt(ctx context.Context, key shardlease.LeaseKey, owner string, counter int64) (shardlease.Lease, error) {
	s.acquiring(s.last)
	return s.DynamoStore.AcquireAt(ctx, key, owner, counter)
}
