package kinesisread

import (
	"context"
	"sync"
	"time"
)

// A polling reader of an idle shard spends nearly all its time in the
// idle poll's pause. Start's reader holds no goroutine then: its goroutine
// ends, and a timer starts another to take the next step when the pause is
// over. Parked, a reader costs its state, a timer and its watch of ctx,
// instead of a goroutine whose stack its last GetRecords call grew.
//
// One goroutine at a time takes the reader's steps. The reader is running
// (a goroutine takes steps), parked (the timer will start one) or done
// (deliver is called no more and done was called, once). Whoever moves it
// out of parked, the timer or ctx ending, does so under mu, so exactly one
// of them acts.

// Starter is a Reader that can also read without holding a goroutine while
// it waits.
type Starter interface {
	Reader
	// Start reads as Read does, on goroutines of its own, and returns at
	// once; done is called when the reader has stopped and holds nothing
	// open, where Read would have returned.
	Start(ctx context.Context, pos Position, deliver Deliver, done func())
}

var _ Starter = (*PollingReader)(nil)

// parking is the state of a reader started by Start.
type parking struct {
	p     *poller
	ctx   context.Context
	done  func()
	mu    sync.Mutex
	state parkState   // (mu)
	timer *time.Timer // (mu) made at the first pause
	// unwatch stops the watch of ctx, which ends a parked reader.
	unwatch func() bool
}

// parkState is where a reader started by Start is.
type parkState int

const (
	running parkState = iota
	parked
	stopped
)

// Start reads the shard one batch ahead of deliver, as Read does, without
// a goroutine during the idle poll's pauses (see Starter). The reader
// keeps r, which must not change while it reads.
func (r *PollingReader) Start(ctx context.Context, pos Position, deliver Deliver, done func()) {
	if pos.Ended {
		go func() {
			r.end(deliver)
			done()
		}()
		return
	}
	pk := &parking{p: r.poller(pos, deliver), ctx: ctx, done: done}
	pk.unwatch = context.AfterFunc(ctx, pk.cancelled)
	go pk.run()
}

// run takes the reader's steps until it must stop or pause.
func (pk *parking) run() {
	for pk.ctx.Err() == nil && pk.p.step(pk.ctx) {
		if pk.p.idle {
			pk.p.idle = false
			if pk.park() {
				return
			}
		}
	}
	pk.mu.Lock()
	pk.state = stopped
	pk.mu.Unlock()
	pk.unwatch()
	pk.done()
}

// park arms the timer for the idle poll's pause and reports true, or
// reports false if ctx ended.
func (pk *parking) park() bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.ctx.Err() != nil {
		return false
	}
	pk.state = parked
	if pk.timer == nil {
		pk.timer = time.AfterFunc(pk.p.Config.IdlePoll, pk.wake)
	} else {
		pk.timer.Reset(pk.p.Config.IdlePoll)
	}
	return true
}

// wake ends a pause: the timer's goroutine takes the next steps.
func (pk *parking) wake() {
	pk.mu.Lock()
	if pk.state != parked {
		pk.mu.Unlock()
		return
	}
	pk.state = running
	pk.mu.Unlock()
	pk.run()
}

// cancelled stops a parked reader once ctx ended; a running one sees ctx
// itself.
func (pk *parking) cancelled() {
	pk.mu.Lock()
	if pk.state != parked {
		pk.mu.Unlock()
		return
	}
	pk.state = stopped
	pk.timer.Stop()
	pk.mu.Unlock()
	pk.done()
}
