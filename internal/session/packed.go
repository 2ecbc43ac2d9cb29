package session

import "time"

// Packed checkpoints: a worker's session row carries the checkpoints of the
// leases its session keeps, one entry a lease, written by the keep itself
// (fenced with the session). An entry names the lease counter of the holding
// that wrote it: a lease row's counter moves at every write to it and every
// owner change, so one (lease, counter) names one holding, and an entry
// holds only while the lease row still shows that holding.

// Valid reports whether an entry packed at counter by the session whose row
// key is session holds for a lease row that names rowSession at rowCounter:
// the row still shows the holding that wrote the entry.
func Valid(rowSession string, rowCounter int64, session string, counter int64) bool {
	return rowSession != "" && rowSession == session && rowCounter == counter
}

// Idle reports whether a packed checkpoint that landed in the session row,
// and has not moved since changed, is due to be flushed to its lease row at
// now (after a lease duration, say): the entry then leaves the session row,
// which holds only busy leases' entries, so that an idle lease costs no
// write at all.
func Idle(landed bool, changed, now time.Time, after time.Duration) bool {
	return landed && !now.Before(changed.Add(after))
}

// Want is what a holder's lease asks of the session row at a keep: the
// counter of its handle, the checkpoint to carry (as one comparable string),
// and whether the lease row holds that checkpoint already.
type Want struct {
	Counter  int64
	At       string
	RowHolds bool
}

// Sent is what the session row holds for a lease, as this holder wrote it.
type Sent struct {
	Counter int64
	At      string
}

// Diff returns what a keep writes: the keys whose entry must be put (the
// holding or the checkpoint moved, and the lease row does not hold it), and
// the keys whose entry this holder wrote and must remove (the lease row
// holds the checkpoint now, or the lease is no longer the holder's).
// Neither is ordered.
func Diff(want map[string]Want, sent map[string]Sent) (put, drop []string) {
	for k, w := range want {
		s, has := sent[k]
		switch {
		case w.RowHolds && has:
			drop = append(drop, k)
		case w.RowHolds:
		case !has || s.Counter != w.Counter || s.At != w.At:
			put = append(put, k)
		}
	}
	for k := range sent {
		if _, ok := want[k]; !ok {
			drop = append(drop, k)
		}
	}
	return put, drop
}
