package balance

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The notes a coordinator writes on a lease row, for its holder to read
// in the row its next renewal returns: "wake <nonce>" (list now and ask
// for your share), "deputy <first shard> <nonce>" (watch that row) and
// "lead <nonce>" (you hold the first readable lease now: list).
const (
	NoteWake   = "wake"
	NoteDeputy = "deputy"
	NoteLead   = "lead"
)

// NoteText returns the text of the note intent k writes (Deputy, Wake or
// Lead): first is the shard a deputy watches, nonce tells one note from
// the one before.
func NoteText(k Kind, first string, nonce uint64) string {
	switch k {
	case Deputy:
		return fmt.Sprintf("%s %s %x", NoteDeputy, first, nonce)
	case Wake:
		return fmt.Sprintf("%s %x", NoteWake, nonce)
	case Lead:
		return fmt.Sprintf("%s %x", NoteLead, nonce)
	}
	return ""
}

// DeputyFirst returns the shard a deputy note asks to watch, and false for
// any other note.
func DeputyFirst(note string) (string, bool) {
	f := strings.Fields(note)
	if len(f) < 2 || f[0] != NoteDeputy {
		return "", false
	}
	return f[1], true
}

// FirstReadable returns the row with the lowest shard id: its holder
// coordinates. rows are a listing's readable rows.
func FirstReadable(rows []Row) (Row, bool) {
	if len(rows) == 0 {
		return Row{}, false
	}
	return slices.MinFunc(rows, func(a, b Row) int { return strings.Compare(a.Shard, b.Shard) }), true
}

// MayTakeSoon reports whether me, below its ceiling and its MaxLeases cap,
// sees a lease it may take after more listings: one left free, or one that
// stalled (it may expire, and expiry is judged from me's own listings).
// Such a worker keeps listing: one woken because the coordinator could not
// take a lease would otherwise stop before the lease expired for it.
func MayTakeSoon(in Listing, p Plan) bool {
	mine := 0
	for _, l := range in.Rows {
		if in.Held[l.Shard] {
			mine++
		}
	}
	if mine >= p.Ceiling || in.MaxLeases > 0 && mine >= in.MaxLeases {
		return false
	}
	for _, l := range in.Rows {
		id := l.Shard
		if in.Held[id] || in.Skip[id] || in.Refused[id] || l.Owner == in.Me {
			continue
		}
		if l.Owner == "" || in.Stalled[id] {
			return true
		}
	}
	return false
}

// HasDeputyFor reports whether a held row names a deputy for first.
func HasDeputyFor(rows []Row, first string) bool {
	for _, l := range rows {
		if f, ok := DeputyFirst(l.Note); ok && f == first && l.Owner != "" {
			return true
		}
	}
	return false
}

// NameDeputy returns the row to name a deputy on, so that one live worker
// other than the coordinator (me) watches the first lease (in.First): none
// while a row names a deputy for it; else the lowest row of another live
// worker, a deputy of an earlier first lease first, rows renewed since
// taken before others (the adoption of a row handed over would clear the
// note).
func NameDeputy(in Listing) (Row, bool) {
	var stale, cands []Row
	for _, l := range in.Rows {
		if l.Owner == "" || l.Owner == in.Me || in.Held[l.Shard] || in.Expired[l.Shard] || l.HandoffTo != "" {
			continue
		}
		if f, ok := DeputyFirst(l.Note); ok {
			if f == in.First {
				return Row{}, false // a deputy watches the first lease
			}
			stale = append(stale, l)
			continue
		}
		cands = append(cands, l)
	}
	if len(stale) > 0 {
		cands = stale
	}
	if renewed := slices.DeleteFunc(slices.Clone(cands), func(l Row) bool { return !l.Renewed }); len(renewed) > 0 {
		cands = renewed
	}
	if len(cands) == 0 {
		return Row{}, false
	}
	return slices.MinFunc(cands, func(a, b Row) int { return strings.Compare(a.Shard, b.Shard) }), true
}

// Woken is the wake backoff of one owner: when it was last woken, its load
// then, and the wait before it is woken again.
type Woken struct {
	At   time.Time
	Load int
	Wait time.Duration
}

