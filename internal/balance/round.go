package balance

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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
	// TakeFirst: acquire the first readable lease of a stream, released
	// or expired: whoever takes it coordinates that stream.
	TakeFirst
	// Take: acquire a free or expired lease.
	Take
	// Ask: request that Row.Owner hand Row over to me (for fair share, or
	// a first lease a coordinator gathers).
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
	// Names, on a Deputy or WakeDeputy, is what the naming names: the
	// coordinator's first lease, with the namings of other coordinators
	// the row carries (see Names); "" names the coordinator's alone.
	Names string
}

// stage is where a Round is in its plan.
type stage int

const (
	answering stage = iota
	adopting
	takingFirst
	taking
	gathering
	presence
	asking
	finished
)

// Round hands out a take round's plan one intent at a time, in the order
// it is carried out: handoffs to answer, rows to adopt, the first leases,
// free and expired leases up to the limit, first leases to gather, handoffs
// to ask for. The caller
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
	firsts  []Row // the first leases to take (takingFirst) or gather
	// gathered counts the first leases asked for while gathering, and the
	// leases asked for presence: they count for me as the requests of
	// earlier rounds do. present counts the latter, which count against
	// MaxSteals; askedNow holds the streams of both.
	gathered, present int
	askedNow          map[string]bool
	steal             *stealer
}

// Gathering: a worker that holds the first lease of a stream coordinates
// that stream, and lists every take interval. When one worker reads
// several streams, their first leases are gathered on one worker, so that
// one worker lists for all of them (as it would for one stream): a
// coordinator asks for the first lease of another stream it reads while
// that lease's holder's owner id sorts after its own (see toGather). So
// the coordinator of lowest id gathers the others; a coordinator never
// asks one of lower id, and fair share asks for a first lease only of a
// worker that runs no other it may ask for, and never for its anchor. A coordinator gathers while it would hold no more first leases
// than the ceiling and no more leases than LeadCeiling (see mayGather). A
// stream whose readers differ (a worker that reads it and not the
// gatherer's lowest stream) keeps a coordinator of its own.

