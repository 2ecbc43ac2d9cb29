package soak

import (
	"context"
	"fmt"
	"time"
)

// stallsAtRest checks what the live workers report of lag once the fleet
// drained: within two lease durations every shard a worker holds shows
// checkpoint age 0 and behind-latest 0 in its Status (a caught-up, idle
// shard has no lag), Status lists exactly the shards the worker holds, and
// every row a live worker holds carries a checkpoint age of 0 (its renewals
// wrote it). It returns the shards that still showed lag, as examples.
func (s *soak) stallsAtRest(ctx context.Context, live []*incarnation, drained bool) []string {
	if !drained {
		return nil // records are unhandled: lag is expected
	}
	deadline := time.Now().Add(2 * s.cfg.Lease)
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	for {
		stalled := s.lagNow(ctx, live)
		if len(stalled) == 0 || time.Now().After(deadline) {
			return stalled
		}
		select {
		case <-ctx.Done():
			return stalled
		case <-t.C:
		}
	}
}

// lagNow returns the held shards of live workers that show lag now.
func (s *soak) lagNow(ctx context.Context, live []*incarnation) []string {
	var out []string
	owners := map[string]string{}
	for _, inc := range live {
		if inc == nil || inc.crashed.Load() {
			continue
		}
		c := inc.consumer
		owners[c.OwnerID()] = inc.id
		st := c.Status()
		held := c.Held()
		if len(st.Shards) != len(held) {
			out = append(out, fmt.Sprintf("worker %s: Status lists %d shards, it holds %d", inc.id, len(st.Shards), len(held)))
		}
		for _, sh := range st.Shards {
			if sh.CheckpointAge > 0 || sh.BehindLatest > 0 {
				out = append(out, fmt.Sprintf("worker %s shard %s: checkpoint age %v, behind %v", inc.id, sh.Shard, sh.CheckpointAge, sh.BehindLatest))
			}
		}
	}
	ls, err := s.memoryOrDynamo().List(ctx, s.cfg.Stream)
	if err != nil {
		return append(out, "listing the rows: "+err.Error())
	}
	for _, l := range ls {
		if id, ok := owners[l.Owner]; ok && l.Lag != nil && l.Lag.CheckpointAge > 0 {
			out = append(out, fmt.Sprintf("row %s of worker %s: checkpoint age %v", l.Key, id, l.Lag.CheckpointAge))
		}
	}
	return out
}

// stallProblems reports each shard stallsAtRest found as a problem, and
// returns how many. s.mu is held.
func (s *soak) stallProblems(problem func(string, ...any)) int {
	for _, e := range s.stalled {
		problem("lag once drained: %s", e)
	}
	return len(s.stalled)
}