// CoordinatorNotes returns the notes the coordinator (me) writes after its
// round, in order: a deputy named if none watches the first lease, then a
// wake for each owner below its share (see Wakes). held is what me runs
// after its round; woken and the returned map are the wake backoff.
func CoordinatorNotes(in Listing, p Plan, held map[string]bool, woken map[string]Woken, now time.Time, lease time.Duration) ([]Intent, map[string]Woken) {
	var out []Intent
	deputyRow := ""
	if l, ok := NameDeputy(in); ok {
		out = append(out, Intent{Kind: Deputy, Row: l})
		deputyRow = l.Shard
	}
	wakes, woken := Wakes(in, p, held, deputyRow, woken, now, lease)
	return append(out, wakes...), woken
}

// Wakes returns a wake note for each owner that runs leases but fewer than
// its share, while another runs at least two more or a lease is left free
// or expired that me could not take (its cap), by owner id. An owner is
// woken again after lease, doubled (to 32 lease at most) each time its load
// did not move: woken holds that backoff, and the map returned replaces
// it (owners no longer live are dropped). No note goes on deputyRow or on
// a row naming a deputy: it would replace the naming.
func Wakes(in Listing, p Plan, held map[string]bool, deputyRow string, woken map[string]Woken, now time.Time, lease time.Duration) ([]Intent, map[string]Woken) {
	load := maps.Clone(p.Load)
	mine, open := 0, 0
	for _, l := range in.Rows {
		id := l.Shard
		switch {
		case held[id]:
			mine++
		case (l.Owner == "" || in.Expired[id]) && !in.Refused[id] && !in.Skip[id]:
			open++
		}
	}
	load[in.Me] = mine
	most := 0
	for _, n := range load {
		most = max(most, n)
	}
	rows := wakeRows(in, deputyRow)
	next := make(map[string]Woken, len(woken))
	for owner, w := range woken {
		if _, ok := load[owner]; ok {
			next[owner] = w
		}
	}
	var out []Intent
	for _, owner := range slices.Sorted(maps.Keys(load)) {
		n := load[owner]
		if owner == in.Me || len(rows[owner]) == 0 || open == 0 && most < n+2 {
			continue
		}
		// Its own cap, if it has one, is not known here: it finds out when
		// it lists.
		if target, _ := Share(owner, load, len(in.Rows), 0); n >= target {
			continue
		}
		ws, ok := next[owner]
		if ok && now.Sub(ws.At) < ws.Wait {
			continue
		}
		wait := lease
		if ok && ws.Load == n {
			wait = min(2*ws.Wait, 32*lease)
		}
		next[owner] = Woken{At: now, Load: n, Wait: wait}
		out = append(out, Intent{Kind: Wake, Row: wakeRow(rows[owner])})
	}
	return out, next
}

// wakeRows returns, by owner, the rows a wake note may go on: held by
// another live owner, not being handed over, not naming a deputy.
func wakeRows(in Listing, deputyRow string) map[string][]Row {
	rows := map[string][]Row{}
	for _, l := range in.Rows {
		if l.Owner == "" || l.Owner == in.Me || l.HandoffTo != "" || in.Expired[l.Shard] {
			continue
		}
		if _, dep := DeputyFirst(l.Note); !dep && l.Shard != deputyRow {
			rows[l.Owner] = append(rows[l.Owner], l)
		}
	}
	return rows
}

// wakeRow returns the first of rows renewed since taken, else the first:
// one handed over but not yet adopted would lose the note to the adoption.
func wakeRow(rows []Row) Row {
	for _, r := range rows {
		if r.Renewed {
			return r
		}
	}
	return rows[0]
}

// HandOverLead returns the lead note for the holder of the first lease
// (first), when me has just stopped coordinating: that holder may not be
// listing. None when the row is free, me's own, being handed over or
// expired.
func HandOverLead(in Listing, first Row) (Intent, bool) {
	if first.Owner == "" || first.Owner == in.Me || first.HandoffTo != "" || in.Expired[first.Shard] {
		return Intent{}, false
	}
	return Intent{Kind: Lead, Row: first}, true
}

// PassLead returns the row a leaving coordinator (me) writes its lead note
// on, so that the leases it is about to release are taken at once: its
// deputy's row if a row names one for first, else the first row of
// another worker. rows are the last listing's, finished ones included.
func PassLead(rows []Row, me, first string) (Intent, bool) {
	var to *Row
	for i, l := range rows {
		if l.Owner == "" || l.Owner == me || l.HandoffTo != "" || l.Finished {
			continue
		}
		if f, ok := DeputyFirst(l.Note); ok && f == first {
			to = &rows[i]
			break
		}
		if to == nil {
			to = &rows[i]
		}
	}
	if to == nil {
		return Intent{}, false
	}
	return Intent{Kind: Lead, Row: *to}, true
}
