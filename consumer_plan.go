package shardlease

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// row is a lease row as the plan sees it.
type row struct {
	// shard is the row's shard id; owner its holder ("" when free).
	shard, owner string
	// counter is the row's fencing counter as listed.
	counter int64
	// handoffTo is the owner a handoff was asked for; "" when none.
	handoffTo string
	// note is the row's coordination note; "" when none.
	note string
	// renewed is set when the holder renewed the row since taking it: a
	// row handed over but not yet adopted is not renewed.
	renewed bool
}

// listing is what one take round knows: the stream's rows as listed, and
// what the worker that plans has judged and remembers about them. Every
// judgement that needs a clock (expiry, how long a lease has been left
// over, how long a request has been pending) is made by the caller and
// handed in, so that planning is a pure function of the listing: the same
// listing gives the same plan, whoever computes it.
type listing struct {
	// me is the owner id of the worker the plan is for.
	me string
	// leases are the stream's lease rows that can be read now: not
	// finished, and every parent finished.
	leases []row
	// workers are the owners of worker rows that moved within a lease
	// duration (workers that hold nothing yet).
	workers []string
	// held are the shards me runs; skip the shards it must not touch (a
	// runner of its own still ends there).
	held, skip map[string]bool
	// expired are the shards whose counter stood still for a lease
	// duration, as the caller watched them.
	expired map[string]bool
	// pending are the shards me asked to be handed over and has not got
	// yet; waiting counts those asked for less than a lease duration ago.
	pending map[string]bool
	waiting int
	// leftover are the shards free or expired for at least a take
	// interval: any worker below the ceiling may take them.
	leftover map[string]bool
	// refused are the shards the store refused to hand out until an
	// operator acts.
	refused map[string]bool
	// first is the shard of the lease whose holder coordinates (see
	// coordinate.go): never asked for, so coordination does not move with
	// balancing. Empty without coordination.
	first string
	// leading is set when me coordinates: it coordinated in its previous
	// round and runs the first lease.
	leading bool
	// maxLeases caps the share (0: no cap); maxSteals caps the handoff
	// requests of one round.
	maxLeases, maxSteals int
}

// plan is what a take round does, decided from a listing.
type plan struct {
	// answer are leases me runs whose handoff was asked for: hand them over.
	answer []row
	// adopt are rows that name me but that it does not run (handed over to
	// it, or given up by an earlier runner of it): acquire them first.
	adopt []row
	// free and stale are the leases me may take (released, and expired),
	// each in a random order of its own; takable is both.
	free, stale []row
	// load counts, per live owner, the leases it runs or is being handed.
	load map[string]int
	// target is me's share and ceiling the most any owner holds,
	// ceil(leases/owners); both capped by maxLeases.
	target, ceiling int
}

// planRound decides a take round from a listing. rng orders the free and
// expired leases, so that workers starting together spread over the
// shards; pass a generator seeded per worker.
func planRound(in listing, rng *rand.Rand) plan {
	p := plan{load: map[string]int{in.me: 0}}
	for _, l := range in.leases {
		if l.handoffTo != "" && l.owner == in.me && in.held[l.shard] {
			p.answer = append(p.answer, l)
		}
	}
	// Count owners and their loads; a lease being handed over counts for
	// the taker, a lease whose owner stopped renewing counts for nobody.
	for _, l := range in.leases {
		id := l.shard
		switch {
		case in.held[id]:
			p.load[in.me]++
		case in.skip[id]:
		case l.owner == "" || in.expired[id]:
		case l.handoffTo != "":
			p.load[l.handoffTo]++
		default:
			p.load[l.owner]++
		}
	}
	// Workers that hold nothing yet count too.
	for _, o := range in.workers {
		if _, ok := p.load[o]; !ok {
			p.load[o] = 0
		}
	}
	p.target, p.ceiling = share(in.me, p.load, len(in.leases), in.maxLeases)
	for _, l := range in.leases {
		id := l.shard
		if in.held[id] || in.skip[id] {
			continue
		}
		switch {
		case l.owner == in.me:
			p.adopt = append(p.adopt, l)
		case l.owner == "":
			p.free = append(p.free, l)
		case in.expired[id]:
			p.stale = append(p.stale, l)
		}
	}
	rng.Shuffle(len(p.free), func(i, j int) { p.free[i], p.free[j] = p.free[j], p.free[i] })
	rng.Shuffle(len(p.stale), func(i, j int) { p.stale[i], p.stale[j] = p.stale[j], p.stale[i] })
	return p
}

// takable returns the free and then the expired leases.
func (p plan) takable() []row { return append(slices.Clip(p.free), p.stale...) }

