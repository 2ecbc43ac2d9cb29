package shardlease

import (
	"sync"
	"time"
)

// startupWatch keeps a start-up that hangs from being silent: while Run has
// not finished starting (table check, worker row, first shard sync), it
// logs at Warn, every lease duration, which step it is still waiting on.
type startupWatch struct {
	c     *Consumer
	begun time.Time

	mu    sync.Mutex
	step  string
	timer *time.Timer // nil once done
}

// watchStartup starts watching; call step as Run moves on and done when it
// has started or given up.
func (c *Consumer) watchStartup(step string) *startupWatch {
	w := &startupWatch{c: c, begun: time.Now(), step: step}
	every := c.cfg.leaseDuration
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(every, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.timer == nil {
			return
		}
		c.log.Warn("start-up is taking long; still "+w.step, "waited", time.Since(w.begun).Round(time.Millisecond))
		w.timer.Reset(every)
	})
	return w
}

// at records the step Run is waiting on now.
func (w *startupWatch) at(step string) {
	w.mu.Lock()
	w.step = step
	w.mu.Unlock()
}

// done stops the watch; started says whether Run is consuming now.
func (w *startupWatch) done(started bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		return
	}
	w.timer.Stop()
	w.timer = nil
	if started {
		w.c.log.Info("started", "took", time.Since(w.begun).Round(time.Millisecond))
	}
}
