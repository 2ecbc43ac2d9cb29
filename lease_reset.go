package shardlease

// This file moves one shard's checkpoint (ResetCheckpoint), as the CLI's
// reset does, with the fenced edit of lease_edit.go: the row is taken on
// the counter read, its checkpoint written, and the row freed at once when
// it was free, or left held for the holder's lease duration when it was
// taken from a holder, so that the next holder starts only after the old
// one stopped.

import (
	"context"
	"errors"
	"time"
)

// ResetReport is what ResetCheckpoint did.
type ResetReport struct {
	// Table is the lease table, when the store has one.
	Table string
	// Key is the shard's row.
	Key LeaseKey
	// Previous is the row as the reset took it: its owner and counter as
	// read just before the acquire, and the progress the reset replaced.
	// Its owner is empty when the row was free.
	Previous Lease
	// Checkpoint is the checkpoint written; empty when it was kept.
	Checkpoint string
	// TakenFrom is the holder the lease was taken from (WithResetHandover);
	// empty when the row was free.
	TakenFrom string
	// Lease is the row as the reset left it: free, or, when it was taken
	// from a holder, held by the reset's identity until consumers take it.
	Lease Lease
	// ResumeAfter is, for a row taken from a holder, how long its counter
	// must stand still before a consumer takes it: the holder's lease
	// duration as its row carried it. Zero when the row was free, or when
	// the holder's row carried none (the consumers' own lease duration
	// then applies).
	ResumeAfter time.Duration
}

// ResetOption configures ResetCheckpoint.
type ResetOption func(*resetConfig)

type resetConfig struct {
	handover bool
	owner    string
}

// WithResetHandover lets ResetCheckpoint take the lease from the worker
// holding it, instead of refusing. The holder's next write then fails with
// ErrLeaseLost and it stops reading the shard; a batch it was handling may
// be handed to a handler again (at-least-once). The row is left held by
// the reset's identity, so that consumers take it only once it has stood
// still for the holder's lease duration, when the holder has stopped.
func WithResetHandover() ResetOption { return func(c *resetConfig) { c.handover = true } }

// WithResetOwner sets the identity ResetCheckpoint's writes carry (see
// NewOwnerIdentity). The default is a fresh identity of owner
// "shardlease-reset".
func WithResetOwner(identity string) ResetOption {
	return func(c *resetConfig) { c.owner = identity }
}

// ResetCheckpoint moves the checkpoint of key's shard to checkpoint, a
// sequence number or ShardEnd, as the CLI's reset does: the next holder
// resumes after it. An empty checkpoint keeps the row's progress and only
// takes the lease (with WithResetHandover), as the CLI's release -force
// does.
//
// The row is acquired on the exact counter read where the store can
// (DynamoStore.AcquireAt), so a row a consumer wrote meanwhile is left
// alone and the error matches ErrLeaseHeld. A free row is written and
// released at once. A held row is refused with ErrLeaseHeld, naming its
// holder, unless WithResetHandover: then it is taken from its holder,
// written, and left held by the reset's identity (see ResetReport.Lease and
// ResumeAfter), so that no consumer reads the shard until the holder has
// stopped. A missing row is an error matching ErrLeaseNotFound.
func ResetCheckpoint(ctx context.Context, store LeaseStore, key LeaseKey, checkpoint string, opts ...ResetOption) (*ResetReport, error) {
	cfg := resetConfig{owner: NewOwnerIdentity("shardlease-reset")}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case isNil(store):
		return nil, errorf("%w: reset: lease store is nil", ErrInvalidConfig)
	case cfg.owner == "":
		return nil, errorf("%w: reset: owner identity is empty", ErrInvalidConfig)
	}
	if err := key.Validate(); err != nil {
		return nil, errorf("shardlease: reset: %w", err)
	}
	rep := &ResetReport{Table: resolveCaps(store).tableName, Key: key, Checkpoint: checkpoint}
	where := tableAndStream(rep.Table, key.Stream) + ", shard " + key.Shard
	if checkpoint != "" {
		if err := validCheckpoint(checkpoint, -1); err != nil {
			return nil, errorf("shardlease: reset %s: %w", where, err)
		}
	}
	seen, err := store.Get(ctx, key)
	if err != nil {
		return nil, errorf("shardlease: reset %s: read the row: %w", where, err)
	}
	if seen.Owner != "" && !cfg.handover {
		return nil, errorf("shardlease: reset %s: nothing was changed: %w: held by %s (counter %d); stop that worker and reset again once the lease is free, or take it from the holder with WithResetHandover (the CLI's reset -force)",
			where, ErrLeaseHeld, seen.Owner, seen.Counter)
	}
	return rep, rep.carryOut(ctx, leaseEdit{store: store, owner: cfg.owner, handover: cfg.handover, at: resolveCaps(store).atCounter}, seen, where)
}

// carryOut takes the row read as seen, writes the checkpoint and leaves
// the row, filling in the report.
func (rep *ResetReport) carryOut(ctx context.Context, edit leaseEdit, seen Lease, where string) error {
	h, err := edit.take(ctx, rep.Key, seen)
	switch {
	case errors.Is(err, ErrLeaseHeld) && !edit.handover:
		return errorf("shardlease: reset %s: nothing was changed: taken by a worker while the reset ran; stop the consumers of stream %s and reset again, or pass WithResetHandover (the CLI's reset -force): %w", where, rep.Key.Stream, err)
	case err != nil:
		return errorf("shardlease: reset %s: nothing was changed: take the lease: %w", where, err)
	}
	rep.Previous, rep.TakenFrom, rep.ResumeAfter = h.read, h.read.Owner, h.resumeAfter()
	rep.Previous.Checkpoint, rep.Previous.SubSequence, rep.Previous.Start = h.lease.Checkpoint, h.lease.SubSequence, h.lease.Start
	var write func(context.Context, Lease) (Lease, error)
	if rep.Checkpoint != "" {
		write = func(ctx context.Context, held Lease) (Lease, error) {
			return edit.store.Checkpoint(ctx, held, rep.Checkpoint, -1, time.Now())
		}
	}
	rep.Lease, err = edit.finish(ctx, h, "write the checkpoint", write)
	if err != nil {
		return errorf("shardlease: reset %s: %w", where, err)
	}
	return nil
}
