package session

// The session protocol as a finite model, for the exhaustive exploration in
// explore_test.go. Every decision a worker takes goes through the package's
// own functions: Cutoff sets how long a holder hands records after the send
// of its last successful keep, Mark is what a taker watches stand still, and
// Judge says whether it waits, fences, confirms (a fence that deletes
// nothing) or claims.
//
// # What is modeled
//
//   - Rows. One session row per owner id (a generation, absent when deleted,
//     and a counter) and one lease row per lease (owner id, the generation of
//     the session that keeps it, a counter bumped at every owner change and
//     every checkpoint, and a checkpoint: how many records were handled).
//   - Incarnations. A worker process is an incarnation of an owner id. It
//     opens a session (OpenSession: a new generation whatever the row held)
//     and keeps it every R ticks (a write conditional on the generation). A
//     keep refused ends the session: every lease is dropped and a new session
//     opened, unless the row holds another generation: a restart under the
//     owner id superseded it (Superseded), and it stops for good. Every T ticks it observes every lease: it reads the lease row
//     and the session row the lease names, computes Mark, times how long the
//     mark stood still on its own clock, and calls Judge. Fence deletes the
//     session row conditional on the generation and counter seen; after an
//     ended fence the taker claims, on the lease counters it saw, every lease
//     it saw kept by that session. Anyone else claims such a lease once its
//     "gone" mark stood still for L. A claim is a write conditional on the
//     lease counter seen, naming the taker's session. A holder hands a record
//     and writes its checkpoint (conditional on its owner id and the lease
//     counter) only before its cut-off; a refused checkpoint drops the lease.
//     A lease row naming the incarnation's own session is adopted (after a
//     claim whose reply was lost). A worker holds at most Cap leases, and
//     neither fences nor claims without room.
//   - Network. Claims, fences, checkpoints and releases land at most
//     MaxDelay ticks after they were sent, interleaved with every other step;
//     requests of dead incarnations still land. A reply is taken when its
//     request lands, or when a paused sender resumes. Keeps and opens land
//     when they are sent: a keep landing later only moves the counter later,
//     which delays takers and never lets one act sooner.
//   - Reads. A read may return the version of a row before its last write
//     while that write is less than Stale ticks old (eventual consistency,
//     one version deep), for the lease row and the session row on their own.
//   - Faults, within a budget: a claim, checkpoint or release that lands at
//     any later time (late: retried by an SDK, stuck in a queue); a crash (the incarnation is gone for good); a
//     pause of L to PauseMax ticks (no steps, every belief kept, then
//     replies are taken and keeps resume); a request lost before it lands; a
//     reply lost after its request landed (the sender does not know); a
//     graceful leave (release every lease, then stop); and a restart under
//     the same owner id (a new incarnation, so a new generation) while the
//     previous one is dead or paused, so that it may come back as a zombie.
//     A taker that dies between fencing and claiming is a crash while its
//     fence is on its way; the coverage counters show it is reached.
//
// # What is abstracted, and why that is sound
//
//   - Time is ticks. Every stored time is an age in ticks since the event,
//     clamped at the largest value any rule distinguishes (a keep sent a
//     cut-off window ago or earlier is simply expired). Rules compare ages
//     only, so a clamped state behaves like every state it stands for, and
//     the state space is finite without a horizon: the exploration covers
//     runs of any length within the fault budget.
//   - Counters and generations are only compared for equality, and a new
//     one never equals an old one. Each state renumbers them by rank within
//     their domain (generations; each session row's counters; each lease
//     row's counters), which maps states that behave alike to one. A real
//     session row made again after a fence may restart its counter, but
//     always with a new generation, and every comparison of a session
//     counter is paired with its generation (Mark, FenceSession), so fresh
//     counters lose nothing.
//   - States are stored as 64-bit hashes of their canonical bytes (a new
//     seed every run); the odds that two of a million states collide, and
//     one goes unexplored, are about one in 30 million.
//   - Clocks run at one rate. The margin of Cutoff, a tenth of L, is smaller
//     than a tick here: the ordering argument (a taker fences at least L
//     after the send of the holder's last successful keep) holds without it.
//     Rate drift is not explored; pauses past L stand in for the worst of it.
//   - Handoffs, rewinds, the mail of a session and rows of holders without
//     sessions are not modeled: a lease moves away from a live session only
//     through its holder, and here only by its release.
//
// # What is checked
//
//  1. Never two live incarnations (paused or not) that believe they hold a
//     lease and are both before their cut-off.
//  2. Every accepted checkpoint write is at least the row's checkpoint, and
//     with packed checkpoints no step moves a lease's newest durable
//     checkpoint (the row's, or the packed one that holds when newer) back.
//  3. A lease is held again within Bound ticks of the latest of: the moment
//     it stopped being held, the last fault, the last resume, the landing of
//     the last late request (none may be in flight), whenever some
//     live, unpaused incarnation with an open session has room. Time
//     advances only when every live, unpaused incarnation has done what is
//     due (keep, observation) and every overdue request has landed or been
//     lost, so every path explored is fair and the check holds on all of
//     them.
//
// Every state also has a next step (no deadlock).

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	maxOwners = 3
	maxIncs   = 4
	maxLeases = 2
)

