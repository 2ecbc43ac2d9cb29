package session

// Observations, requests landing on the rows, and replies (see
// model_test.go).

// observeSteps reads every lease and the session each names: each row
// fresh or, while its last write is younger than Stale ticks, as it was
// before that write. One step reads them all; which rows read stale is the
// choice.
func (p *params) observeSteps(s *state, i int, emit emitFn) {
	var pick func(l int, choice int8, reads [maxLeases][2]int8)
	pick = func(l int, choice int8, reads [maxLeases][2]int8) {
		if l == p.Leases {
			t := *s
			w := &t.Inc[i]
			w.ObsAge = 0
			var cov uint32
			for l := 0; l < p.Leases; l++ {
				v, r, stale := p.read(s, l, reads[l])
				cov |= p.observe(&t, i, l, v, r) | stale
			}
			emit(move{Kind: mObserve, I: int8(i), B: choice}, &t, cov, "")
			return
		}
		for lv := int8(0); lv < 2; lv++ {
			for sv := int8(0); sv < 2; sv++ {
				if p.readable(s, l, lv, sv) {
					reads[l] = [2]int8{lv, sv}
					pick(l+1, choice|(lv|sv<<1)<<(2*l), reads)
				}
			}
		}
	}
	pick(0, 0, [maxLeases][2]int8{})
}

// readable reports whether lease l's row may be read in version lv (1: the
// one before the last write) and its session's row in version sv.
func (p *params) readable(s *state, l int, lv, sv int8) bool {
	lr := &s.Lease[l]
	v := lr.Cur
	if lv == 1 {
		if int(lr.Age) >= p.Stale || lr.Prev == lr.Cur {
			return false
		}
		v = lr.Prev
	}
	if sv == 0 {
		return true
	}
	if v.Owner == 0 {
		return false
	}
	sr := &s.Sess[v.Owner-1]
	return int(sr.Age) < p.Stale && sr.Prev != sr.Cur
}

// read returns the versions chosen, and covStaleSession when the session
// row read misses the session the lease row names while it is there.
func (p *params) read(s *state, l int, rd [2]int8) (leaseVer, sessVer, uint32) {
	v := s.Lease[l].Cur
	if rd[0] == 1 {
		v = s.Lease[l].Prev
	}
	if v.Owner == 0 {
		return v, sessVer{}, 0
	}
	sr := &s.Sess[v.Owner-1]
	r := sr.Cur
	if rd[1] == 1 {
		r = sr.Prev
		if r.Gen != v.Gen && sr.Cur.Gen == v.Gen {
			return v, r, covStaleSession
		}
	}
	return v, r, 0
}

