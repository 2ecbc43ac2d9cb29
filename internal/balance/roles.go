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
// for your share), "deputy <first shard> <nonce>" (watch that row),
// "deputy <first shard> <nonce> wake" (watch it, and list now) and
// "lead <nonce>" (you hold the first readable lease now, or must take it:
// list). A wake that ends in "watch" asks its reader to list on until it
// can judge which leases stand still (Intent.Watch).
const (
	NoteWake   = "wake"
	NoteDeputy = "deputy"
	NoteLead   = "lead"
	NoteWatch  = "watch"
	// NoteDrain starts the note that asks a holder to drain: hand every
	// lease it holds to the other workers ("drain <nonce>"); the CLI's
	// drain command writes one on each row of the worker.
	NoteDrain = "drain"
)

// DrainNoteText returns the text of a drain note; nonce tells one from the
// one before.
func DrainNoteText(nonce string) string { return NoteDrain + " " + nonce }

// IsDrainNote reports whether note asks its reader to drain.
func IsDrainNote(note string) bool { return ParseNote(note).Kind == NoteDrain }

// Note is a note as its reader takes it (ParseNote).
type Note struct {
	// Kind is NoteWake, NoteLead, NoteDeputy or NoteDrain; "" for a note
	// that is none of them (a deputy note must name its first shard).
	Kind string
	// First is the lease a deputy note asks to watch, as written (see
	// FirstOn); Firsts are all the leases it asks to watch, First first:
	// where workers read different streams, one row may carry the namings
	// of several coordinators ("deputy a:s0,b:s0 1f").
	First  string
	Firsts []string
	// Wake asks the reader to list now (a wake, a lead, a deputy naming
	// with a wake); Watch to list on until it can judge which leases stand
	// still (a wake ending in watch, and every lead).
	Wake, Watch bool
}

// ParseNote reads a note written by NoteText or DrainNoteText; every reader
// of notes goes through it.
func ParseNote(note string) Note {
	f := strings.Fields(note)
	at := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch at(0) {
	case NoteLead:
		return Note{Kind: NoteLead, Wake: true, Watch: true}
	case NoteWake:
		return Note{Kind: NoteWake, Wake: true, Watch: at(2) == NoteWatch}
	case NoteDrain:
		return Note{Kind: NoteDrain}
	case NoteDeputy:
		if len(f) < 2 {
			return Note{}
		}
		wake := at(3) == NoteWake
		firsts := strings.Split(f[1], ",")
		return Note{Kind: NoteDeputy, First: firsts[0], Firsts: firsts, Wake: wake, Watch: wake && at(4) == NoteWatch}
	}
	return Note{}
}

// Deputies is how many workers watch the first lease, each on a row of
// its own: any two workers that fail together leave one of the
// coordinator and its deputies watching the others.
const Deputies = 2

// NoteText returns the text of the note intent it writes (Deputy, Wake,
// WakeDeputy or Lead): first is the shard a deputy watches, nonce tells
// one note from the one before.
func NoteText(it Intent, first string, nonce uint64) string {
	watch := ""
	if it.Watch {
		watch = " " + NoteWatch
	}
	switch it.Kind {
	case Deputy:
		return fmt.Sprintf("%s %s %x", NoteDeputy, first, nonce)
	case WakeDeputy:
		return fmt.Sprintf("%s %s %x %s%s", NoteDeputy, first, nonce, NoteWake, watch)
	case Wake:
		return fmt.Sprintf("%s %x%s", NoteWake, nonce, watch)
	case Lead:
		return fmt.Sprintf("%s %x", NoteLead, nonce)
	}
	return ""
}

// DeputyFirst returns the lease a deputy note asks to watch (the first it
// names), and false for any other note.
func DeputyFirst(note string) (string, bool) {
	n := ParseNote(note)
	return n.First, n.Kind == NoteDeputy
}

// namesFirst reports whether row's note is a deputy note that asks to
// watch first (among the leases it names, read as on row's stream: see
// FirstOn).
func namesFirst(row Row, first string) bool {
	n := ParseNote(row.Note)
	return n.Kind == NoteDeputy && slices.Contains(n.FirstsOn(StreamOf(row.Shard)), first)
}

// Compact returns names (row keys, joined by commas) as a deputy note on
// a row of stream writes them: a lease of that stream by its shard id
// alone, as the notes of earlier releases did, so that a worker of an
// earlier release named deputy during an upgrade reads it (FirstOn reads
// it back as its row key).
func Compact(names, stream string) string {
	parts := strings.Split(names, ",")
	for i, n := range parts {
		if s, shard, ok := strings.Cut(n, ":"); ok && s == stream && stream != "" {
			parts[i] = shard
		}
	}
	return strings.Join(parts, ",")
}

