package shardlease

import (
	"time"

	"github.com/shardlease/shardlease/internal/session"
)

// rota times a resting worker's share of the looks at the first lease in a
// fleet with sessions (session.Watcher): its timer fires at the next look
// instant that a lease this worker holds wins. With sessions the rota
// replaces the deputies' looks and the quiet workers' backstop, whenever
// some lease of the last listing is held by a worker other than the first
// lease's holder: the fleet then looks session.RotaSlots times a take
// interval, whatever its size and whichever of its workers are lost.
// Written by the scheduler's goroutine only (coordination's).
type rota struct {
	*time.Timer
	// at is when the timer is set for; zero while it is stopped.
	at time.Time
	// idle are the live owners the last listing showed holding nothing:
	// they take turns too, each as one candidate (idleCandidate).
	idle []string
}

// idleCandidate is the rota's candidate for a worker that holds nothing.
func idleCandidate(owner string) string { return "@" + owner }

func newRota() rota { return rota{Timer: stoppedTimer()} }

// rotaCandidates returns the candidates, among rows and idle (a listing's),
// whose holders share the looks at first: every held lease, unfinished, of
// a worker other than first's holder, and each worker that held nothing
// (idleCandidate), so that a fleet whose leases all fail with the
// coordinator is still watched by its idle workers. Nil when the listing
// does not show first held: then nobody can tell whom to watch, and the
// backstop looks.
func rotaCandidates(rows []Lease, first string, idle []string) []string {
	var head Lease
	for _, l := range rows {
		if l.Key.String() == first {
			head = l
		}
	}
	if head.Owner == "" {
		return nil
	}
	var out []string
	for _, l := range rows {
		if l.Owner != "" && l.Owner != head.Owner && !l.Finished() {
			out = append(out, l.Key.String())
		}
	}
	for _, owner := range idle {
		if owner != head.Owner {
			out = append(out, idleCandidate(owner))
		}
	}
	return out
}

// arm sets the timer to the next instant after now, within a take
// interval, at which a lease this worker holds (holds) wins among
// candidates, or to stall when that comes first (a look found the first
// lease standing still: the next look raises the alarm at the moment it
// would have stood still long enough). It leaves a timer that is set
// already as it is unless stall is earlier.
func (r *rota) arm(now time.Time, take time.Duration, candidates []string, holds func(string) bool, stall time.Time) {
	at := time.Time{}
	if i, ok := session.NextWatch(now, take, candidates, holds); ok {
		at = i.At(take)
	}
	if stall.After(now) && (at.IsZero() || stall.Before(at)) {
		at = stall
	}
	// A time set already and not later stays: one in the past has fired
	// and waits in the channel (fired and stop clear it), and a Reset
	// would drop it.
	if at.IsZero() || !r.at.IsZero() && !r.at.After(at) {
		return
	}
	r.at = at
	r.Reset(time.Until(at))
}

// fired is called as the timer fires: it is stopped until armed again.
func (r *rota) fired() { r.at = time.Time{} }

// stop stops the timer.
func (r *rota) stop() {
	r.at = time.Time{}
	r.Stop()
}
