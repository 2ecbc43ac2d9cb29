package shardlease

// This file hands a shard's records to several handler calls at once
// (WithKeyConcurrency). The processor deals each record to a lane by its
// partition key, so one key's records go to one lane, in order; each lane
// is a goroutine that hands what it has queued to the handler as one batch,
// with the retries, narrowing and dead letters of a batch, while the other
// lanes go on.
//
// The checkpoint is the watermark: the position of the last record below
// which every record dealt out is done (handled, or dead-lettered), KPL
// sub-records included. Records dealt out and not yet passed by the
// watermark are in flight; at most WithMaxInFlight of them, so a stuck lane
// stops the dealing instead of growing memory.
//
// A stop (handoff, shutdown) deals no more; each lane finishes the records
// it has queued, first attempts only, and the processor waits for every lane
// before the stop hook and the final checkpoint. The watchdog bounds that
// wait as it bounds one handler call: the handlers' context is cancelled a
// tenth of the grace period before its end, and at its end the handler is
// abandoned, which every lane's call sees. A lost lease stops every lane at
// its next attempt. Records done above the watermark at a stop (a lane still
// failing, say) are handed again to the next holder: at most the records in
// flight.

import (
	"hash/fnv"
	"sync"
)

// lanes is the processor's side of WithKeyConcurrency.
type lanes struct {
	r     *leaseRunner
	wm    *watermark
	queue []chan laneItem // one per lane, written by the processor
	wg    sync.WaitGroup
	once  sync.Once
}

// laneItem is one record dealt to a lane.
type laneItem struct {
	rec    Record
	behind int64 // MillisBehindLatest of its batch
}

// startLanes starts the lanes of WithKeyConcurrency for r; nil without it.
func startLanes(r *leaseRunner) *lanes {
	n := r.c.cfg.keyConcurrency
	if n <= 1 {
		return nil
	}
	limit := r.c.cfg.inFlight()
	ln := &lanes{r: r, wm: newWatermark(r, limit), queue: make([]chan laneItem, n)}
	r.h.lanes = ln
	for i := range ln.queue {
		ln.queue[i] = make(chan laneItem, limit)
		ln.wg.Go(func() { ln.run(i) })
	}
	return ln
}