// FirstsOn returns the row keys of every lease a deputy note on a row of
// stream asks to watch (see FirstOn).
func (n Note) FirstsOn(stream string) []string {
	out := make([]string, len(n.Firsts))
	for i, f := range n.Firsts {
		out[i] = Note{First: f}.FirstOn(stream)
	}
	return out
}

// Names returns what me's deputy naming writes on row: in.First, with the
// other coordinators' namings row's note carries (see othersNaming), so
// that one row keeps every naming, sorted and joined by commas, as row
// keys (the writer compacts them, see Compact).
func Names(in Listing, row Row) string {
	names := []string{in.First}
	if n := ParseNote(row.Note); n.Kind == NoteDeputy {
		others := othersNaming(in)
		for _, f := range n.FirstsOn(StreamOf(row.Shard)) {
			if f != in.First && others(f) {
				names = append(names, f)
			}
		}
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// FirstOn returns the row key ("stream:shard") of the lease a deputy note
// on a row of stream asks to watch. Notes name it by its key; a note of an
// earlier release named it by its shard id alone (a Consumer's, in the
// note's own stream) or as "stream/shard" (a Group's), and is read the
// same way.
func (n Note) FirstOn(stream string) string {
	switch {
	case n.First == "" || stream == "" || strings.Contains(n.First, ":"):
		return n.First
	case strings.Contains(n.First, "/"):
		return strings.Replace(n.First, "/", ":", 1)
	}
	return stream + ":" + n.First
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

// Uncoordinated reports whether a stream of the listing has no live
// coordinator: its first lease is free, expired or standing still, and me
// does not run it. me lists on until it can take that lease (the round
// takes a first lease free or expired whatever the share): where workers
// read different streams, the workers that watched that stream's
// coordinator may all be gone, and me may be the only one left that reads
// it. A worker at its MaxLeases cap could not take it, and does not list
// on for it (its stall is logged and counted instead).
func Uncoordinated(in Listing) bool {
	if in.MaxLeases > 0 && len(in.Held) >= in.MaxLeases {
		return false
	}
	firsts := in.firsts()
	for _, l := range in.Rows {
		id := l.Shard
		if !firsts[id] || in.Held[id] || in.Skip[id] || in.Refused[id] || l.Owner == in.Me {
			continue
		}
		if l.Owner == "" && l.Counter > 0 || in.Expired[id] || in.Stalled[id] {
			return true
		}
	}
	return false
}

// Unwatched returns the anchors (see Anchor) of the coordinators me should
// watch as a deputy would, unnamed: each coordinates a stream of the
// listing none of whose named deputies holds a lease of (me included).
// Its named deputies may not read that stream (where workers read
// different streams, a worker that reads a stream but holds none of its
// leases is unknown to its coordinator, and one named late has no naming
// yet), and me does: if that coordinator stops, me is the one left to
// notice.
func Unwatched(in Listing) []string {
	firsts := in.firsts()
	holders := map[string]map[string]bool{} // stream → owners of its live rows
	anchors := map[string]string{}          // owner → its lowest first lease
	for _, l := range in.Rows {
		if l.Owner == "" || in.Expired[l.Shard] {
			continue
		}
		s := StreamOf(l.Shard)
		if holders[s] == nil {
			holders[s] = map[string]bool{}
		}
		holders[s][l.Owner] = true
		if a, ok := anchors[l.Owner]; firsts[l.Shard] && (!ok || l.Shard < a) {
			anchors[l.Owner] = l.Shard
		}
	}
	var out []string
	for _, l := range in.Rows {
		s, owner := StreamOf(l.Shard), l.Owner
		if !firsts[l.Shard] || owner == "" || owner == in.Me || in.Expired[l.Shard] {
			continue
		}
		anchor := anchors[owner]
		covered := false
		for d := range DeputiesFor(in.Rows, anchor) {
			covered = covered || d != owner && holders[s][d]
		}
		if !covered && !slices.Contains(out, anchor) {
			out = append(out, anchor)
		}
	}
	slices.Sort(out)
	return out
}

// DeputiesFor returns the owners of the held rows that name a deputy for
// first, each once.
func DeputiesFor(rows []Row, first string) map[string]bool {
	out := map[string]bool{}
	for _, l := range rows {
		if namesFirst(l, first) && l.Owner != "" {
			out[l.Owner] = true
		}
	}
	return out
}

// NameDeputies returns the rows to name deputies on, so that Deputies live
// workers other than the coordinator (me) watch the first lease
// (in.First), each on one row: the owners named already count; each other
// owner gets its lowest row, deputies of an earlier first lease first,
// rows renewed since taken before others (the adoption of a row handed
// over would clear the note), owners in order of their lowest row. Every
// stream me coordinates (see Firsts) gets as many watching deputies that
// read it (hold a live row of it) as it has such readers, up to Deputies:
// where workers read different streams, more are named.
func NameDeputies(in Listing) []Row {
	named := map[string]bool{}
	best := map[string]Row{}
	rank := func(l Row) int {
		r := 0
		if _, ok := DeputyFirst(l.Note); !ok {
			r += 2
		}
		if !l.Renewed {
			r++
		}
		return r
	}
	for _, l := range in.Rows {
		if l.Owner == "" || l.Owner == in.Me || in.Held[l.Shard] || in.Expired[l.Shard] || l.HandoffTo != "" {
			continue
		}
		if namesFirst(l, in.First) {
			named[l.Owner] = true
			continue
		}
		if b, ok := best[l.Owner]; !ok || rank(l) < rank(b) || rank(l) == rank(b) && l.Shard < b.Shard {
			best[l.Owner] = l
		}
	}
	var cands []Row
	for o, l := range best {
		if !named[o] {
			cands = append(cands, l)
		}
	}
	slices.SortFunc(cands, func(a, b Row) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Shard, b.Shard)
	})
	picked := cands[:min(len(cands), max(0, Deputies-len(named)))]
	for _, l := range picked {
		named[l.Owner] = true
	}
	return append(slices.Clip(picked), coverStreams(in, cands, named)...)
}

// coverStreams returns more deputy rows of cands (in their order), so that
// every stream me coordinates has min(Deputies, its readers) readers among
// the deputies; watching holds the owners named or picked already, and is
// added to.
func coverStreams(in Listing, cands []Row, watching map[string]bool) []Row {
	readers := map[string]map[string]bool{}
	for _, l := range in.Rows {
		if l.Owner == "" || l.Owner == in.Me || in.Expired[l.Shard] {
			continue
		}
		s := StreamOf(l.Shard)
		if readers[s] == nil {
			readers[s] = map[string]bool{}
		}
		readers[s][l.Owner] = true
	}
	var coordinated []string
	for id := range in.firsts() {
		if in.Held[id] || id == in.First {
			coordinated = append(coordinated, StreamOf(id))
		}
	}
	slices.Sort(coordinated)
	var out []Row
	for _, s := range slices.Compact(coordinated) {
		have := 0
		for o := range watching {
			if readers[s][o] {
				have++
			}
		}
		for _, l := range cands {
			if have >= min(Deputies, len(readers[s])) {
				break
			}
			if !watching[l.Owner] && readers[s][l.Owner] {
				watching[l.Owner] = true
				out = append(out, l)
				have++
			}
		}
	}
	return out
}

// othersNaming returns whether a lease a deputy note names is another
// coordinator's naming, which me keeps when it writes its own on the row
// (see Names): a first lease of the listing other than in.First, or a
// lease of a stream the listing does not show (a coordinator of a stream
// me does not read). A lease of me's streams that is no longer a first
// one is an earlier naming, and goes.
func othersNaming(in Listing) func(string) bool {
	firsts := in.firsts()
	streams := map[string]bool{}
	for _, l := range in.Rows {
		streams[StreamOf(l.Shard)] = true
	}
	return func(f string) bool {
		return f != in.First && (firsts[f] || !streams[StreamOf(f)])
	}
}

// Woken is the wake backoff of one owner: when it was last woken, its load
// then, and the wait before it is woken again.
type Woken struct {
	At   time.Time
	Load int
	Wait time.Duration
}

// CoordinatorNotes returns the notes the coordinator (me) writes after its
// round, in order: deputies named while fewer than Deputies watch the
// first lease, then a wake for each owner below its share (see Wakes).
// held is what me runs after its round; woken and the returned map are
// the wake backoff.
func CoordinatorNotes(in Listing, p Plan, held map[string]bool, woken map[string]Woken, now time.Time, lease time.Duration) ([]Intent, map[string]Woken) {
	var out []Intent
	naming := map[string]bool{}
	for _, l := range NameDeputies(in) {
		out = append(out, Intent{Kind: Deputy, Row: l, Names: Names(in, l)})
		naming[l.Shard] = true
	}
	wakes, woken := Wakes(in, p, held, naming, woken, now, lease)
	return append(out, wakes...), woken
}

// Wakes returns a wake note for each owner that runs leases but fewer than
// its share, while another runs at least two more or a lease is open that
// me could not take: free or expired, or stalled while me has no room for
// them all (it will not take them all when they expire). Owners whose
// every row stands still count in no share. Owners go by id. An owner is
// woken again after lease, doubled (to 32 lease at most) each time its load
// did not move: woken holds that backoff, and the map returned replaces
// it (owners no longer live are dropped). A wake goes on a row that names
// no deputy when the owner has one; else on a deputy's row as WakeDeputy,
// whose note keeps the naming. naming are the rows being named deputy
// now: their owners are woken through the naming's note, as WakeDeputy.
// Every wake has Watch set while an open lease is not free (expired, or
// stalled beyond me's room): the woken must time those on their own clock.
func Wakes(in Listing, p Plan, held map[string]bool, naming map[string]bool, woken map[string]Woken, now time.Time, lease time.Duration) ([]Intent, map[string]Woken) {
	load := maps.Clone(p.Load)
	mine, free, expired, stalled := 0, 0, 0, 0
	for _, l := range in.Rows {
		if held[l.Shard] {
			mine++
		}
	}
	for _, l := range in.Rows {
		id := l.Shard
		switch {
		case held[id] || in.Refused[id] || in.Skip[id]:
		case l.Owner == "":
			free++
		case in.Expired[id]:
			expired++
		case in.Stalled[id] && l.Owner != in.Me:
			stalled++
		}
	}
	// Leases that must expire for the woken before they may take them:
	// they list on until they can judge that (Intent.Watch). A free lease
	// needs one listing.
	timed := expired
	if in.MaxLeases > 0 && mine+free+expired+stalled > in.MaxLeases {
		timed += stalled // me will not take them all when they expire
	}
	open := free + timed
	load[in.Me] = mine
	most := 0
	for _, n := range load {
		most = max(most, n)
	}
	// Owners whose every row stands still are not counted in the shares:
	// they look gone.
	for o := range load {
		if o != in.Me && standsStill(in, o) {
			delete(load, o)
		}
	}
	rows := wakeRows(in)
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
		it := wakeOn(rows[owner], naming)
		if it.Kind == WakeDeputy {
			it.Names = Names(in, it.Row)
		}
		it.Watch = timed > 0
		out = append(out, it)
	}
	return out, next
}

