package shardlease

// This file is the batching window (WithBatchWindow): the reader's batches
// held back until enough records are held or the oldest has waited long
// enough (the processor's source, in consumer_processor.go, takes its
// batches through it when a window is set). The window
// lives on the processor's goroutine, between the reader and the handler:
// the keeper renews on its own, so renewals never wait for it; a stop or a
// lost lease ends the wait at once, dropping what is held; and records held
// back were never handed, so no checkpoint covers them.

import "time"

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
