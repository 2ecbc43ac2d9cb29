package shardlease

// This file is the processor's source of batches: the reader's batches as
// they come, or held back by the batching window (WithBatchWindow) until
// enough records are held or the oldest has waited long enough. The window
// lives on the processor's goroutine, between the reader and the handler:
// the keeper renews on its own, so renewals never wait for it; a stop or a
// lost lease ends the wait at once, dropping what is held; and records held
// back were never handed, so no checkpoint covers them.

import "time"

// source returns the function the processor takes its next batch from; it
// reports false when the runner must stop or the reader ended, and rest
// when the processor rests instead of waiting (see consumer_processor.go).
func (r *leaseRunner) source(batches <-chan *Batch) func() (b *Batch, ok, rest bool) {
	switch {
	case r.mayRest():
		return func() (*Batch, bool, bool) { return r.receiveOrRest(batches) }
	case r.c.cfg.windowRecords == 0:
		return func() (*Batch, bool, bool) {
			b, ok := r.receive(batches, nil)
			return b, ok, false
		}
	}
	w := &window{r: r, batches: batches}
	return func() (*Batch, bool, bool) {
		b, ok := w.next()
		return b, ok, false
	}
}

// receive waits for the reader's next batch, or for due to fire (nil: never).
// It returns nil and true when due fired.
func (r *leaseRunner) receive(batches <-chan *Batch, due <-chan time.Time) (*Batch, bool) {
	select {
	case <-r.quit:
		return nil, false
	case <-r.leaseCtx.Done():
		return nil, false
	case <-due:
		return nil, true
	case b, ok := <-batches:
		return b, ok
	}
}

// window holds records back for WithBatchWindow; the processor's alone.
type window struct {
	r       *leaseRunner
	batches <-chan *Batch
	held    *Batch    // the records held back, as one batch; nil when none
	since   time.Time // when the oldest held record was read
}

// next returns the held records as one batch once at least the window's
// records are held, the oldest waited the window's wait, or the shard ended.
func (w *window) next() (*Batch, bool) {
	cfg := w.r.c.cfg
	for {
		if w.held != nil && (len(w.held.Records) >= cfg.windowRecords || w.held.end) {
			return w.take(), true
		}
		var due <-chan time.Time
		var t *time.Timer
		if w.held != nil {
			t = time.NewTimer(time.Until(w.since.Add(cfg.windowWait)))
			due = t.C
		}
		b, ok := w.r.receive(w.batches, due)
		if t != nil {
			t.Stop()
		}
		switch {
		case !ok:
			return nil, false // stopping: what is held was never handed
		case b == nil:
			return w.take(), true // the oldest waited long enough
		case len(b.Records) == 0 && !b.end:
			continue
		}
		w.hold(b)
	}
}

// hold adds b's records to those held back.
func (w *window) hold(b *Batch) {
	if w.held == nil {
		w.held, w.since = &Batch{Stream: b.Stream, ShardID: b.ShardID, r: b.r}, time.Now()
	}
	w.held.Records = append(w.held.Records, b.Records...)
	w.held.MillisBehindLatest = b.MillisBehindLatest
	w.held.end = b.end
}

// take returns the held records and holds none.
func (w *window) take() *Batch {
	b := w.held
	w.held = nil
	return b
}
