package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/session"
)

// A lease a session keeps (Lease.Session) is not written by its holder
// while it runs: its row's counter stands still whether the holder lives or
// not, and only the session's row moves. release therefore reads that
// session as its wait starts, waits at least the session's lease duration
// too, and before it takes the lease fences the session on the counter it
// read: the fence succeeds only if no keep succeeded since, and after it no
// keep of the holder succeeds.

// keepingSession returns the session that keeps l as read when the wait
// starts: the zero Worker when no session keeps l. A session read gone, or
// of another generation (the read may be a moment old), is returned on l's
// generation at counter -1, which no row has, for the fence to confirm.
func (r releaser) keepingSession(ctx context.Context, l shardlease.Lease) (shardlease.Worker, error) {
	if l.Session == "" {
		return shardlease.Worker{}, nil
	}
	named, _ := l.KeptBy()
	read, err := r.store.ReadSession(ctx, named.Stream, named.Owner)
	switch {
	case err == nil && read.Gen == l.SessionGen:
		return read, nil
	case err != nil && !errors.Is(err, shardlease.ErrLeaseNotFound):
		return shardlease.Worker{}, fmt.Errorf("%s: read the session %s that keeps it: %w; nothing was changed", l.Key, l.Session, err)
	}
	named.Counter = session.NoCounter
	return named, nil
}

// endStillSession fences s, the session that keeps l as keepingSession
// read it, once the wait is over. It fails, with nothing changed, when the
// session was kept during the wait: its holder is alive.
func (r releaser) endStillSession(ctx context.Context, l shardlease.Lease, s shardlease.Worker) error {
	if l.Session == "" {
		return nil
	}
	ended, err := r.store.FenceSession(ctx, s)
	if err != nil {
		return fmt.Errorf("%s: end the session %s that keeps it: %w; nothing was changed", l.Key, l.Session, err)
	}
	if !ended {
		return fmt.Errorf("%s: the session %s that keeps it was kept during the wait, so its holder is alive; nothing was changed: stop that worker, or pass -force", l.Key, l.Session)
	}
	return nil
}
