package balance

import (
	"math"
	"math/rand/v2"
)

// Kind is what an intent asks the scheduler to do.
type Kind int

// The intents of a take round, in the order a round gives them, and the
// notes a coordinator writes after it.
const (
	// Answer: tell the runner of Row to hand the lease over to
	// Row.HandoffTo once its batch is done. Its outcome does not matter.
	Answer Kind = iota + 1
	// Adopt: acquire a row that names me but that it does not run (handed
	// over to it, or given up by an earlier runner of it).
	Adopt
	// TakeFirst: acquire the first readable lease, released or expired:
	// whoever takes it coordinates.
	TakeFirst
	// Take: acquire a free or expired lease.
	Take
	// Ask: request that Row.Owner hand Row over to me.
	Ask
	// Deputy, Wake, Lead and WakeDeputy: write that note on Row (see the
	// Note constants). Their outcome does not matter.
	Deputy
	Wake
	Lead
	WakeDeputy
)

var kindNames = [...]string{"", "answer", "adopt", "take first", "take", "ask", "deputy", "wake", "lead", "wake deputy"}

// String returns the kind's name, for logs and test failures.
func (k Kind) String() string {
	if k <= 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// Intent is one write the scheduler carries out: Kind on Row, conditional
// on the counter Row shows.
type Intent struct {
	Kind Kind
	Row  Row
	// Watch, on a Wake or WakeDeputy, asks the woken worker to list on
	// until it can judge on its own clock which leases stand still: some
	// of the leases it is woken for must expire for it before it may take
	// them.
	Watch bool
}

// stage is where a Round is in its plan.
type stage int

const (
	answering stage = iota
	adopting
	takingFirst
	taking
	asking
	finished
)

// Round hands out a take round's plan one intent at a time, in the order
// it is carried out: handoffs to answer, rows to adopt, the first lease,
// free and expired leases up to the limit, handoffs to ask for. The caller
// reports each intent's outcome with Done before asking for the next: a
// take that failed does not count, and a request refused is replaced by
// another. Round does no I/O and reads no clock.
type Round struct {
	in   Listing
	plan Plan
	rng  *rand.Rand

	stage stage
	i     int // next index within the stage's list
	last  Intent
	held  map[string]bool // Listing.Held and the rows taken since
	mine  int             // leases me runs, as Listing.Rows count them
	busy  bool            // something was taken, adopted or asked for
	// taken counts the rows of Listing.Pending taken this round: their
	// requests are no longer pending.
	taken   int
	leading bool
	steal   *stealer
}

// NewRound plans a take round from a listing (see PlanRound) and starts
// handing out its intents. rng orders the free and expired leases and picks
// the handoffs to ask for: pass a generator seeded per worker.
func NewRound(in Listing, rng *rand.Rand) *Round {
	r := &Round{in: in, plan: PlanRound(in, rng), rng: rng, held: make(map[string]bool, len(in.Held))}
	for id := range in.Held {
		r.held[id] = true
	}
	for _, l := range in.Rows {
		if in.Held[l.Shard] {
			r.mine++
		}
	}
	return r
}

// Plan returns the plan the round carries out.
func (r *Round) Plan() Plan { return r.plan }

// Busy reports whether the round took, adopted or asked for anything so
// far.
func (r *Round) Busy() bool { return r.busy }

// Mine returns how many of the listing's rows me runs now: the ones it ran
// and the ones it took this round.
func (r *Round) Mine() int { return r.mine }

// Next returns the next intent, or false when the round is done.
func (r *Round) Next() (Intent, bool) {
	for {
		it, ok, more := r.nextOfStage()
		if ok {
			r.last = it
			return it, true
		}
		if !more {
			return Intent{}, false
		}
	}
}

// nextOfStage returns the stage's next intent, or moves on to the next
// stage (more) or reports the round done.
func (r *Round) nextOfStage() (it Intent, ok, more bool) {
	p, in := r.plan, r.in
	switch r.stage {
	case answering:
		if r.i < len(p.Answer) {
			r.i++
			return Intent{Kind: Answer, Row: p.Answer[r.i-1]}, true, true
		}
	case adopting:
		if r.i < len(p.Adopt) {
			r.i++
			return Intent{Kind: Adopt, Row: p.Adopt[r.i-1]}, true, true
		}
	case takingFirst:
		r.stage, r.i = taking, 0
		if first, ok := r.firstToTake(); ok {
			return Intent{Kind: TakeFirst, Row: first}, true, true
		}
		return Intent{}, false, true
	case taking:
		// Only a coordinator of an earlier round takes beyond its share:
		// workers starting together (a fleet restarted) each take their
		// share first, whoever wins the first lease.
		if r.i == 0 {
			r.leading = in.Coordinated && in.First != "" && r.held[in.First]
		}
		for takable := p.Takable(); r.i < len(takable); {
			l := takable[r.i]
			r.i++
			if !r.held[l.Shard] && r.mine+in.Waiting < r.limit(l) {
				return Intent{Kind: Take, Row: l}, true, true
			}
		}
	case asking:
		if r.steal == nil {
			r.steal = p.stealer(in, r.mine, len(in.Pending)-r.taken)
		}
		if l, ok := r.steal.next(r.rng); ok {
			return Intent{Kind: Ask, Row: l}, true, true
		}
	case finished:
		return Intent{}, false, false
	}
	r.stage, r.i = r.stage+1, 0
	return Intent{}, false, true
}

// firstToTake returns the first readable lease when me should take it
// before any other: it is free (released, not new) or expired, me does not
// run it, may take it, and is below its WithMaxLeases cap.
func (r *Round) firstToTake() (Row, bool) {
	in := r.in
	if in.First == "" || r.held[in.First] || in.Skip[in.First] || in.Refused[in.First] {
		return Row{}, false
	}
	if in.MaxLeases > 0 && r.mine+in.Waiting >= in.MaxLeases {
		return Row{}, false
	}
	for _, l := range in.Rows {
		if l.Shard == in.First && (l.Owner == "" && l.Counter > 0 || in.Expired[l.Shard]) {
			return l, true
		}
	}
	return Row{}, false
}

// Done reports the outcome of the intent Next returned last: ok when the
// write succeeded (the lease is held, the request made).
func (r *Round) Done(ok bool) {
	it := r.last
	switch it.Kind {
	case Adopt, TakeFirst, Take:
		if !ok {
			return
		}
		r.mine++
		r.busy = true
		r.held[it.Row.Shard] = true
		if r.in.Pending[it.Row.Shard] {
			r.taken++
		}
	case Ask:
		if !ok {
			r.steal.refused(it.Row)
			return
		}
		r.steal.granted(it.Row)
		r.busy = true
	}
}

// limit returns how many leases me may run (handoffs it waits for
// included) before it stops taking l: its share, or the ceiling for a lease
// left over since an earlier round. A lease the store refused is never
// taken (0). A coordinator takes every expired lease and every lease left
// over, up to MaxLeases: only the workers that list can time an expiry,
// and the others may not be listing. A lease just freed it takes up to
// half again its ceiling (LeadCeiling), and wakes the workers below their
// share for the rest: they take a free lease at once.
func (r *Round) limit(l Row) int {
	in, p := r.in, r.plan
	switch {
	case in.Refused[l.Shard]:
		return 0
	case r.leading && !in.Expired[l.Shard] && !in.Leftover[l.Shard]:
		return capAt(LeadCeiling(p.Ceiling), in.MaxLeases)
	case r.leading:
		return capAt(math.MaxInt, in.MaxLeases)
	case in.Leftover[l.Shard]:
		return p.Ceiling
	}
	return p.Target
}

// LeadCeiling is the most leases a coordinator takes while they are just
// freed: half again the ceiling, so that after half a fleet leaves no
// worker holds more than 1.5 times its final share.
func LeadCeiling(ceiling int) int { return max(ceiling, ceiling*3/2) }

// capAt returns n capped by most (0: no cap).
func capAt(n, most int) int {
	if most > 0 {
		return min(n, most)
	}
	return n
}
