package session

import (
	"hash/fnv"
	"strconv"
	"time"
)

// The watch rota: who looks at the first lease in a fleet with sessions.
//
// A session's liveness shows only in its row, so some worker must read the
// coordinator's session now and then to notice it stop. Named watchers (the
// deputies) can all be lost together with the coordinator, and looks that
// every worker makes at random grow with the fleet and still leave long gaps
// when a third of it fails. The rota spends a fixed number of looks a take
// interval, however many workers, and hands them out by the leases workers
// hold: wall-clock time is cut into look instants, RotaSlots of them a take
// interval; consecutive instants belong to the slots in turn, and each slot
// changes watcher every RotaTurn of its instants (the slots' turns end at
// different instants). A slot's watcher for a turn is the holder of the
// candidate lease whose hash with the slot and the turn is the highest
// (rendezvous hashing), so every worker decides alone, from its own leases
// and a listing of the table that may be a while old, and views that
// differ by a few leases still agree on almost every winner.
//
// The wall clock only spreads the looks: two workers whose clocks disagree
// look at other moments, and a lease a dead worker held leaves its turns
// unwatched; neither makes any decision unsafe, and when a third of the
// workers is lost the next turns fall, two in three, to a live one.

// RotaSlots is how many looks at the first lease the fleet makes a take
// interval between its watchers.
const RotaSlots = 3

// RotaTurn is how many of its looks a slot's watcher makes before the slot
// passes to the next.
const RotaTurn = 4

// Instant is one look instant of the rota.
type Instant int64

// InstantAfter returns the first look instant after now, for take interval
// take.
func InstantAfter(now time.Time, take time.Duration) Instant {
	step := rotaStep(take)
	return Instant(now.UnixNano()/step + 1)
}

// At returns when instant i falls, for take interval take.
func (i Instant) At(take time.Duration) time.Time {
	return time.Unix(0, int64(i)*rotaStep(take))
}

// slotTurn returns instant i's slot and the turn of that slot it falls in.
func (i Instant) slotTurn() (slot, turn int64) {
	slot = floorMod(int64(i), RotaSlots)
	look := floorDiv(int64(i), RotaSlots)
	return slot, floorDiv(look+slot, RotaTurn) // slots change watchers at different looks
}

// Watcher returns the candidate lease whose holder looks at instant i: the
// rendezvous winner among candidates (row keys) for i's slot and turn; ""
// when there is none.
func Watcher(i Instant, candidates []string) string {
	slot, turn := i.slotTurn()
	prefix := strconv.FormatInt(slot, 10) + "/" + strconv.FormatInt(turn, 10) + "/"
	best, bestHash := "", uint64(0)
	for _, key := range candidates {
		h := fnv.New64a()
		h.Write([]byte(prefix))
		h.Write([]byte(key))
		if v := mix(h.Sum64()); best == "" || v > bestHash || v == bestHash && key < best {
			best, bestHash = key, v
		}
	}
	return best
}

// NextWatch returns the first instant after now, within one take interval
// and one instant more (a tick that comes late still finds the instant
// after it), at which one of mine (a lease this worker holds, among candidates) wins
// the rota, and whether there is one. A worker that wins several slots
// looks at each of their instants, so the fleet's looks stay RotaSlots a
// take interval whatever its size.
func NextWatch(now time.Time, take time.Duration, candidates []string, mine func(string) bool) (Instant, bool) {
	first := InstantAfter(now, take)
	for i := first; i <= first+RotaSlots; i++ {
		if w := Watcher(i, candidates); w != "" && mine(w) {
			return i, true
		}
	}
	return 0, false
}

// rotaStep is the time between two look instants, in nanoseconds.
func rotaStep(take time.Duration) int64 {
	return max(int64(take/RotaSlots), 1)
}

// mix spreads a 64-bit FNV hash over all its bits (FNV's low bits follow
// the last bytes too closely for keys that differ only there).
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