// mutation breaks one rule of the protocol, to show the explorer finds it.
type mutation int

const (
	intact mutation = iota
	// claimWithoutFence claims where Judge says fence.
	claimWithoutFence
	// staleMark keeps timing a mark's stillness across changes of the mark.
	staleMark
	// keepUnconditional lets a keep write the session row whatever it holds,
	// so a fenced session comes back.
	keepUnconditional
	// checkpointOnOwner conditions checkpoint writes on the owner id alone.
	checkpointOnOwner
	// reopenSuperseded opens a new session after a keep refused for another
	// generation of the row, as after a fence.
	reopenSuperseded
	// packedNoCarry claims a lease without carrying the packed checkpoint
	// of the session that kept it.
	packedNoCarry
)

func (m mutation) String() string {
	return [...]string{"intact", "claim without fence", "stale mark", "keep without its condition", "checkpoint on owner id alone", "reopen when superseded", "claim without the packed checkpoint"}[m]
}

// params sets one exploration.
type params struct {
	Owners, Leases                            int
	Cap                                       int // leases a worker may hold
	L, R, T                                   int // lease duration, keep interval, observation interval, in ticks
	MaxDelay                                  int // a request lands within this many ticks
	Stale                                     int // a read may miss writes younger than this many ticks
	Records                                   int // records per lease
	PauseMax                                  int // a pause lasts at most this many ticks
	Faults                                    int // total fault budget
	Crashes, Pauses, Restarts, Losses, Leaves int
	Lates                                     int // requests that land at any later time
	Mutation                                  mutation
	// Packed: checkpoints ride the keeps (session.Valid, packed.go): a hand
	// writes nothing, every keep that lands writes the holder's positions
	// into its session row, a fence leaves them, a claim carries the one
	// that holds, and a holder may flush a landed one to the lease row.
	Packed bool
	Limit  int // states; 0: none
	win    int // window(), once computed
	Tick   time.Duration
}

// window returns the number of ticks after a keep's send during which its
// holder may hand records: ages below it are before the cut-off.
func (p *params) window() int {
	if p.win != 0 {
		return p.win
	}
	epoch := time.Unix(0, 0)
	w := Cutoff(epoch, time.Duration(p.L)*p.Tick).Sub(epoch)
	n := int(w / p.Tick)
	if time.Duration(n)*p.Tick < w {
		n++
	}
	return n
}

// Bound is the liveness bound in ticks: the holder's last keep lands
// (MaxDelay; keeps land at their send here, so this is slack), a read may
// miss it (Stale), the next observation (T), the mark stands still for L
// and is judged at an observation (T), the fence and the claim each land
// (MaxDelay each) and their replies are taken, and one tick because a lease
// is counted untaken from the tick it stops being held; and one
// observation more (T) when the taker that fenced dies before its claim or
// a restart's session replaces a paused one: the next taker times the mark
// itself (Judge never skips the wait for a session it finds over, since an
// operator's tool may have ended it a moment after a keep), from its own
// first observation of the final mark, and confirms the session over with
// a fence that deletes nothing before it claims.
func (p *params) Bound() int {
	return p.MaxDelay + p.Stale + p.T + p.L + p.T + 2*p.MaxDelay + 1 + p.T
}

