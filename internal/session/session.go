// Package session holds the decisions of the session protocol as pure
// functions: when a holder stops, what an observer watches stand still, and
// what a taker must do before it takes a lease. The consumer converts what
// it read and timed into these inputs, calls them, and carries out the
// answer; the exploration test runs the same functions over every
// interleaving of a few workers.
package session

import (
	"strconv"
	"strings"
	"time"
)

// CutoffDivisor sets the holder's margin: it stops a tenth of a lease
// duration before any taker can have seen its session stand still, which
// covers monotonic clocks running at slightly different rates and the time
// a handler takes to notice its cancelled context.
const CutoffDivisor = 10

// Cutoff returns when a holder whose last successful keep (or, without
// sessions, write to the lease row) was sent at sent stops handing records
// and issuing writes, until a later one succeeds. Only the holder's own
// monotonic clock is read.
func Cutoff(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(lease - lease/CutoffDivisor)
}

// Seen is a lease row and, when a session keeps it, that session's row, as
// one observer read them.
type Seen struct {
	// Owner and Counter are the lease row's.
	Owner   string
	Counter int64
	// Session and Gen name the session that keeps the lease; "" and 0 when
	// the holder renews the row itself.
	Session string
	Gen     int64
	// Found is whether the session's row was there; RowGen and RowCounter
	// are its generation and counter.
	Found      bool
	RowGen     int64
	RowCounter int64
	// Last is the counter at which this observer last saw the session
	// live (of the lease's generation); 0 when it never did.
	Last int64
	// Ended is set once a fence by this observer reported the session
	// over (FenceSession's ended).
	Ended bool
}

// Kept reports whether a session keeps the lease.
func (s Seen) Kept() bool { return s.Session != "" }

// Lives reports whether the session row read is the session the lease
// names: there, and of its generation.
func (s Seen) Lives() bool { return s.Kept() && s.Found && s.RowGen == s.Gen }

// Mark is what an observer watches: it changes whenever anything that
// proves the holder alive changes (the lease row's owner or counter, and
// for a kept lease its session's counter). A lease whose mark stood still
// for a lease duration on the observer's clock is expired.
//
// A session that is gone or of another generation proves nothing: the mark
// stays what it was when the observer last saw the session live (Last), so
// that a session fenced by one taker does not restart every other
// observer's wait for its other leases. Seen gone from the start, such a
// lease is taken a lease duration after it was first seen, never at once:
// an eventually consistent read may show a lease row before the session row
// its holder wrote first.
func Mark(s Seen) string {
	m := s.Owner + "|" + strconv.FormatInt(s.Counter, 10)
	if !s.Kept() {
		return m
	}
	at := s.Last
	if s.Lives() {
		at = s.RowCounter
	}
	return m + "|" + s.Session + "|" + strconv.FormatInt(s.Gen, 10) + "|" + strconv.FormatInt(at, 10)
}

// SameHolder reports whether marks a and b (of one lease row, by Mark)
// differ at most in the session's counter: the row's holder, counter and
// session are the same, so only the session was kept (or seen kept) since.
func SameHolder(a, b string) bool {
	i, j := strings.LastIndexByte(a, '|'), strings.LastIndexByte(b, '|')
	return strings.Count(a, "|") == 4 && strings.Count(b, "|") == 4 && a[:i] == b[:j]
}

// Step is what a taker does with a lease held by another worker.
type Step int

const (
	// Wait: the holder may be alive; take nothing.
	Wait Step = iota
	// Fence: the lease is expired and a session keeps it; end the session
	// first (a delete conditional on the counter and generation seen),
	// whether or not the observer's read showed its row: a read may be a
	// moment old, the conditional delete is not.
	Fence
	// Claim: the lease is free or expired and no session keeps it, or the
	// observer's fence ended the session; take it on the lease counter
	// seen.
	Claim
	// Confirm: the lease is expired and the observer's read showed no live
	// session of its generation (the row gone, or reopened). Confirm it
	// with a fence that deletes nothing (conditional on a counter no row
	// has, NoCounter), and claim if the session is over. A read a moment
	// old that missed a live row only makes the fence find the row. The
	// wait is not skipped: a session ended by an operator's tool (which
	// takes one lease at once) may have been kept a moment before, and its
	// holder runs its other leases until its cut-off.
	Confirm
)

// NoCounter is a counter no session row has: a fence conditional on it
// deletes nothing and reports whether the session is over.
const NoCounter int64 = -1

func (s Step) String() string {
	switch s {
	case Fence:
		return "fence"
	case Claim:
		return "claim"
	case Confirm:
		return "confirm"
	}
	return "wait"
}

// Judge returns what a taker does with the lease it saw as s, whose mark
// has stood still for still on its clock, when it waits wait (the longer of
// its own lease duration and the holder's) before taking. Fencing always
// comes first: a lease a session keeps is claimed only once a fence by this
// observer ended the session, even when its read showed no row.
func Judge(s Seen, still, wait time.Duration) Step {
	switch {
	case s.Owner == "":
		return Claim
	case still < wait:
		return Wait
	case !s.Kept() || s.Ended:
		return Claim
	case !s.Lives():
		return Confirm
	}
	return Fence
}

// FenceAt returns the counter a fence of s's session is conditional on:
// the row's when the read showed the session live (Fence), else NoCounter
// (Confirm).
func FenceAt(s Seen) int64 {
	if s.Lives() {
		return s.RowCounter
	}
	return NoCounter
}
