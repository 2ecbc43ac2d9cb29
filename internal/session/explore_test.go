package session

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// The exhaustive exploration of the session protocol's interleavings: a
// breadth-first search over the model of model_test.go, states deduplicated
// by their canonical form, every invariant checked in every state reached.

// result is what one exploration found.
type result struct {
	States, Transitions int
	Depth               int
	Cov                 [covCount]int
	UntakenMax          int // ticks, over states where a live worker had room
	Bad                 string
	Trace               []string
	Elapsed             time.Duration
}

var seed = maphash.MakeSeed()

// key hashes a canonical state to 64 bits. Every field of state is one byte
// wide, so the struct has no padding and its bytes are its value.
func key(s *state) uint64 {
	return maphash.Bytes(seed, unsafe.Slice((*byte)(unsafe.Pointer(s)), unsafe.Sizeof(*s)))
}

type node struct {
	s   state
	idx int32
}

// explore searches every state reachable from the initial one and stops at
// the first broken invariant, with the trace that led there.
func (p *params) explore() result {
	start := time.Now()
	p.win = p.window()
	var r result
	init := p.initial()
	p.canon(&init)
	visited := map[uint64]struct{}{key(&init): {}}
	parent := []int32{-1}
	via := []move{{}}
	frontier := []node{{init, 0}}
	for len(frontier) > 0 && r.Bad == "" {
		if p.Limit > 0 && len(visited) > p.Limit {
			r.Bad = fmt.Sprintf("more than %d states", p.Limit)
			break
		}
		var next []node
		for _, n := range frontier {
			emitted := false
			p.successors(&n.s, func(m move, t *state, cov uint32, bad string) {
				emitted = true
				if r.Bad != "" {
					return
				}
				r.Transitions++
				for c := 0; c < covCount; c++ {
					if cov&(1<<c) != 0 {
						r.Cov[c]++
					}
				}
				p.settleTimers(t)
				if bad == "" {
					bad = p.checkDurable(&n.s, t)
				}
				p.canon(t)
				if bad == "" {
					bad = p.check(t, &r)
				}
				if bad != "" {
					r.Bad = bad
					r.Trace = p.replay(append(pathTo(parent, via, n.idx), m))
					return
				}
				k := key(t)
				if _, ok := visited[k]; ok {
					return
				}
				visited[k] = struct{}{}
				parent = append(parent, n.idx)
				via = append(via, m)
				next = append(next, node{*t, int32(len(parent) - 1)})
			})
			if !emitted && r.Bad == "" {
				r.Bad = "no step is possible"
				r.Trace = p.replay(pathTo(parent, via, n.idx))
			}
			if r.Bad != "" {
				break
			}
		}
		if len(next) > 0 {
			r.Depth++
		}
		frontier = next
	}
	r.States = len(visited)
	r.Elapsed = time.Since(start)
	return r
}

// settleTimers restarts the untaken timer of every lease held now.
func (p *params) settleTimers(t *state) {
	for l := 0; l < p.Leases; l++ {
		if p.isHeld(t, l) {
			t.Untaken[l] = 0
		}
	}
}

// check returns the invariant s breaks, if any, and records the longest
// wait for a lease while some worker had room.
func (p *params) check(s *state, r *result) string {
	for l := 0; l < p.Leases; l++ {
		n := 0
		for i := range s.Inc {
			if p.mayHand(s, i, l) {
				n++
			}
		}
		if n > 1 {
			var hands []string
			for i := range s.Inc {
				if p.mayHand(s, i, l) {
					hands = append(hands, "#"+strconv.Itoa(i))
				}
			}
			return fmt.Sprintf("lease %d may be handed by %s at once", l, strings.Join(hands, " and "))
		}
	}
	if !p.roomAnywhere(s) || s.lateInFlight() {
		return ""
	}
	for l := 0; l < p.Leases; l++ {
		u := int(s.Untaken[l])
		r.UntakenMax = max(r.UntakenMax, u)
		if u > p.Bound() {
			return fmt.Sprintf("lease %d untaken for more than %d ticks since the last fault while a worker has room", l, p.Bound())
		}
	}
	return ""
}

