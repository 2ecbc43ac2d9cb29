package session

import (
	"fmt"
	"time"
)

// The steps of the model (see model_test.go): what each incarnation, the
// network and the faults may do from a state.

// Move kinds.
const (
	mTick uint8 = iota
	mObserve
	mHand
	mLeave
	mCrash
	mPause
	mResume
	mRestart
	mLandKeep
	mLandFence
	mLandReq
	mLoseKeep
	mLoseFence
	mLoseReq
	mLoseKeepReply
	mLoseFenceReply
	mLoseReqReply
	mLate
	mFlush
)

var moveNames = [...]string{
	"tick", "observe", "hand and checkpoint",
	"leave", "crash", "pause", "resume", "restart", "land-keep", "land-fence", "land-lease",
	"lose-keep", "lose-fence", "lose-lease-request", "lose-keep-reply", "lose-fence-reply", "lose-lease-reply", "late",
	"flush the packed checkpoint",
}

// move names one step: its kind, the incarnation, and a lease or a choice.
type move struct {
	Kind uint8
	I, A int8
	B    int8
}

func (m move) String() string {
	if m.Kind == mTick {
		return "tick"
	}
	s := fmt.Sprintf("#%d %s", m.I, moveNames[m.Kind])
	switch m.Kind {
	case mObserve:
		for l := 0; l < maxLeases; l++ {
			if m.B>>(2*l)&1 != 0 {
				s += fmt.Sprintf(" (lease %d row stale)", l)
			}
			if m.B>>(2*l)&2 != 0 {
				s += fmt.Sprintf(" (lease %d session row stale)", l)
			}
		}
	case mHand, mLandReq, mLoseReq, mLoseReqReply, mLate, mFlush:
		s += fmt.Sprintf(" lease %d", m.A)
	case mRestart:
		s = fmt.Sprintf("restart w%d as #%d", m.A, m.I)
	}
	return s
}

// Coverage: paths the issue names, counted over the transitions explored.
const (
	covFenceThenDie uint32 = 1 << iota
	covKeepRefused
	covZombie
	covStaleSession
	covAdopt
	covCheckpointRefused
	covLostClaimReply
	covClaimGone
	covTakenFromPaused
	covSuperseded
	covLateWriteRefused
	covCarried
	covCount = iota
)

var covNames = [covCount]string{
	"taker died between fence and claim", "keep refused (fenced or reopened)", "restart beside a paused incarnation",
	"session row read stale", "lease adopted from its row", "checkpoint refused", "claim reply lost",
	"a gone session confirmed by a non-fencer", "lease taken from a paused holder", "superseded incarnation stopped", "late checkpoint or release refused",
	"a claim carried a packed checkpoint",
}

// emitFn receives one successor: the move, the state after it (before
// canonicalisation), the coverage bits and a broken invariant, if any.
type emitFn func(m move, t *state, cov uint32, bad string)

// successors calls emit for every move enabled in s.
func (p *params) successors(s *state, emit emitFn) {
	if p.tickEnabled(s) {
		t := *s
		p.tick(&t)
		emit(move{Kind: mTick}, &t, 0, "")
	}
	for i := range s.Inc {
		switch s.Inc[i].Status {
		case live:
			if !s.Inc[i].Paused {
				p.workerSteps(s, i, emit)
			}
			p.faultSteps(s, i, emit)
		}
		if s.Inc[i].Status != unused {
			p.networkSteps(s, i, emit)
		}
	}
	p.restartSteps(s, emit)
}

// tickEnabled reports whether time may advance: every live, unpaused
// incarnation has done what is due, and no request is overdue.
func (p *params) tickEnabled(s *state) bool {
	for i := range s.Inc {
		w := &s.Inc[i]
		if w.Status == unused {
			continue
		}
		if (w.Keep.St == flight && int(w.Keep.Age) >= p.MaxDelay) || (w.Fence.St == flight && int(w.Fence.Age) >= p.MaxDelay) {
			return false
		}
		for l := 0; l < p.Leases; l++ {
			if w.Req[l].St == flight && !w.Req[l].Late && int(w.Req[l].Age) >= p.MaxDelay {
				return false
			}
		}
		if w.Status != live {
			continue
		}
		if w.Paused {
			if int(w.PauseAge) >= p.PauseMax {
				return false
			}
			continue
		}
		if p.due(w) {
			return false
		}
	}
	return true
}