// limit returns how many leases me may run (handoffs it waits for
// included) before it stops taking l: its share, or the ceiling for a lease
// left over since an earlier round. A lease the store refused is never
// taken (0). A coordinator (in.leading) takes every free and expired lease,
// up to maxLeases: the other workers may not be listing.
func (p plan) limit(in listing, l row) int {
	switch {
	case in.refused[l.shard]:
		return 0
	case in.leading && in.maxLeases > 0:
		return in.maxLeases
	case in.leading:
		return math.MaxInt
	case in.leftover[l.shard]:
		return p.ceiling
	}
	return p.target
}

// steals returns the handoffs me asks for once it runs mine leases and has
// asked asked, counting each request as granted (see stealer).
func (p plan) steals(in listing, mine, asked int, rng *rand.Rand) []row {
	st := p.stealer(in, mine, asked)
	var out []row
	for {
		l, ok := st.next(rng)
		if !ok {
			return out
		}
		out = append(out, l)
		st.granted(l)
	}
}

// stealer picks, one request at a time, the handoffs me asks for: from the
// most loaded live owner, while me is below its share and that owner holds
// at least two more than me would after the request, at most maxSteals
// granted. The caller reports each request's outcome (granted or refused)
// before asking for the next. p.load is left as it was.
type stealer struct {
	p         plan
	in        listing
	load      map[string]int
	requested map[string]bool
	mine      int
	asked     int
	grants    int
}

// stealer starts picking requests for me, which runs mine leases and has
// asked asked.
func (p plan) stealer(in listing, mine, asked int) *stealer {
	load := make(map[string]int, len(p.load))
	for o, n := range p.load {
		load[o] = n
	}
	return &stealer{p: p, in: in, load: load, requested: map[string]bool{}, mine: mine, asked: asked}
}

// next returns the next lease to ask for, or false when me asks for no more.
func (s *stealer) next(rng *rand.Rand) (row, bool) {
	in := s.in
	for s.mine+s.asked < s.p.target && s.grants < in.maxSteals {
		victim, most := "", 0
		for o, n := range s.load {
			if o != in.me && (n > most || n == most && o < victim) {
				victim, most = o, n
			}
		}
		if victim == "" || most < s.mine+s.asked+2 {
			break
		}
		// Ask for a lease the victim runs: one it has renewed since taking
		// it (a row handed over to it but not yet adopted shows no expiry;
		// adopting it would cancel the request), else any.
		var cands, running []row
		for _, l := range in.leases {
			id := l.shard
			if l.owner == victim && l.handoffTo == "" && !in.pending[id] && !s.requested[id] && !in.expired[id] && !in.skip[id] && id != in.first {
				cands = append(cands, l)
				if l.renewed {
					running = append(running, l)
				}
			}
		}
		if len(running) > 0 {
			cands = running
		}
		if len(cands) == 0 {
			// The victim's load is handoffs it is waiting for: look at the
			// next most loaded owner.
			delete(s.load, victim)
			continue
		}
		l := cands[rng.IntN(len(cands))]
		s.requested[l.shard] = true
		return l, true
	}
	return row{}, false
}

// granted records that the request for l was made: l counts for me now.
func (s *stealer) granted(l row) {
	s.load[l.owner]--
	s.load[s.in.me]++
	s.asked++
	s.grants++
}

// refused records that the store refused the request for l (another worker
// asked first, or the lease moved since the listing): l counts for its
// owner no more, and another lease may be asked for instead.
func (s *stealer) refused(l row) { s.load[l.owner]-- }

// share returns me's target and the ceiling ceil(leases/owners) for the
// owners in load. The leases that do not divide evenly go first to owners
// that hold more than the floor already (they keep them), then by owner id,
// so that workers counting the same owners agree on who holds one more,
// even while they are taking leases, and together take every lease once
// instead of racing for the last few. maxLeases caps both (0: no cap).
func share(me string, load map[string]int, leases, maxLeases int) (target, ceiling int) {
	n := len(load)
	floor, extra := leases/n, leases%n
	ceiling = (leases + n - 1) / n
	owners := make([]string, 0, n)
	for o := range load {
		owners = append(owners, o)
	}
	slices.SortFunc(owners, func(a, b string) int {
		if overA, overB := load[a] > floor, load[b] > floor; overA != overB {
			if overA {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	target = floor
	if slices.Index(owners, me) < extra {
		target++
	}
	if maxLeases > 0 {
		target, ceiling = min(target, maxLeases), min(ceiling, maxLeases)
	}
	return target, ceiling
}