// observe is what incarnation i does having read lease row v and session
// row r: adopt a lease that names its own session, or judge it by its mark.
func (p *params) observe(t *state, i, l int, v leaseVer, r sessVer) uint32 {
	w := &t.Inc[i]
	if v.Owner == 0 {
		w.Seen[l] = seen{}
		if !w.Held[l].Has && w.Req[l].St == idle && p.room(t, i) && Judge(Seen{}, 0, p.dur(int8(p.L))) == Claim {
			w.Req[l] = leaseReq{St: flight, Kind: claimReq, Gen: w.Gen, Cond: v.Counter}
		}
		return 0
	}
	if v.Owner-1 == w.Owner && v.Gen == w.Gen {
		w.Seen[l] = seen{}
		if w.Held[l].Has || w.Req[l].St != idle {
			return 0
		}
		// A worker takes its own row back with a claim, which carries its
		// own packed checkpoint (lease_packed.go).
		pos := v.Ckpt
		if e := t.Pack[w.Owner][l]; p.Packed && e.Counter == v.Counter && v.Counter == t.Lease[l].Cur.Counter {
			pos = max(pos, e.Ckpt)
		}
		w.Held[l] = held{Has: true, Counter: v.Counter, Pos: pos}
		return covAdopt
	}
	n := seen{Valid: true, Owner: v.Owner, Counter: v.Counter, Gen: v.Gen, Found: r.Gen != 0, RowGen: r.Gen, RowCounter: r.Counter}
	if !seenOf(n).Lives() {
		n.RowCounter = 0
	}
	old := w.Seen[l]
	if old.Valid && (Mark(seenOf(old)) == Mark(seenOf(n)) || p.Mutation == staleMark) {
		n.Still = old.Still
	}
	w.Seen[l] = n
	if w.Held[l].Has || !p.room(t, i) {
		return 0
	}
	step := Judge(seenOf(n), p.dur(n.Still), p.dur(int8(p.L)))
	if step == Fence && p.Mutation == claimWithoutFence {
		step = Claim
	}
	switch step {
	case Fence, Confirm:
		// Confirm is a fence on a counter no row has: it deletes nothing
		// and ends in a claim only when the session is over already.
		at, cov := r.Counter, uint32(0)
		if step == Confirm {
			at, cov = int8(NoCounter), covClaimGone
		}
		if w.Fence.St == idle {
			w.Fence = fenceReq{St: flight, Owner: v.Owner - 1, Gen: v.Gen, Counter: at}
			return cov
		}
	case Claim:
		if w.Req[l].St == idle {
			w.Req[l] = leaseReq{St: flight, Kind: claimReq, Gen: w.Gen, Cond: v.Counter}
			return covClaimGone
		}
	}
	return 0
}

// networkSteps land or lose incarnation i's requests: a request lands with
// its reply, or lands and its reply is lost, or is lost before it lands.
func (p *params) networkSteps(s *state, i int, emit emitFn) {
	w := &s.Inc[i]
	if w.Fence.St == flight {
		p.landSteps(s, i, mLandFence, -1, emit)
	}
	for l := 0; l < p.Leases; l++ {
		if w.Req[l].St == flight {
			p.landSteps(s, i, mLandReq, l, emit)
			if !w.Req[l].Late && p.canFault(s, useLate) {
				t := *s
				t.Inc[i].Req[l].Late = true
				p.fault(&t, useLate)
				emit(move{Kind: mLate, I: int8(i), A: int8(l)}, &t, 0, "")
			}
		}
	}
}

// landSteps emits the landing of one request, with its reply taken (at
// once by a live, unpaused sender; a paused one takes it when it resumes)
// or lost, and its loss before landing.
func (p *params) landSteps(s *state, i int, kind uint8, l int, emit emitFn) {
	for _, lost := range []bool{false, true} {
		if lost && (!p.canFault(s, useLoss) || s.Inc[i].Status != live) {
			continue
		}
		t := *s
		var cov uint32
		var bad string
		switch kind {
		case mLandKeep:
			cov = p.landKeep(&t, i)
		case mLandFence:
			cov = p.landFence(&t, i)
		default:
			cov, bad = p.landReq(&t, i, l)
		}
		w := &t.Inc[i]
		m := move{Kind: kind, I: int8(i), A: int8(l)}
		if lost {
			m.Kind = kind + (mLoseKeepReply - mLandKeep)
			p.fault(&t, useLoss)
			if kind == mLandReq && w.Req[l].Kind == claimReq && w.Req[l].St == replyOK {
				cov |= covLostClaimReply
			}
			dropReply(w, kind, l)
			p.sendDue(&t, i)
		} else if w.Status == live && !w.Paused {
			cov |= p.takeReplies(&t, i)
		}
		if w.Status != live {
			dropReply(w, kind, l)
		}
		emit(m, &t, cov, bad)
	}
	if p.canFault(s, useLoss) {
		t := *s
		dropReply(&t.Inc[i], kind, l)
		p.fault(&t, useLoss)
		p.sendDue(&t, i)
		emit(move{Kind: kind + (mLoseKeep - mLandKeep), I: int8(i), A: int8(l)}, &t, 0, "")
	}
}

