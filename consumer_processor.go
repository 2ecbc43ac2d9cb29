package shardlease

import (
	"sync"
	"time"
)

// The processor runs only while there is work for it. A held shard that
// reads nothing costs two goroutines, the keeper and the reader; the
// processor starts when the reader hands it a batch and rests (its goroutine
// ends) once it has handed every batch and none is on its way. It starts at
// once when the lease starts (to run the start hook), and again for the end:
// a stop, a lost lease, or the reader ending all make sure one runs, which
// then ends the processing for good (the stop hook, procDone). At most one
// processor runs at a time, so batches are still handed in order, one at a
// time, and the reader still reads one batch ahead of the handler.
//
// A processor that holds state between batches does not rest: with per-key
// lanes (WithKeyConcurrency) or a batching window (WithBatchWindow) it runs
// from the lease's start to its end, as before.

// processorState says whether a processor runs. Its fields are under mu.
type processorState struct {
	mu      sync.Mutex
	running bool // a processor goroutine runs (or ended the processing for good)
	sending bool // the reader is handing a batch over
	hooked  bool // the start hook ran
	spawn   func()
	wg      sync.WaitGroup // the processor goroutines
	// sent is poked when the reader ends handing a batch over, so that a
	// processor that could not rest while it did looks again.
	sent chan struct{}
}

// ensure starts a processor unless one runs; it must hold p.mu.
func (p *processorState) ensureLocked() {
	if p.running || p.spawn == nil {
		return
	}
	p.running = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.spawn()
	}()
}

// start sets how a processor is started, and starts the first: it runs the
// start hook before any batch. An ensure before start starts nothing.
func (p *processorState) start(spawn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spawn = spawn
	p.ensureLocked()
}

// ensure makes sure a processor runs: for a batch, or to see the end.
func (p *processorState) ensure() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ensureLocked()
}

// rest ends the processor's goroutine unless a batch is on its way; it
// reports whether the processor may rest.
func (p *processorState) rest() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sending {
		return false
	}
	p.running = false
	return true
}

// firstStart reports whether the start hook is yet to run, and records
// that it runs now.
func (p *processorState) firstStart() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := !p.hooked
	p.hooked = true
	return first
}

// sendingNow records that the reader starts (on) or ends (off) handing a
// batch over; starting one makes sure a processor runs to take it.
func (p *processorState) sendingNow(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sending = on
	if on {
		p.ensureLocked()
		return
	}
	select {
	case p.sent <- struct{}{}:
	default:
	}
}

// mayRest reports whether the processor holds nothing between batches, so
// that it may rest while none comes.
func (r *leaseRunner) mayRest() bool {
	return r.c.cfg.keyConcurrency <= 1 && r.c.cfg.windowRecords == 0
}

// processor is one run of the processor (see the top of this file): the
// start hook the first time, batches while they come, and, unless it rested,
// the end of the processing.
func (r *leaseRunner) processor(batches <-chan *Batch, stopReading func()) {
	if r.proc.firstStart() {
		r.runStartHook()
	}
	if r.process(batches) {
		return // rested: a later batch or the end starts another
	}
	r.runStopHook("")
	stopReading()
	close(r.procDone)
}

// receiveOrRest is receive for a processor that may rest: it rests (rest
// set) instead of waiting when no batch is ready or on its way.
func (r *leaseRunner) receiveOrRest(batches <-chan *Batch) (b *Batch, ok, rest bool) {
	for {
		select {
		case <-r.quit:
			return nil, false, false
		case <-r.leaseCtx.Done():
			return nil, false, false
		case b, ok := <-batches:
			return b, ok, false
		default:
		}
		if r.proc.rest() {
			return nil, false, true
		}
		// A batch is on its way: wait for it, or for the reader to end
		// handing it over, then look again.
		select {
		case <-r.quit:
			return nil, false, false
		case <-r.leaseCtx.Done():
			return nil, false, false
		case b, ok := <-batches:
			return b, ok, false
		case <-r.proc.sent:
		}
	}
}

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