// durable is lease l's newest durable checkpoint in s: the row's, or the
// packed checkpoint that holds for it (session.Valid) when newer.
func (s *state) durable(l int) int8 {
	row := s.Lease[l].Cur
	d := row.Ckpt
	if row.Owner != 0 {
		if e := s.Pack[row.Owner-1][l]; e.Counter != 0 && Valid(sessionName(row.Owner-1), int64(row.Counter), sessionName(row.Owner-1), int64(e.Counter)) {
			d = max(d, e.Ckpt)
		}
	}
	return d
}

// checkDurable returns the invariant a step from s to t breaks when it
// moves a lease's newest durable checkpoint back.
func (p *params) checkDurable(s, t *state) string {
	if !p.Packed {
		return ""
	}
	for l := 0; l < p.Leases; l++ {
		if t.durable(l) < s.durable(l) {
			return fmt.Sprintf("lease %d: the newest durable checkpoint moved backwards, from %d to %d", l, s.durable(l), t.durable(l))
		}
	}
	return ""
}

// lateInFlight reports whether a late request has yet to land: a fault
// that lasts until it does.
func (s *state) lateInFlight() bool {
	for i := range s.Inc {
		for l := range s.Inc[i].Req {
			if s.Inc[i].Req[l].Late && s.Inc[i].Req[l].St == flight {
				return true
			}
		}
	}
	return false
}