// dropReply frees the slot of a request whose reply nobody takes.
func dropReply(w *inc, kind uint8, l int) {
	switch kind {
	case mLandKeep:
		w.Keep = keepReq{}
	case mLandFence:
		w.Fence = fenceReq{}
	default:
		w.Req[l] = leaseReq{}
	}
}

func writeSess(t *state, o int, v sessVer) {
	r := &t.Sess[o]
	r.Prev, r.Cur, r.Age = r.Cur, v, 0
}

func writeLease(t *state, l int, v leaseVer) {
	r := &t.Lease[l]
	r.Prev, r.Cur, r.Age = r.Cur, v, 0
}

// settle turns a landed request's slot into its reply, or frees it when
// its sender is dead.
func settle(w *inc, st *int8, ok bool) {
	switch {
	case ok:
		*st = replyOK
	default:
		*st = replyNo
	}
}

// landKeep applies an open (a new generation, whatever the row held) or a
// keep (conditional on the generation).
func (p *params) landKeep(t *state, i int) uint32 {
	w := &t.Inc[i]
	o := int(w.Owner)
	if w.Keep.Open {
		g := t.NextGen
		t.NextGen++
		writeSess(t, o, sessVer{Gen: g, Counter: t.NextSC[o]})
		t.NextSC[o]++
		w.Keep.Gen = g
		settle(w, &w.Keep.St, true)
		return 0
	}
	ok := t.Sess[o].Cur.Gen == w.Keep.Gen || p.Mutation == keepUnconditional
	if ok {
		writeSess(t, o, sessVer{Gen: w.Keep.Gen, Counter: t.NextSC[o]})
		t.NextSC[o]++
		if p.Packed && w.Gen == w.Keep.Gen {
			// The keep carries the holder's positions (it lands at its
			// send here, so they are the ones it was sent with).
			for l := 0; l < p.Leases; l++ {
				if h := w.Held[l]; h.Has {
					t.Pack[o][l] = packEnt{h.Counter, h.Pos}
				}
			}
		}
	}
	settle(w, &w.Keep.St, ok)
	if !ok {
		r := t.Sess[o].Cur
		w.Keep.Superseded = Superseded(r.Gen != 0, int64(r.Gen), int64(w.Keep.Gen))
		return covKeepRefused
	}
	return 0
}

// landFence deletes the session row if it is still the one seen.
func (p *params) landFence(t *state, i int) uint32 {
	w := &t.Inc[i]
	f := &w.Fence
	r := t.Sess[f.Owner].Cur
	switch {
	case r.Gen == f.Gen && r.Counter == f.Counter:
		writeSess(t, int(f.Owner), sessVer{})
		f.Ended = true
	case r.Gen != f.Gen:
		f.Ended = true
	}
	settle(w, &f.St, true)
	if f.Ended && w.Status != live {
		return covFenceThenDie
	}
	return 0
}

// landReq applies a claim (conditional on the lease counter seen), a
// checkpoint or a release (conditional on the owner id and the counter).
func (p *params) landReq(t *state, i, l int) (uint32, string) {
	w := &t.Inc[i]
	q := &w.Req[l]
	row := t.Lease[l].Cur
	var cov uint32
	var bad string
	ok := false
	if q.Late {
		t.Untaken = [maxLeases]int8{} // the fault ends when the request lands
	}
	switch q.Kind {
	case claimReq:
		if ok = row.Counter == q.Cond; ok {
			if prev := t.holderOf(l, row); prev >= 0 && t.Inc[prev].Paused {
				cov = covTakenFromPaused
			}
			ckpt, carried := p.carry(t, l, row)
			if carried {
				cov |= covCarried
			}
			writeLease(t, l, leaseVer{Owner: w.Owner + 1, Gen: q.Gen, Counter: t.NextLC[l], Ckpt: ckpt})
			q.New, q.Val = t.NextLC[l], ckpt
			t.NextLC[l]++
		}
	default:
		ok = row.Owner == w.Owner+1 && (row.Counter == q.Cond || p.Mutation == checkpointOnOwner)
		if ok {
			if q.Val < row.Ckpt {
				bad = "checkpoint moved backwards"
			}
			v := leaseVer{Owner: row.Owner, Gen: row.Gen, Counter: t.NextLC[l], Ckpt: q.Val}
			if q.Kind == releaseReq {
				v.Owner, v.Gen = 0, 0
			}
			writeLease(t, l, v)
			q.New = t.NextLC[l]
			t.NextLC[l]++
		} else {
			cov = covCheckpointRefused
			if q.Late {
				cov |= covLateWriteRefused
			}
		}
	}
	settle(w, &q.St, ok)
	return cov, bad
}