// due reports whether an unpaused incarnation has a reply to take, a
// session to open, a keep to send or an observation to make.
func (p *params) due(w *inc) bool {
	if w.Keep.St >= replyOK || w.Fence.St >= replyOK {
		return true
	}
	for l := 0; l < p.Leases; l++ {
		if w.Req[l].St >= replyOK {
			return true
		}
	}
	return w.Gen != 0 && int(w.ObsAge) >= p.T
}

func (p *params) tick(t *state) {
	for o := range t.Sess {
		clamp(&t.Sess[o].Age, p.Stale)
	}
	for l := range t.Lease {
		clamp(&t.Lease[l].Age, p.Stale)
	}
	win := p.window()
	for i := range t.Inc {
		w := &t.Inc[i]
		if w.Status == unused {
			continue
		}
		clamp(&w.KeepAge, p.R)
		clamp(&w.ObsAge, p.T)
		clamp(&w.LastOK, win)
		if w.Keep.St != idle {
			clamp(&w.Keep.Age, max(win, p.MaxDelay))
		}
		if w.Fence.St != idle {
			clamp(&w.Fence.Age, p.MaxDelay)
		}
		for l := range w.Req {
			if w.Req[l].St != idle {
				clamp(&w.Req[l].Age, p.MaxDelay)
			}
			if w.Seen[l].Valid {
				clamp(&w.Seen[l].Still, p.L)
			}
		}
		if w.Paused {
			clamp(&w.PauseAge, p.PauseMax)
		}
	}
	for i := range t.Inc {
		p.sendDue(t, i)
	}
	for l := 0; l < p.Leases; l++ {
		clamp(&t.Untaken[l], p.Bound()+1)
	}
}

// workerSteps are the steps of a live, unpaused incarnation.
func (p *params) workerSteps(s *state, i int, emit emitFn) {
	w := &s.Inc[i]
	if w.Gen != 0 && int(w.ObsAge) >= p.T {
		p.observeSteps(s, i, emit)
	}
	for l := 0; l < p.Leases; l++ {
		if p.mayHand(s, i, l) && int(w.Held[l].Pos) < p.Records && w.Req[l].St == idle {
			t := *s
			h := &t.Inc[i].Held[l]
			h.Pos++
			if !p.Packed {
				t.Inc[i].Req[l] = leaseReq{St: flight, Kind: checkpointReq, Cond: h.Counter, Val: h.Pos}
			}
			emit(move{Kind: mHand, I: int8(i), A: int8(l)}, &t, 0, "")
		}
		if p.Packed && p.mayHand(s, i, l) && w.Req[l].St == idle && s.Pack[w.Owner][l] == (packEnt{w.Held[l].Counter, w.Held[l].Pos}) && w.Held[l].Pos > 0 {
			// The packed checkpoint landed and stood still: flush it to
			// the lease row.
			t := *s
			h := &t.Inc[i].Held[l]
			t.Inc[i].Req[l] = leaseReq{St: flight, Kind: checkpointReq, Cond: h.Counter, Val: h.Pos}
			emit(move{Kind: mFlush, I: int8(i), A: int8(l)}, &t, 0, "")
		}
	}
	if p.canFault(s, useLeave) {
		t := *s
		p.leave(&t, i)
		emit(move{Kind: mLeave, I: int8(i)}, &t, 0, "")
	}
}

// sendDue sends the open or keep a live, unpaused incarnation owes (an
// open while it has no session, a keep every R ticks) and lands it at once:
// a keep landing later than its send only moves the counter later, which
// delays a taker, so landing at the send loses no unsafe interleaving. A
// fault set beforehand (KeepFault) loses the request or its reply.
func (p *params) sendDue(t *state, i int) uint32 {
	w := &t.Inc[i]
	if w.Status != live || w.Paused || w.Keep.St != idle {
		return 0
	}
	if w.Gen != 0 && int(w.KeepAge) < p.R {
		return 0
	}
	w.Keep = keepReq{St: flight, Open: w.Gen == 0, Gen: w.Gen}
	w.KeepAge = 0
	f := w.KeepFault
	w.KeepFault = 0
	if f == 1 {
		w.Keep = keepReq{}
		return 0
	}
	cov := p.landKeep(t, i)
	if f == 2 {
		w.Keep = keepReq{}
		return cov
	}
	return cov | p.replyKeep(t, i)
}