// laneOf returns the lane of a partition key.
func laneOf(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// dispatch deals b's records to their lanes, waiting while WithMaxInFlight
// records are in flight. It reports false when the runner must stop first.
func (ln *lanes) dispatch(b *Batch) bool {
	r := ln.r
	for i, rec := range b.Records {
		if !ln.wm.admit(positionOf(rec), i == len(b.Records)-1) {
			return false
		}
		ln.queue[laneOf(rec.PartitionKey, len(ln.queue))] <- laneItem{rec: rec, behind: b.MillisBehindLatest}
	}
	return r.mayHand()
}

// run is one lane: it hands what it has queued to the handler as one batch
// until its queue is closed and empty, or the runner must stop.
func (ln *lanes) run(lane int) {
	r := ln.r
	q := ln.queue[lane]
	for {
		first, ok := <-q
		if !ok {
			return
		}
		b := &Batch{Stream: r.key.Stream, ShardID: r.shard, Records: []Record{first.rec}, MillisBehindLatest: first.behind, r: r, lane: lane}
	more:
		for len(b.Records) < int(r.c.cfg.batchSize) {
			select {
			case it, ok := <-q:
				if !ok {
					break more
				}
				b.Records = append(b.Records, it.rec)
				b.MillisBehindLatest = it.behind
			default:
				break more
			}
		}
		if !r.handleFrom(b, ln.mayFinish) {
			return
		}
		ln.wm.done(b.Records)
	}
}

// mayFinish reports whether a lane may hand records it has queued: while
// the lease is surely held, even once a stop was asked for.
func (ln *lanes) mayFinish() bool {
	r := ln.r
	return r.leaseCtx.Err() == nil && !r.isAbandoned() && r.valid()
}

// close deals no more and waits for every lane to finish or give up.
func (ln *lanes) close() {
	if ln == nil {
		return
	}
	ln.once.Do(func() {
		for _, q := range ln.queue {
			close(q)
		}
	})
	ln.wg.Wait()
}

// finish closes the lanes, waits for them, and reports whether every record
// dealt out is done (true without lanes).
func (ln *lanes) finish() bool {
	if ln == nil {
		return true
	}
	ln.close()
	return ln.wm.empty()
}

// checkpoint is Batch.Checkpoint for a lane's batch: the batch's records up
// to and including rec are done.
func (ln *lanes) checkpoint(b *Batch, rec Record) error {
	ln.r.k.mu.Lock()
	err := ln.r.unwritable()
	ln.r.k.mu.Unlock()
	if err != nil {
		return err
	}
	at := positionOf(rec)
	for i, got := range b.Records {
		if positionOf(got).compare(at) == 0 {
			ln.wm.done(b.Records[:i+1])
			return nil
		}
	}
	return errorf("%w: stream %s shard %s: record %s (sub-sequence %d) is not in the batch; with WithKeyConcurrency a batch checkpoints its own records",
		ErrInvalidConfig, b.Stream, b.ShardID, rec.SequenceNumber, rec.SubSequenceNumber)
}

// watermark tracks the records in flight, in shard order, and moves the
// checkpoint past those done. Shared by the processor (admit) and the
// lanes (done) under mu.
type watermark struct {
	r     *leaseRunner
	limit int

	mu    sync.Mutex
	recs  []flight         // (mu) in flight, in shard order, from recs[head]
	head  int              // (mu)
	at    map[position]int // (mu) position → index in recs
	space chan struct{}    // poked when records leave the window
}

// flight is one record in flight.
type flight struct {
	pos   position
	whole bool // the last record of a Kinesis batch: done, its record is whole
	done  bool
}

func newWatermark(r *leaseRunner, limit int) *watermark {
	return &watermark{r: r, limit: limit, at: map[position]int{}, space: make(chan struct{}, 1)}
}

// admit adds a record dealt out, waiting while limit records are in
// flight; it reports false when the runner must stop first.
func (w *watermark) admit(p position, whole bool) bool {
	for {
		w.mu.Lock()
		if len(w.recs)-w.head < w.limit {
			w.at[p] = len(w.recs)
			w.recs = append(w.recs, flight{pos: p, whole: whole})
			w.mu.Unlock()
			return true
		}
		w.mu.Unlock()
		select {
		case <-w.space:
		case <-w.r.quit:
			return false
		case <-w.r.leaseCtx.Done():
			return false
		}
	}
}

// done marks recs done and moves the checkpoint to the new watermark.
func (w *watermark) done(recs []Record) {
	w.mu.Lock()
	for _, rec := range recs {
		if i, ok := w.at[positionOf(rec)]; ok {
			w.recs[i].done = true
		}
	}
	var to position
	moved := false
	for w.head < len(w.recs) && w.recs[w.head].done {
		m := w.recs[w.head]
		delete(w.at, m.pos)
		to, moved = m.pos, true
		if m.whole {
			to.sub = -1
		}
		w.head++
	}
	if w.head > 1024 && w.head*2 > len(w.recs) {
		w.compact()
	}
	w.mu.Unlock()
	if !moved {
		return
	}
	_ = w.r.mark(to)
	select {
	case w.space <- struct{}{}:
	default:
	}
}

// compact drops the records the watermark passed. w.mu is held.
func (w *watermark) compact() {
	n := copy(w.recs, w.recs[w.head:])
	w.recs = w.recs[:n]
	w.head = 0
	for i, m := range w.recs {
		w.at[m.pos] = i
	}
}

// empty reports whether every record dealt out is done.
func (w *watermark) empty() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.head == len(w.recs)
}