// NewRound plans a take round from a listing (see PlanRound) and starts
// handing out its intents. rng orders the free and expired leases and picks
// the handoffs to ask for: pass a generator seeded per worker.
func NewRound(in Listing, rng *rand.Rand) *Round {
	r := &Round{in: in, plan: PlanRound(in, rng), rng: rng, held: make(map[string]bool, len(in.Held)), askedNow: map[string]bool{}}
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
		if r.i == 0 {
			r.firsts = r.firstsToTake()
		}
		if r.i < len(r.firsts) && r.mayTakeFirst() {
			r.i++
			return Intent{Kind: TakeFirst, Row: r.firsts[r.i-1]}, true, true
		}
	case taking:
		// Only a coordinator of an earlier round takes beyond its share:
		// workers starting together (a fleet restarted) each take their
		// share first, whoever wins the first lease.
		if r.i == 0 {
			_, holds := Anchor(in.firsts(), r.held)
			r.leading = in.Coordinated && holds
		}
		for takable := p.Takable(); r.i < len(takable); {
			l := takable[r.i]
			r.i++
			if !r.held[l.Shard] && r.mine+in.Waiting < r.limit(l) {
				return Intent{Kind: Take, Row: l}, true, true
			}
		}
	case gathering:
		if r.i == 0 {
			r.firsts = r.toGather()
		}
		if r.i < len(r.firsts) && r.mayGather() {
			r.i++
			return Intent{Kind: Ask, Row: r.firsts[r.i-1]}, true, true
		}
	case presence:
		if r.i == 0 {
			r.firsts = r.toBePresent()
		}
		if r.i < len(r.firsts) && r.present < in.MaxSteals {
			r.i++
			return Intent{Kind: Ask, Row: r.firsts[r.i-1]}, true, true
		}
	case asking:
		if r.steal == nil {
			r.steal = p.stealer(in, r.mine, len(in.Pending)-r.taken+r.gathered)
			r.steal.grants = r.present
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

// firstsToTake returns, by id, the first readable leases me should take
// before any other: free (released, or new and left over a take interval:
// workers starting together take new rows by their share first) or
// expired, not run by me, and not to be left alone. A new first lease that
// the workers reading its stream, each at its share of a table they share
// with workers of other streams, all left free is so taken beyond the
// share (fair share then moves another lease away).
func (r *Round) firstsToTake() []Row {
	in := r.in
	firsts := in.firsts()
	var out []Row
	for _, l := range in.Rows {
		id := l.Shard
		if !firsts[id] || r.held[id] || in.Skip[id] || in.Refused[id] {
			continue
		}
		if l.Owner == "" && (l.Counter > 0 || in.Leftover[id]) || in.Expired[id] {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Row) int { return strings.Compare(a.Shard, b.Shard) })
	return out
}

// mayTakeFirst reports whether me is below its WithMaxLeases cap.
func (r *Round) mayTakeFirst() bool {
	return r.in.MaxLeases == 0 || r.mine+r.in.Waiting < r.in.MaxLeases
}

// Presence: a worker that reads a stream and holds none of its leases is
// unknown to the stream's coordinator, which names its deputies among the
// workers it sees holding the stream's leases. Where workers read
// different streams, that could leave a stream's coordinator with no
// deputy that reads the stream. So me asks, for each stream of the listing
// of which it holds nothing and asked for nothing, one lease (never a first
// one) of the owner that holds the most of that stream, at least two, and
// more leases in all than me: the move keeps every worker's total within
// one of fair share's (fair share asks only of an owner two above), so the
// lease does not come back, and it never takes an owner's last lease of a
// stream.

// toBePresent returns, by stream, the leases me asks for presence.
func (r *Round) toBePresent() []Row {
	in, p := r.in, r.plan
	firsts := in.firsts()
	mine := map[string]bool{}
	count := map[string]map[string][]Row{} // stream → owner → its rows that may move
	for _, l := range in.Rows {
		s := StreamOf(l.Shard)
		if r.held[l.Shard] || in.Pending[l.Shard] || l.HandoffTo == in.Me || r.askedNow[s] {
			mine[s] = true
			continue
		}
		if l.Owner == "" || l.Owner == in.Me || in.Expired[l.Shard] || l.HandoffTo != "" || in.Skip[l.Shard] {
			continue
		}
		if count[s] == nil {
			count[s] = map[string][]Row{}
		}
		count[s][l.Owner] = append(count[s][l.Owner], l)
	}
	if len(count) < 2 && len(mine) == 0 {
		return nil // one stream: fair share's stealer sees to it
	}
	total := r.mine + in.Waiting + r.gathered
	var out []Row
	for _, s := range slices.Sorted(maps.Keys(count)) {
		if mine[s] {
			continue
		}
		victim, most := "", 1
		for o, rows := range count[s] {
			if n := len(rows); p.Load[o] > total && (n > most || n == most && victim != "" && o < victim) {
				victim, most = o, n
			}
		}
		if victim == "" {
			continue
		}
		for _, l := range count[s][victim] {
			if !firsts[l.Shard] && l.Renewed {
				out = append(out, l)
				total++
				break
			}
		}
	}
	return out
}

// mayGather reports whether me may ask for one more first lease: it would
// then hold no more first leases than the ceiling, and no more leases than
// LeadCeiling, and it runs a lease that is no first one. Fair share then
// moves such leases of its to the workers below their share (it asks for
// first leases last), as it does after a coordinator took leases just
// freed; a worker that runs first leases only gathers none, so that fair
// share's moves and its own do not undo each other.
func (r *Round) mayGather() bool {
	firsts, other := 0, 0
	all := r.in.firsts()
	for id := range r.held {
		if all[id] {
			firsts++
		} else {
			other++
		}
	}
	load := r.mine + r.in.Waiting + r.gathered
	return other > 0 && firsts+r.gathered < r.plan.Ceiling && load < LeadCeiling(r.plan.Ceiling)
}

// toGather returns, by id, the first leases of other streams that me, a
// coordinator, asks for (see Gathering): each held by a live owner whose
// owner id sorts after me's, not being handed over. The order is the owner
// ids', which every worker sees alike whatever streams it reads: ranking
// by the first leases each sees would let two workers that read different
// streams each rank first, and ask one lease of each other back and forth.
func (r *Round) toGather() []Row {
	in := r.in
	firsts := in.firsts()
	if _, ok := Anchor(firsts, r.held); !ok {
		return nil
	}
	var out []Row
	for _, l := range in.Rows {
		id := l.Shard
		if !firsts[id] || l.Owner == "" || l.Owner <= in.Me || in.Expired[id] || r.held[id] {
			continue
		}
		if l.HandoffTo == "" && !in.Pending[id] && !in.Skip[id] && !in.Refused[id] {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Row) int { return strings.Compare(a.Shard, b.Shard) })
	return out
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
		switch {
		case (r.stage == gathering || r.stage == presence) && ok:
			r.gathered++
			r.busy = true
			r.askedNow[StreamOf(it.Row.Shard)] = true
			if r.stage == presence {
				r.present++
			}
		case r.stage == gathering || r.stage == presence:
		case !ok:
			r.steal.refused(it.Row)
		default:
			r.steal.granted(it.Row)
			r.busy = true
		}
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