// takeReplies takes every reply waiting for incarnation i, after a pause.
func (p *params) takeReplies(t *state, i int) uint32 {
	w := &t.Inc[i]
	var cov uint32
	if w.Keep.St >= replyOK {
		cov |= p.replyKeep(t, i)
	}
	if w.Fence.St >= replyOK {
		p.replyFence(t, i)
	}
	for l := 0; l < p.Leases; l++ {
		if w.Req[l].St >= replyOK {
			cov |= p.replyReq(t, i, l)
		}
	}
	return cov | p.sendDue(t, i)
}

// leave releases every lease held whose request slot is free, and stops.
func (p *params) leave(t *state, i int) {
	w := &t.Inc[i]
	for l := 0; l < p.Leases; l++ {
		if w.Held[l].Has && w.Req[l].St == idle {
			w.Req[l] = leaseReq{St: flight, Kind: releaseReq, Cond: w.Held[l].Counter, Val: w.Held[l].Pos}
		}
	}
	p.kill(t, i)
	p.fault(t, useLeave)
}

// kill ends incarnation i: it keeps only its requests in flight, which may
// still land.
func (p *params) kill(t *state, i int) {
	w := &t.Inc[i]
	k := inc{Status: dead, Owner: w.Owner}
	if w.Keep.St == flight {
		k.Keep = w.Keep
	}
	if w.Fence.St == flight {
		k.Fence = w.Fence
	}
	for l := range w.Req {
		if w.Req[l].St == flight {
			k.Req[l] = w.Req[l]
		}
	}
	*w = k
}

// faultSteps crash, pause or resume a live incarnation.
func (p *params) faultSteps(s *state, i int, emit emitFn) {
	w := &s.Inc[i]
	if p.canFault(s, useCrash) {
		t := *s
		p.kill(&t, i)
		p.fault(&t, useCrash)
		emit(move{Kind: mCrash, I: int8(i)}, &t, 0, "")
	}
	if !w.Paused && w.KeepFault == 0 && w.Gen != 0 && p.canFault(s, useLoss) {
		for f := int8(1); f <= 2; f++ {
			t := *s
			t.Inc[i].KeepFault = f
			p.fault(&t, useLoss)
			emit(move{Kind: mLoseKeep + uint8(f-1)*(mLoseKeepReply-mLoseKeep), I: int8(i)}, &t, 0, "")
		}
	}
	if !w.Paused && p.canFault(s, usePause) {
		t := *s
		t.Inc[i].Paused, t.Inc[i].PauseAge = true, 0
		p.fault(&t, usePause)
		emit(move{Kind: mPause, I: int8(i)}, &t, 0, "")
	}
	if w.Paused && int(w.PauseAge) >= p.L {
		t := *s
		t.Inc[i].Paused, t.Inc[i].PauseAge = false, 0
		t.Untaken = [maxLeases]int8{}
		cov := p.takeReplies(&t, i)
		emit(move{Kind: mResume, I: int8(i)}, &t, cov, "")
	}
}

// restartSteps start a new incarnation of an owner id whose latest one is
// dead or paused.
func (p *params) restartSteps(s *state, emit emitFn) {
	if !p.canFault(s, useRestart) {
		return
	}
	free := -1
	for i := range s.Inc {
		if s.Inc[i].Status == unused {
			free = i
			break
		}
	}
	if free < 0 {
		return
	}
	for o := 0; o < p.Owners; o++ {
		latest := -1
		for i := range s.Inc {
			if s.Inc[i].Status != unused && int(s.Inc[i].Owner) == o {
				latest = i
			}
		}
		w := &s.Inc[latest]
		if w.Status == live && !w.Paused {
			continue
		}
		var cov uint32
		if w.Status == live {
			cov = covZombie
		}
		t := *s
		t.Inc[free] = inc{Status: live, Owner: int8(o), KeepAge: int8(p.R), ObsAge: int8(p.T), LastOK: int8(p.window())}
		p.sendDue(&t, free)
		p.fault(&t, useRestart)
		emit(move{Kind: mRestart, I: int8(free), A: int8(o)}, &t, cov, "")
	}
}

// still converts ticks to the duration Judge takes.
func (p *params) dur(ticks int8) time.Duration { return time.Duration(ticks) * p.Tick }
