package soak

import (
	"context"
	"fmt"
	"time"
)

// EvDrain is a deploy's drain: a worker hands every lease to the others
// while it keeps running (Consumer.Drain), then stops gracefully and a new
// incarnation starts after a downtime. Nothing may be lost, no shard read
// by two handlers at once.
const EvDrain = "worker drained, then stopped and restarted (a deploy)"

// drainForRestart drains the incarnation in slot, or, if it is down or
// leaving already, the next slot's that is neither, then restarts it after
// downtime.
func (s *soak) drainForRestart(ctx context.Context, slot int, downtime time.Duration) {
	s.mu.Lock()
	var inc *incarnation
	for i := range len(s.slots) {
		c := s.slots[(slot+i)%len(s.slots)]
		if c != nil && c.consumer != nil && !c.crashed.Load() && c.leaving.CompareAndSwap(false, true) {
			inc, slot = c, (slot+i)%len(s.slots)
			break
		}
	}
	s.mu.Unlock()
	if inc == nil {
		fmt.Fprintf(s.cfg.Events, "%6.1fs no live worker to drain\n", s.since())
		return
	}
	s.restarts.Go(func() {
		held := inc.consumer.Held()
		start := time.Now()
		if err := inc.consumer.Drain(ctx); err != nil {
			fmt.Fprintf(s.cfg.Events, "%6.1fs drain of %s ended: %v\n", s.since(), inc.id, err)
		} else {
			s.counts.add(EvDrain, 1)
			fmt.Fprintf(s.cfg.Events, "%6.1fs drained %s (held %v) in %v; restart in %v\n", s.since(), inc.id, held, time.Since(start).Round(time.Millisecond), downtime.Round(time.Millisecond))
		}
		inc.cancel()
		s.relaunch(inc, slot, downtime)
	})
}