// Slot states of a request.
const (
	idle    int8 = iota
	flight       // sent, not landed
	replyOK      // landed, reply on its way: success
	replyNo      // landed, reply on its way: refused
)

// Lease request kinds.
const (
	claimReq int8 = iota + 1
	checkpointReq
	releaseReq
)

type sessVer struct{ Gen, Counter int8 } // Gen 0: no row

type sessRow struct {
	Cur, Prev sessVer
	Age       int8 // ticks since Cur was written
}

type leaseVer struct {
	Owner   int8 // owner id + 1; 0: nobody
	Gen     int8 // generation of the session named
	Counter int8
	Ckpt    int8
}

type leaseRow struct {
	Cur, Prev leaseVer
	Age       int8
}

// keepReq is the one open or keep request of an incarnation.
type keepReq struct {
	St         int8
	Superseded bool // refused: the row holds another generation
	Open       bool
	Age        int8 // ticks since sent
	Gen        int8 // keep: generation kept; open: generation opened (reply)
}

type fenceReq struct {
	St, Age             int8
	Owner, Gen, Counter int8
	Ended               bool
}

type leaseReq struct {
	St, Kind, Age int8
	Gen           int8 // claim: the claimer's generation
	Cond          int8 // lease counter the write is conditional on
	Val           int8 // checkpoint written; claim reply: the row's checkpoint
	New           int8 // reply: the lease counter written
	Late          bool // may land at any later time (a fault)
}

type held struct {
	Has          bool
	Counter, Pos int8
}

type seen struct {
	Valid               bool
	Owner, Counter, Gen int8 // the lease row's
	Found               bool
	RowGen, RowCounter  int8
	Still               int8 // ticks the mark stood still
}

// Incarnation status.
const (
	unused int8 = iota
	live
	dead
)

type inc struct {
	Status, Owner   int8
	Paused          bool
	PauseAge        int8
	Gen             int8 // session open; 0: none
	LastOK          int8 // age of the send of the last successful keep
	KeepAge, ObsAge int8
	Keep            keepReq
	KeepFault       int8 // the next keep: 1 lost, 2 its reply lost
	Fence           fenceReq
	Held            [maxLeases]held
	Seen            [maxLeases]seen
	Req             [maxLeases]leaseReq
}

// packEnt is a packed checkpoint on a session row: the lease counter of
// the holding that wrote it (0: none) and the checkpoint.
type packEnt struct{ Counter, Ckpt int8 }

type state struct {
	Sess     [maxOwners]sessRow
	Pack     [maxOwners][maxLeases]packEnt // packed checkpoints, by owner's row and lease
	Lease    [maxLeases]leaseRow
	Inc      [maxIncs]inc
	NextGen  int8
	NextSC   [maxOwners]int8
	NextLC   [maxLeases]int8
	Used     [7]int8 // faults used: total, crashes, pauses, restarts, losses, leaves, lates
	FaultAge int8
	Untaken  [maxLeases]int8
}

const (
	useTotal = iota
	useCrash
	usePause
	useRestart
	useLoss
	useLeave
	useLate
)

func (p *params) budget(kind int) int {
	return [...]int{p.Faults, p.Crashes, p.Pauses, p.Restarts, p.Losses, p.Leaves, p.Lates}[kind]
}

func (p *params) canFault(s *state, kind int) bool {
	return int(s.Used[useTotal]) < p.Faults && int(s.Used[kind]) < p.budget(kind)
}

func (p *params) fault(s *state, kind int) {
	s.Used[useTotal]++
	s.Used[kind]++
	s.Untaken = [maxLeases]int8{}
}

