package soak

// Holdings, as the lease table's accepted writes order them: the ground
// truth the fenced sink's figures are judged by, not the tokens.
//
// A holding of a row begins with an acquire the table accepted (a lease
// received by handoff begins with one too). The audit sees those writes,
// and numbers them in the order it saw them: a holding that began later has
// a greater number, whatever tokens the workers made of it. A write whose
// reply was lost is learnt from a later read of the row (an "observed"
// write); one that names a new owner begins a holding too.
//
// Two figures follow. A sink write accepted after one of a later holding
// is a stale write accepted, even when its token compared above (a token
// order that runs against the table's). A sink refusal of a write whose
// holding is the latest of its row is the live holder refused: no later
// holder exists, so whatever token the sink kept came from an earlier
// holding, and the refusal stalls the shard for as long as the holding
// lasts.

import (
	"fmt"
)

// start is the beginning of a holding: the owner and the counter its
// acquire wrote, and its number in the audit's order.
type start struct {
	owner   string
	counter int64
	seq     int
}

// noHolding is the number of a write whose holding the audit does not know.
const noHolding = -1

// began notes a holding's beginning, for an accepted acquire or a read
// that shows a write the audit missed. a.mu is held.
func (a *auditor) began(w write) {
	starts := a.starts[w.key]
	switch w.op {
	case "acquire":
	case "observed":
		if w.owner == "" || a.known[hookKey(w.key, w.gen, w.counter)] {
			return
		}
		if n := len(starts); n > 0 && starts[n-1].owner == w.owner {
			return // a renewal whose reply was lost, or the same holding
		}
	default:
		return
	}
	a.starts[w.key] = append(starts, start{owner: w.owner, counter: w.counter, seq: len(a.writes)})
}

// holding returns the number of the holding of key by owner whose acquire
// wrote counter (the latest such), and whether no holding of key began
// after it. It returns noHolding when the audit saw no such acquire.
func (a *auditor) holding(key, owner string, counter int64) (seq int, latest bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	starts := a.starts[key]
	for i := len(starts) - 1; i >= 0; i-- {
		if st := starts[i]; st.owner == owner && st.counter == counter {
			return st.seq, i == len(starts)-1
		}
	}
	return noHolding, false
}

// stillLatest reports whether no holding of key began after the holding
// numbered seq.
func (a *auditor) stillLatest(key string, seq int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	starts := a.starts[key]
	return seq != noHolding && len(starts) > 0 && starts[len(starts)-1].seq == seq
}

// holdingDescents lists the writes of a log of holding numbers (in the
// order the sink accepted them) made by a holding that began before the
// holding of a write accepted earlier.
func holdingDescents(scope string, holds []int) []string {
	var out []string
	high := noHolding
	for i, h := range holds {
		if h == noHolding {
			continue
		}
		if h < high {
			out = append(out, fmt.Sprintf("%s: write %d by holding #%d accepted after one by the later holding #%d", scope, i, h, high))
			continue
		}
		high = h
	}
	return out
}

// liveRefused records a sink refusal of a write whose holding is the
// latest of its row.
func (st *sinkState) liveRefused(what string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.live = append(st.live, what)
}
