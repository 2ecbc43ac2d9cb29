package balance

import (
	"math/rand/v2"
	"slices"
	"strings"
)

// Row is a lease row as the plan sees it.
type Row struct {
	// Shard is the row's id, its key "stream:shard" (see StreamOf); Owner
	// its holder ("" when free).
	Shard, Owner string
	// Counter is the row's fencing counter as listed.
	Counter int64
	// HandoffTo is the owner a handoff was asked for; "" when none.
	HandoffTo string
	// Note is the row's coordination note; "" when none.
	Note string
	// Renewed is set when the holder renewed the row since taking it: a
	// row handed over but not yet adopted is not renewed.
	Renewed bool
	// Finished is set on a row whose shard was read to its end. A
	// listing's Rows are never finished.
	Finished bool
}

// Listing is what one take round knows: the stream's rows as listed, and
// what the worker that plans has judged and remembers about them. Every
// judgement that needs a clock (expiry, how long a lease has been left
// over, how long a request has been pending) is made by the caller and
// handed in, so that planning is a pure function of the listing: the same
// listing gives the same plan, whoever computes it.
type Listing struct {
	// Me is the owner id of the worker the plan is for.
	Me string
	// Rows are the stream's lease rows that can be read now: not
	// finished, and every parent finished.
	Rows []Row
	// Workers are the owners of worker rows that moved within a lease
	// duration (workers that hold nothing yet).
	Workers []string
	// Held are the shards me runs; Skip the shards it must not touch (a
	// runner of its own still ends there).
	Held, Skip map[string]bool
	// Expired are the shards whose counter stood still for a lease
	// duration, as the caller watched them.
	Expired map[string]bool
	// Pending are the shards me asked to be handed over and has not got
	// yet; waiting counts those asked for less than a lease duration ago.
	Pending map[string]bool
	Waiting int
	// Leftover are the shards free or expired for at least a take
	// interval: any worker below the ceiling may take them.
	Leftover map[string]bool
	// Refused are the shards the store refused to hand out until an
	// operator acts.
	Refused map[string]bool
	// First is the lease a coordinator's deputies watch: the lowest of
	// Firsts (see FirstReadable). Empty without coordination.
	First string
	// Firsts are the first readable lease of each stream in Rows (see
	// Firsts): whoever holds one coordinates its stream. They are never
	// asked for by fair share, so coordination does not move with
	// balancing; a coordinator gathers them (see Round). nil is First
	// alone.
	Firsts map[string]bool
	// Coordinated is set when me coordinated at its previous round: if it
	// still runs the first lease once it has tried to take it, it takes
	// every free and expired lease, beyond its share.
	Coordinated bool
	// Stalled are the shards whose counter stood still longer than a
	// renewal (and half a take interval), as the caller watched them: their
	// holder looks late, and they may expire soon.
	Stalled map[string]bool
	// MaxLeases caps the share (0: no cap); MaxSteals caps the handoff
	// requests of one round.
	MaxLeases, MaxSteals int
}

// Plan is what a take round does, decided from a listing.
type Plan struct {
	// Answer are leases me runs whose handoff was asked for: hand them over.
	Answer []Row
	// Adopt are rows that name me but that it does not run (handed over to
	// it, or given up by an earlier runner of it): acquire them first.
	Adopt []Row
	// Free and Stale are the leases me may take (released, and expired),
	// each in a random order of its own; Takable returns both.
	Free, Stale []Row
	// Load counts, per live owner, the leases it runs or is being handed.
	Load map[string]int
	// Target is me's share and Ceiling the most any owner holds,
	// ceil(leases/owners); both capped by MaxLeases.
	Target, Ceiling int
}

// PlanRound decides a take round from a listing. rng orders the free and
// expired leases, so that workers starting together spread over the
// shards; pass a generator seeded per worker.
func PlanRound(in Listing, rng *rand.Rand) Plan {
	p := Plan{Load: map[string]int{in.Me: 0}}
	for _, l := range in.Rows {
		if l.HandoffTo != "" && l.Owner == in.Me && in.Held[l.Shard] {
			p.Answer = append(p.Answer, l)
		}
	}
	// Count owners and their loads; a lease being handed over counts for
	// the taker, a lease whose owner stopped renewing counts for nobody.
	for _, l := range in.Rows {
		id := l.Shard
		switch {
		case in.Held[id]:
			p.Load[in.Me]++
		case in.Skip[id]:
		case l.Owner == "" || in.Expired[id]:
		case l.HandoffTo != "":
			p.Load[l.HandoffTo]++
		default:
			p.Load[l.Owner]++
		}
	}
	// Workers that hold nothing yet count too.
	for _, o := range in.Workers {
		if _, ok := p.Load[o]; !ok {
			p.Load[o] = 0
		}
	}
	p.Target, p.Ceiling = Share(in.Me, p.Load, len(in.Rows), in.MaxLeases)
	for _, l := range in.Rows {
		id := l.Shard
		if in.Held[id] || in.Skip[id] {
			continue
		}
		switch {
		case l.Owner == in.Me:
			p.Adopt = append(p.Adopt, l)
		case l.Owner == "":
			p.Free = append(p.Free, l)
		case in.Expired[id]:
			p.Stale = append(p.Stale, l)
		}
	}
	rng.Shuffle(len(p.Free), func(i, j int) { p.Free[i], p.Free[j] = p.Free[j], p.Free[i] })
	rng.Shuffle(len(p.Stale), func(i, j int) { p.Stale[i], p.Stale[j] = p.Stale[j], p.Stale[i] })
	if in.MaxLeases > 0 {
		// A capped worker may have room for few leases: the first
		// readable ones (new rows among them) come first, so that a cap
		// never leaves a stream without its coordinator while its worker
		// holds another lease.
		firsts := in.firsts()
		slices.SortStableFunc(p.Free, func(a, b Row) int {
			switch fa, fb := firsts[a.Shard], firsts[b.Shard]; {
			case fa == fb:
				return 0
			case fa:
				return -1
			}
			return 1
		})
	}
	return p
}

