package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rotaLeases(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("orders:shardId-%012d", i)
	}
	return out
}

// The rota's instants are a third of a take interval apart, and each slot
// keeps its watcher for RotaTurn of its looks, then passes it on.
func TestRotaInstantsAndTurns(t *testing.T) {
	take := 1200 * time.Millisecond
	now := time.Unix(1_800_000_000, 123_456_789)
	i := InstantAfter(now, take)
	assert.True(t, i.At(take).After(now))
	assert.False(t, (i - 1).At(take).After(now), "the instant before is not after now")
	assert.Equal(t, take/RotaSlots, (i + 1).At(take).Sub(i.At(take)))

	leases := rotaLeases(64)
	for slot := range Instant(RotaSlots) {
		changes := 0
		prev := ""
		for look := range Instant(8 * RotaTurn) {
			w := Watcher(look*RotaSlots+slot, leases)
			require.NotEmpty(t, w)
			if prev != "" && w != prev {
				changes++
			}
			prev = w
		}
		// 8 turns: at most 8 changes of watcher, at least a few.
		assert.LessOrEqual(t, changes, 8, "slot %d", slot)
		assert.GreaterOrEqual(t, changes, 4, "slot %d", slot)
	}
}

// Every lease wins about its share of the turns, so each worker watches in
// proportion to the leases it holds.
func TestRotaIsFair(t *testing.T) {
	leases := rotaLeases(16)
	wins := map[string]int{}
	const n = 16 * 3 * 4 * 200
	for i := range Instant(n) {
		wins[Watcher(i, leases)]++
	}
	per := float64(n) / 16
	for _, l := range leases {
		assert.InDelta(t, per, float64(wins[l]), per*0.35, l)
	}
}

// Views that differ by a lease agree on most winners: the winner changes
// only where the lease that differs wins.
func TestRotaViewsThatDifferAgreeMostly(t *testing.T) {
	all := rotaLeases(64)
	fewer := all[1:]
	differ := 0
	const n = 3000
	for i := range Instant(n) {
		a, b := Watcher(i, all), Watcher(i, fewer)
		if a != b {
			differ++
			assert.Equal(t, all[0], a, "only the missing lease's turns change hands")
		}
	}
	assert.Less(t, differ, n/16)
}

// NextWatch finds the first instant a worker's lease wins, and none when
// it holds no winner within a take interval.
func TestRotaNextWatch(t *testing.T) {
	take := time.Second
	leases := rotaLeases(2)
	now := time.Unix(1_800_000_000, 0)
	all := func(string) bool { return true }
	i, ok := NextWatch(now, take, leases, all)
	require.True(t, ok)
	assert.Equal(t, InstantAfter(now, take), i, "a worker holding every candidate watches every instant")

	none := func(string) bool { return false }
	_, ok = NextWatch(now, take, leases, none)
	assert.False(t, ok)
	_, ok = NextWatch(now, take, nil, all)
	assert.False(t, ok, "no candidates, no watcher")

	mine := func(k string) bool { return k == leases[1] }
	i, ok = NextWatch(now, take, leases, mine)
	if ok {
		assert.Equal(t, leases[1], Watcher(i, leases))
	}
	for j := InstantAfter(now, take); ok && j < i; j++ {
		assert.NotEqual(t, leases[1], Watcher(j, leases), "an earlier instant of its own was skipped")
	}
}