// carry returns the checkpoint a claim of lease l, whose row is row, writes:
// the packed checkpoint of the session the row names when it holds and is
// newer (and it leaves the session row), else the row's.
func (p *params) carry(t *state, l int, row leaseVer) (ckpt int8, carried bool) {
	if !p.Packed || row.Owner == 0 || p.Mutation == packedNoCarry {
		return row.Ckpt, false
	}
	e := &t.Pack[row.Owner-1][l]
	if e.Counter == 0 || !Valid(sessionName(row.Owner-1), int64(row.Counter), sessionName(row.Owner-1), int64(e.Counter)) {
		return row.Ckpt, false
	}
	ckpt, carried = max(row.Ckpt, e.Ckpt), e.Ckpt > row.Ckpt
	*e = packEnt{}
	return ckpt, carried
}

// holderOf returns the live incarnation whose session the lease row names,
// or -1.
func (s *state) holderOf(l int, row leaseVer) int {
	for i := range s.Inc {
		w := &s.Inc[i]
		if w.Status == live && row.Owner == w.Owner+1 && row.Gen == w.Gen && w.Gen != 0 {
			return i
		}
	}
	return -1
}

// replyKeep takes the reply of an open or a keep. A keep refused ends the
// session: every lease is dropped and a new session opened.
func (p *params) replyKeep(t *state, i int) uint32 {
	w := &t.Inc[i]
	k := w.Keep
	w.Keep = keepReq{}
	age := k.Age
	switch {
	case k.Open:
		w.Gen, w.LastOK = k.Gen, age
		w.Held = [maxLeases]held{}
	case k.St == replyOK && k.Gen == w.Gen:
		w.LastOK = min(w.LastOK, age)
	case k.St == replyNo && k.Superseded && p.Mutation != reopenSuperseded:
		p.kill(t, i)
		return covSuperseded
	case k.St == replyNo:
		w.Gen, w.LastOK = 0, int8(p.window())
		w.Held = [maxLeases]held{}
	}
	return 0
}

// replyFence takes the reply of a fence: when it ended the session, claim
// every lease seen kept by it.
func (p *params) replyFence(t *state, i int) {
	w := &t.Inc[i]
	f := w.Fence
	w.Fence = fenceReq{}
	if !f.Ended {
		return
	}
	for l := 0; l < p.Leases; l++ {
		n := w.Seen[l]
		if !n.Valid || n.Owner != f.Owner+1 || n.Gen != f.Gen || w.Held[l].Has || w.Req[l].St != idle || !p.room(t, i) {
			continue
		}
		w.Req[l] = leaseReq{St: flight, Kind: claimReq, Gen: w.Gen, Cond: n.Counter}
	}
}

// replyReq takes the reply of a claim, a checkpoint or a release.
func (p *params) replyReq(t *state, i, l int) uint32 {
	w := &t.Inc[i]
	q := w.Req[l]
	w.Req[l] = leaseReq{}
	h := &w.Held[l]
	switch {
	case q.Kind == claimReq && q.St == replyOK && q.Gen == w.Gen:
		*h = held{Has: true, Counter: q.New, Pos: q.Val}
	case q.Kind == checkpointReq && q.St == replyOK && h.Has:
		h.Counter = q.New
	case q.Kind == checkpointReq && q.St == replyNo:
		*h = held{}
	}
	return 0
}