func pathTo(parent []int32, via []move, idx int32) []move {
	var rev []move
	for i := idx; i > 0; i = parent[i] {
		rev = append(rev, via[i])
	}
	out := make([]move, 0, len(rev)+1)
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// replay runs the moves from the initial state and renders each state.
func (p *params) replay(moves []move) []string {
	s := p.initial()
	p.canon(&s)
	out := []string{"start: " + s.String()}
	for _, m := range moves {
		var found *state
		p.successors(&s, func(mm move, t *state, _ uint32, _ string) {
			if mm == m && found == nil {
				c := *t
				found = &c
			}
		})
		if found == nil {
			return append(out, fmt.Sprintf("(replay lost at %v)", m))
		}
		s = *found
		p.settleTimers(&s)
		p.canon(&s)
		out = append(out, fmt.Sprintf("%-34s %s", m.String()+":", s.String()))
	}
	return out
}

// canon zeroes what no rule reads and renumbers counters and generations
// by rank, so that states that behave alike are one.
func (p *params) canon(s *state) {
	win := int8(p.window())
	for i := range s.Inc {
		w := &s.Inc[i]
		if w.Status == unused {
			*w = inc{}
			continue
		}
		if !w.Paused {
			w.PauseAge = 0
		}
		if w.Gen == 0 {
			w.LastOK = win
		}
		if w.Keep.St == idle {
			w.Keep = keepReq{}
		}
		if w.Fence.St == idle {
			w.Fence = fenceReq{}
		}
		for l := range w.Req {
			if w.Req[l].St == idle {
				w.Req[l] = leaseReq{}
			}
			if !w.Held[l].Has {
				w.Held[l] = held{}
			}
			if !w.Seen[l].Valid {
				w.Seen[l] = seen{}
			}
		}
	}
	for o := range s.Sess {
		if int(s.Sess[o].Age) >= p.Stale {
			s.Sess[o].Prev, s.Sess[o].Age = s.Sess[o].Cur, int8(p.Stale)
		}
	}
	for l := range s.Lease {
		if int(s.Lease[l].Age) >= p.Stale {
			s.Lease[l].Prev, s.Lease[l].Age = s.Lease[l].Cur, int8(p.Stale)
		}
	}
	p.renumberAll(s)
}

func (p *params) renumberAll(s *state) {
	var buf [96]*int8
	gens := buf[:0]
	for o := range s.Sess {
		gens = append(gens, &s.Sess[o].Cur.Gen, &s.Sess[o].Prev.Gen)
	}
	for l := range s.Lease {
		gens = append(gens, &s.Lease[l].Cur.Gen, &s.Lease[l].Prev.Gen)
	}
	for i := range s.Inc {
		w := &s.Inc[i]
		gens = append(gens, &w.Gen, &w.Keep.Gen, &w.Fence.Gen)
		for l := range w.Req {
			gens = append(gens, &w.Req[l].Gen, &w.Seen[l].Gen, &w.Seen[l].RowGen)
		}
	}
	s.NextGen = renumber(gens)
	for o := range s.Sess {
		cs := append(buf[:0], &s.Sess[o].Cur.Counter, &s.Sess[o].Prev.Counter)
		for i := range s.Inc {
			w := &s.Inc[i]
			if w.Fence.St != idle && int(w.Fence.Owner) == o {
				cs = append(cs, &w.Fence.Counter)
			}
			for l := range w.Seen {
				if w.Seen[l].Valid && int(w.Seen[l].Owner) == o+1 {
					cs = append(cs, &w.Seen[l].RowCounter)
				}
			}
		}
		s.NextSC[o] = renumber(cs)
	}
	for l := range s.Lease {
		cs := append(buf[:0], &s.Lease[l].Cur.Counter, &s.Lease[l].Prev.Counter)
		for i := range s.Inc {
			w := &s.Inc[i]
			cs = append(cs, &w.Held[l].Counter, &w.Req[l].Cond, &w.Req[l].New, &w.Seen[l].Counter)
		}
		for o := range s.Pack {
			cs = append(cs, &s.Pack[o][l].Counter)
		}
		s.NextLC[l] = renumber(cs)
	}
}

// renumber maps the non-zero values behind ptrs to their rank (from 1),
// and returns the next fresh value. Canonical values stay far below 64.
func renumber(ptrs []*int8) int8 {
	var mask uint64
	for _, q := range ptrs {
		if *q > 0 {
			mask |= 1 << uint(*q)
		}
	}
	for _, q := range ptrs {
		if *q > 0 {
			*q = int8(bits.OnesCount64(mask&(1<<uint(*q)-1))) + 1
		}
	}
	return int8(bits.OnesCount64(mask)) + 1
}

// base is the exploration's timing: a lease of 4 ticks (a tick is a
// second), a keep every tick (R = L/4, the nearest tick to L/3), an
// observation every tick, requests that land within the tick they are sent
// in, reads that see every write, one record per lease, and pauses past L.
func base(owners, leases int) params {
	return params{
		Owners: owners, Leases: leases, Cap: leases,
		L: 4, R: 1, T: 1, MaxDelay: 0, Stale: 0, Records: 1, PauseMax: 5,
		Crashes: 1, Pauses: 1, Restarts: 1, Losses: 1, Leaves: 1,
		Mutation: intact, Tick: time.Second,
	}
}

func report(t *testing.T, name string, p params, r result) {
	t.Helper()
	msg := fmt.Sprintf("%s: %d states, %d transitions, depth %d, untaken max %d ticks = %.2f L (bound %d), %v",
		name, r.States, r.Transitions, r.Depth, r.UntakenMax, float64(r.UntakenMax)/float64(p.L), p.Bound(), r.Elapsed.Round(time.Millisecond))
	t.Log(msg)
	if testing.Verbose() {
		fmt.Println(msg)
	}
	for c, n := range r.Cov {
		t.Logf("  %-45s %d", covNames[c], n)
	}
}

// runCase explores p and fails with the trace of the first broken invariant.
func runCase(t *testing.T, name string, p params) result {
	t.Helper()
	r := p.explore()
	report(t, name, p, r)
	if r.Bad != "" {
		t.Fatalf("%s: %s after:\n%s", name, r.Bad, strings.Join(r.Trace, "\n"))
	}
	return r
}

// needCoverage fails unless every path named was reached.
func needCoverage(t *testing.T, r result, want uint32) {
	t.Helper()
	for c := 0; c < covCount; c++ {
		if want&(1<<c) != 0 && r.Cov[c] == 0 {
			t.Errorf("the exploration never reached: %s", covNames[c])
		}
	}
}

// TestProtocolExplore2Workers2Leases: two workers over two leases, any two
// faults of crash, pause past L, lost request or reply, graceful leave and
// same-id restart (so a taker dying between fence and claim, a zombie
// beside its restart, a claim whose reply was lost).
func TestProtocolExplore2Workers2Leases(t *testing.T) {
	p := base(2, 2)
	p.Faults = 2
	r := runCase(t, "2 workers x 2 leases, 2 faults", p)
	needCoverage(t, r, covFenceThenDie|covKeepRefused|covZombie|covAdopt|covLostClaimReply|covClaimGone|covTakenFromPaused)
}

// TestProtocolExplore3Workers2Leases: three workers over two leases, at
// most one lease each, so a crash leaves the lease to the one worker with
// room.
func TestProtocolExplore3Workers2Leases(t *testing.T) {
	p := base(3, 2)
	p.Cap = 1
	p.Faults = 1
	r := runCase(t, "3 workers x 2 leases, cap 1, 1 fault", p)
	needCoverage(t, r, covKeepRefused|covTakenFromPaused)
}

// TestProtocolExplore3WorkersTakerDies: three workers, at most one lease
// each, a holder paused past L or crashed and a taker crashed, at any two
// points: a taker dying between fence and claim leaves the lease to the
// one worker left with room.
func TestProtocolExplore3WorkersTakerDies(t *testing.T) {
	p := base(3, 2)
	p.Cap, p.Faults = 1, 2
	p.Restarts, p.Losses, p.Leaves = 0, 0, 0
	r := runCase(t, "3 workers x 2 leases, cap 1, crash and pause", p)
	needCoverage(t, r, covFenceThenDie|covKeepRefused|covClaimGone|covTakenFromPaused)
}

// TestProtocolExplore3WorkersTwoCrash: three workers, no cap, two of them
// crash at any two points (more than a zone).
func TestProtocolExplore3WorkersTwoCrash(t *testing.T) {
	p := base(3, 2)
	p.Faults, p.Crashes = 2, 2
	p.Pauses, p.Restarts, p.Losses, p.Leaves = 0, 0, 0, 0
	r := runCase(t, "3 workers x 2 leases, two crashes", p)
	needCoverage(t, r, covFenceThenDie|covClaimGone)
}

// TestProtocolExploreStaleReads: reads may miss a write of the same tick,
// the lease row and the session row each on its own (a lease row seen
// before the session row its holder wrote first), with one fault.
func TestProtocolExploreStaleReads(t *testing.T) {
	p := base(2, 2)
	p.Stale, p.Faults = 1, 1
	r := runCase(t, "2 workers x 2 leases, stale reads, 1 fault", p)
	needCoverage(t, r, covStaleSession|covKeepRefused|covTakenFromPaused)
}

// TestProtocolExploreLateRequests: claims, fences and checkpoints land up
// to a tick after they were sent (after the sender's cut-off, after a
// fence), with one fault.
func TestProtocolExploreLateRequests(t *testing.T) {
	p := base(2, 2)
	p.MaxDelay, p.Faults = 1, 1
	r := runCase(t, "2 workers x 2 leases, requests a tick late, 1 fault", p)
	needCoverage(t, r, covKeepRefused|covTakenFromPaused|covAdopt)
}

// TestProtocolExploreSameIDRestart: a worker paused past L is restarted
// under its owner id and then resumes beside the restart (a zombie). The
// zombie's keep is refused for another generation: it stops for good
// (Superseded) instead of opening again. (TestProtocolExploreFindsBrokenRules
// shows what opening again does.)
func TestProtocolExploreSameIDRestart(t *testing.T) {
	p := base(2, 2)
	p.Faults = 2
	p.Crashes, p.Losses, p.Leaves = 0, 0, 0
	r := runCase(t, "2 workers x 2 leases, pause and same-id restart", p)
	needCoverage(t, r, covZombie|covSuperseded|covKeepRefused|covTakenFromPaused)
}

// TestProtocolExploreLateWrites: two records per lease, so checkpoints can
// move back, and claims, checkpoints and releases that land at any later
// time (a fault that lasts until they land): with a holder paused past L,
// and (over one lease) with a crash and a restart under the same owner id,
// whose checkpoint of the dead incarnation lands after the restart's.
func TestProtocolExploreLateWrites(t *testing.T) {
	p := base(2, 2)
	p.Records, p.Faults = 2, 2
	p.Crashes, p.Restarts, p.Losses, p.Leaves, p.Lates = 0, 0, 0, 0, 1
	r := runCase(t, "2 workers x 2 leases, 2 records, pause and a late write", p)
	needCoverage(t, r, covLateWriteRefused|covCheckpointRefused|covTakenFromPaused)

	p = base(2, 1)
	p.Records, p.Faults = 2, 3
	p.Pauses, p.Losses, p.Leaves, p.Lates = 0, 0, 0, 1
	r = runCase(t, "2 workers x 1 lease, 2 records, crash, same-id restart and a late write", p)
	needCoverage(t, r, covLateWriteRefused)
}

// TestProtocolExplorePackedCheckpoints: checkpoints ride the keeps
// (packed checkpoints), two records per lease, with any two faults of
// crash, pause past L, lost request or reply, graceful leave and same-id
// restart (so a taker dying between fence and claim, a zombie beside its
// restart, a flush racing a claim): one reader per lease, a lease's newest
// durable checkpoint never moves back, and every lease is taken again in
// bound.
func TestProtocolExplorePackedCheckpoints(t *testing.T) {
	p := base(2, 2)
	p.Packed, p.Faults = true, 2
	r := runCase(t, "2 workers x 2 leases, packed checkpoints, 2 faults", p)
	needCoverage(t, r, covCarried|covFenceThenDie|covZombie|covKeepRefused|covCheckpointRefused|covTakenFromPaused)

	p = base(3, 2)
	p.Packed, p.Cap, p.Faults = true, 1, 2
	p.Restarts, p.Losses, p.Leaves = 0, 0, 0
	r = runCase(t, "3 workers x 2 leases, packed checkpoints, cap 1, crash and pause", p)
	needCoverage(t, r, covCarried|covFenceThenDie)
}

// TestProtocolExploreFindsBrokenRules breaks one rule at a time and asserts
// the explorer finds the invariant it breaks: the exploration can fail.
func TestProtocolExploreFindsBrokenRules(t *testing.T) {
	for _, c := range []struct {
		m    mutation
		want string
		edit func(*params)
	}{
		{claimWithoutFence, "at once", nil},
		{staleMark, "at once", nil},
		{keepUnconditional, "at once", nil},
		{checkpointOnOwner, "backwards", func(p *params) {
			p.Owners, p.Leases, p.Records, p.Faults, p.Crashes, p.Restarts, p.Lates, p.Pauses = 1, 1, 2, 3, 1, 1, 1, 0
		}},
		{reopenSuperseded, "untaken", func(p *params) {
			p.Leases, p.MaxDelay, p.Faults, p.Restarts = 1, 1, 2, 1
		}},
		{packedNoCarry, "backwards", func(p *params) { p.Packed = true }},
	} {
		p := base(2, 2)
		p.Faults, p.Mutation = 1, c.m
		p.Crashes, p.Restarts, p.Losses, p.Leaves = 0, 0, 0, 0
		if c.edit != nil {
			c.edit(&p)
		}
		r := p.explore()
		msg := fmt.Sprintf("%s: %d states until %q (trace of %d steps)", c.m, r.States, r.Bad, len(r.Trace))
		t.Log(msg + ":\n" + strings.Join(r.Trace, "\n"))
		if testing.Verbose() {
			fmt.Println(msg)
		}
		if !strings.Contains(r.Bad, c.want) {
			t.Errorf("%s: the explorer found %q, want a violation containing %q", c.m, r.Bad, c.want)
		}
	}
}