// Takable returns the free and then the expired leases.
func (p Plan) Takable() []Row { return append(slices.Clip(p.Free), p.Stale...) }

// stealer picks, one request at a time, the handoffs me asks for: from the
// most loaded live owner, while me is below its share and that owner holds
// at least two more than me would after the request, at most MaxSteals
// granted. The caller reports each request's outcome (granted or refused)
// before asking for the next. p.Load is left as it was.
type stealer struct {
	p         Plan
	in        Listing
	load      map[string]int
	requested map[string]bool
	firsts    map[string]bool // never asked for
	mine      int
	asked     int
	grants    int
}

// stealer starts picking requests for me, which runs mine leases and has
// asked asked.
func (p Plan) stealer(in Listing, mine, asked int) *stealer {
	load := make(map[string]int, len(p.Load))
	for o, n := range p.Load {
		load[o] = n
	}
	return &stealer{p: p, in: in, load: load, requested: map[string]bool{}, firsts: in.firsts(), mine: mine, asked: asked}
}

// next returns the next lease to ask for, or false when me asks for no more.
func (s *stealer) next(rng *rand.Rand) (Row, bool) {
	in := s.in
	for s.mine+s.asked < s.p.Target && s.grants < in.MaxSteals {
		victim, most := "", 0
		for o, n := range s.load {
			if o != in.Me && (n > most || n == most && o < victim) {
				victim, most = o, n
			}
		}
		if victim == "" || most < s.mine+s.asked+2 {
			break
		}
		// Ask for a lease the victim runs: one it has renewed since taking
		// it (a row handed over to it but not yet adopted shows no expiry;
		// adopting it would cancel the request), else any; a lease that is
		// no stream's first before a first one, and never the victim's
		// anchor (its lowest first lease, which its deputies watch).
		cands := s.candidates(victim)
		if len(cands) == 0 {
			// The victim's load is handoffs it is waiting for: look at the
			// next most loaded owner.
			delete(s.load, victim)
			continue
		}
		l := cands[rng.IntN(len(cands))]
		s.requested[l.Shard] = true
		return l, true
	}
	return Row{}, false
}

// candidates returns the leases of victim the stealer may ask for, best
// tier first: renewed and no first lease, then no first lease, then
// renewed, then any, never victim's anchor.
func (s *stealer) candidates(victim string) []Row {
	in := s.in
	var tiers [4][]Row
	anchor := ""
	for _, l := range in.Rows {
		if l.Owner == victim && s.firsts[l.Shard] && (anchor == "" || l.Shard < anchor) {
			anchor = l.Shard
		}
	}
	for _, l := range in.Rows {
		id := l.Shard
		if l.Owner != victim || l.HandoffTo != "" || in.Pending[id] || s.requested[id] || in.Expired[id] || in.Skip[id] || id == anchor {
			continue
		}
		t := 0
		if s.firsts[id] {
			t = 2
		}
		if !l.Renewed {
			t++
		}
		tiers[t] = append(tiers[t], l)
	}
	for _, t := range tiers {
		if len(t) > 0 {
			return t
		}
	}
	return nil
}

// granted records that the request for l was made: l counts for me now.
func (s *stealer) granted(l Row) {
	s.load[l.Owner]--
	s.load[s.in.Me]++
	s.asked++
	s.grants++
}

// refused records that the store refused the request for l (another worker
// asked first, or the lease moved since the listing): l counts for its
// owner no more, and another lease may be asked for instead.
func (s *stealer) refused(l Row) { s.load[l.Owner]-- }

// Share returns me's target and the ceiling ceil(leases/owners) for the
// owners in load. The leases that do not divide evenly go first to owners
// that hold more than the floor already (they keep them), then by owner id,
// so that workers counting the same owners agree on who holds one more,
// even while they are taking leases, and together take every lease once
// instead of racing for the last few. maxLeases caps both (0: no cap).
func Share(me string, load map[string]int, leases, maxLeases int) (target, ceiling int) {
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

// StreamOf returns the stream of a row id ("stream:shard"), "" for an id
// that names none.
func StreamOf(id string) string {
	stream, _, ok := strings.Cut(id, ":")
	if !ok {
		return ""
	}
	return stream
}

// Firsts returns the first readable lease of each stream of rows (a
// listing's readable rows): the lowest id of the stream. Its holder
// coordinates that stream.
func Firsts(rows []Row) map[string]bool {
	low := map[string]string{}
	for _, l := range rows {
		s := StreamOf(l.Shard)
		if cur, ok := low[s]; !ok || l.Shard < cur {
			low[s] = l.Shard
		}
	}
	out := make(map[string]bool, len(low))
	for _, id := range low {
		out[id] = true
	}
	return out
}

// firsts returns in.Firsts, or First alone when the listing gives no
// Firsts.
func (in Listing) firsts() map[string]bool {
	if in.Firsts != nil || in.First == "" {
		return in.Firsts
	}
	return map[string]bool{in.First: true}
}

// Anchor returns the lowest of firsts that held holds, and false when it
// holds none: the lease a coordinator's deputies watch, and by which
// coordinators rank each other when they gather (see Round).
func Anchor(firsts, held map[string]bool) (string, bool) {
	anchor := ""
	for id := range firsts {
		if held[id] && (anchor == "" || id < anchor) {
			anchor = id
		}
	}
	return anchor, anchor != ""
}