func (p *params) initial() state {
	var s state
	for o := 0; o < p.Owners; o++ {
		s.Inc[o] = inc{Status: live, Owner: int8(o), KeepAge: int8(p.R), ObsAge: int8(p.T), LastOK: int8(p.window())}
	}
	s.NextGen = 1
	for i := range s.NextSC {
		s.NextSC[i] = 1
	}
	for l := range s.Lease {
		s.Lease[l].Cur.Counter, s.Lease[l].Prev.Counter = 1, 1
		s.NextLC[l] = 2
	}
	for o := 0; o < p.Owners; o++ {
		p.sendDue(&s, o)
	}
	return s
}

// mayHand reports whether incarnation i may hand records of lease l: it
// believes it holds the lease and is before its cut-off.
func (p *params) mayHand(s *state, i, l int) bool {
	w := &s.Inc[i]
	return w.Status == live && w.Gen != 0 && w.Held[l].Has && int(w.LastOK) < p.window()
}

// isHeld reports whether a live, unpaused incarnation may hand lease l.
func (p *params) isHeld(s *state, l int) bool {
	for i := range s.Inc {
		if !s.Inc[i].Paused && p.mayHand(s, i, l) {
			return true
		}
	}
	return false
}

// room reports whether incarnation i may take one more lease.
func (p *params) room(s *state, i int) bool {
	w := &s.Inc[i]
	n := 0
	for l := 0; l < p.Leases; l++ {
		if w.Held[l].Has || (w.Req[l].St != idle && w.Req[l].Kind == claimReq) {
			n++
		}
	}
	return n < p.Cap
}

// roomAnywhere reports whether some live, unpaused incarnation with an open
// session has room.
func (p *params) roomAnywhere(s *state) bool {
	for i := range s.Inc {
		w := &s.Inc[i]
		if w.Status == live && !w.Paused && w.Gen != 0 && p.room(s, i) {
			return true
		}
	}
	return false
}

func ownerName(o int8) string { return "w" + strconv.Itoa(int(o)) }

func sessionName(o int8) string { return "s:@" + ownerName(o) }

// seenOf converts what an observer read into the package's Seen.
func seenOf(v seen) Seen {
	if v.Owner == 0 {
		return Seen{Counter: int64(v.Counter)}
	}
	return Seen{
		Owner: ownerName(v.Owner - 1), Counter: int64(v.Counter),
		Session: sessionName(v.Owner - 1), Gen: int64(v.Gen),
		Found: v.Found, RowGen: int64(v.RowGen), RowCounter: int64(v.RowCounter),
	}
}

func clamp(v *int8, max int) {
	if int(*v) < max {
		*v++
	}
}

// String renders a state for traces.
func (s *state) String() string {
	var b strings.Builder
	for o, r := range s.Sess {
		if r.Cur.Gen != 0 {
			fmt.Fprintf(&b, " sess[w%d]=g%d/c%d", o, r.Cur.Gen, r.Cur.Counter)
		}
	}
	for l, r := range s.Lease {
		fmt.Fprintf(&b, " lease[%d]=%s/g%d/c%d/ck%d", l, ownerOrNone(r.Cur.Owner), r.Cur.Gen, r.Cur.Counter, r.Cur.Ckpt)
	}
	for o := range s.Pack {
		for l, e := range s.Pack[o] {
			if e.Counter != 0 {
				fmt.Fprintf(&b, " packed[w%d,%d]=c%d/ck%d", o, l, e.Counter, e.Ckpt)
			}
		}
	}
	for i, w := range s.Inc {
		if w.Status == unused {
			continue
		}
		st := map[int8]string{live: "live", dead: "dead"}[w.Status]
		if w.Paused {
			st = "paused"
		}
		fmt.Fprintf(&b, " | #%d w%d %s g%d ok-age%d held=", i, w.Owner, st, w.Gen, w.LastOK)
		for l, h := range w.Held {
			if h.Has {
				fmt.Fprintf(&b, "%d(c%d,pos%d)", l, h.Counter, h.Pos)
			}
		}
	}
	return strings.TrimSpace(b.String())
}

func ownerOrNone(o int8) string {
	if o == 0 {
		return "-"
	}
	return ownerName(o - 1)
}