// standsStill reports whether every row of owner stood still longer
// than a renewal.
func standsStill(in Listing, owner string) bool {
	n := 0
	for _, l := range in.Rows {
		if l.Owner == owner && l.HandoffTo == "" {
			if !in.Stalled[l.Shard] && !in.Expired[l.Shard] {
				return false
			}
			n++
		}
	}
	return n > 0
}

// wakeRows returns, by owner, the rows a wake note may go on: held by
// another owner that renews them, not being handed over.
func wakeRows(in Listing) map[string][]Row {
	rows := map[string][]Row{}
	for _, l := range in.Rows {
		if l.Owner == "" || l.Owner == in.Me || l.HandoffTo != "" || in.Expired[l.Shard] || in.Stalled[l.Shard] {
			continue
		}
		rows[l.Owner] = append(rows[l.Owner], l)
	}
	return rows
}

// wakeOn returns the wake for an owner with rows: on the first row that
// names no deputy and is not being named, renewed since taken first (one
// handed over but not yet adopted would lose the note to the adoption);
// else a WakeDeputy on its deputy row, which keeps the naming (every
// coordinator's on it, see Names).
func wakeOn(rows []Row, naming map[string]bool) Intent {
	var plain, renewed []Row
	for _, r := range rows {
		if _, dep := DeputyFirst(r.Note); dep || naming[r.Shard] {
			continue
		}
		plain = append(plain, r)
		if r.Renewed {
			renewed = append(renewed, r)
		}
	}
	switch {
	case len(renewed) > 0:
		return Intent{Kind: Wake, Row: renewed[0]}
	case len(plain) > 0:
		return Intent{Kind: Wake, Row: plain[0]}
	}
	for _, r := range rows {
		if naming[r.Shard] {
			return Intent{Kind: WakeDeputy, Row: r}
		}
	}
	return Intent{Kind: WakeDeputy, Row: rows[0]}
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

// PassLead returns the rows a leaving coordinator (me) writes its lead
// note on, so that the leases it is about to release are taken at once:
// one row of each of Deputies other owners, its deputies' rows for first
// before the others, then by shard. rows are the last listing's, finished
// ones included.
func PassLead(rows []Row, me, first string) []Intent {
	var deputies, others []Row
	for _, l := range rows {
		if l.Owner == "" || l.Owner == me || l.HandoffTo != "" || l.Finished {
			continue
		}
		if namesFirst(l, first) {
			deputies = append(deputies, l)
		} else {
			others = append(others, l)
		}
	}
	byShard := func(a, b Row) int { return strings.Compare(a.Shard, b.Shard) }
	slices.SortFunc(deputies, byShard)
	slices.SortFunc(others, byShard)
	var out []Intent
	seen := map[string]bool{}
	for _, l := range append(deputies, others...) {
		if len(out) < Deputies && !seen[l.Owner] {
			seen[l.Owner] = true
			out = append(out, Intent{Kind: Lead, Row: l})
		}
	}
	return out
}
