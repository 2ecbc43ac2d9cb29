package soak

// Untaken max in the mixed mode, per stream: every twentieth of a lease
// the watch reads every stream's rows and asks each live, running worker
// (not crashed, leaving or frozen) which streams it reads and which leases
// it holds. A readable lease of a stream counts as untaken while at most
// two workers are out, some worker reading the stream has room, and no
// worker reading it holds it. While no live worker reads a stream, its
// leases do not count: the watch keeps how long that lasted instead, and
// the table shows it. The soak's untaken max is the largest over the
// streams, held to the same bound as in the other modes.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shardlease/shardlease"
)

// mixedUntaken is the per-stream record of the watch.
type mixedUntaken struct {
	mu          sync.Mutex
	max         map[string]time.Duration // stream → longest untaken
	maxKey      map[string]string        // stream → the lease of max, and when it began
	unreadSince map[string]time.Time     // stream → since when no live worker reads it
	unread      map[string]time.Duration // stream → time unread in total
	unreadMax   map[string]time.Duration // stream → longest time unread at once
}

// reader is one live, running worker as the watch sees it.
type reader struct {
	streams map[string]bool
	held    map[string]bool
	room    bool
}

// watchMixed samples every stream's rows and the workers every twentieth
// of a lease until ctx ends.
func (s *soak) watchMixed(ctx context.Context) {
	u := &s.mix.untakens
	u.mu.Lock()
	u.max, u.maxKey = map[string]time.Duration{}, map[string]string{}
	u.unreadSince, u.unread, u.unreadMax = map[string]time.Time{}, map[string]time.Duration{}, map[string]time.Duration{}
	u.mu.Unlock()
	s.untaken.mu.Lock()
	s.untaken.since = map[string]time.Time{}
	s.untaken.mu.Unlock()
	t := time.NewTicker(s.cfg.Lease / 20)
	defer t.Stop()
	store := s.memoryOrDynamo()
	for {
		select {
		case <-ctx.Done():
			s.endUnread(time.Now())
			return
		case <-t.C:
		}
		rows := map[string][]shardlease.Lease{}
		for _, stream := range s.mix.streams {
			ls, err := store.List(context.WithoutCancel(ctx), stream)
			if err != nil {
				continue
			}
			rows[stream] = ls
		}
		s.sampleMixed(rows, time.Now())
	}
}

// liveReaders returns the live, running workers with what each reads and
// holds, and whether each has room under its cap.
func (s *soak) liveReaders() []reader {
	var out []reader
	for slot, inc := range s.liveSlots() {
		if inc == nil || inc.consumer == nil || inc.crashed.Load() || inc.leaving.Load() || inc.freeze.frozen() != nil {
			continue
		}
		r := reader{streams: map[string]bool{}, held: map[string]bool{}}
		if sr, ok := inc.consumer.(streamReader); ok {
			for _, name := range sr.Streams() {
				r.streams[name] = true
			}
		}
		h := inc.consumer.Held()
		for _, key := range h {
			r.held[key] = true
		}
		most := s.cfg.mixedCapOf(slot)
		r.room = most == 0 || len(h) < most
		out = append(out, r)
	}
	return out
}

// sampleMixed updates the untaken times from one reading of every
// stream's rows.
func (s *soak) sampleMixed(rows map[string][]shardlease.Lease, now time.Time) {
	live := s.liveReaders()
	enough := len(live) >= s.cfg.Workers-2
	for stream, ls := range rows {
		held, room, read := map[string]bool{}, false, false
		for _, r := range live {
			if !r.streams[stream] {
				continue
			}
			read, room = true, room || r.room
			for key := range r.held {
				held[key] = true
			}
		}
		s.markRead(stream, read, now)
		byShard := make(map[string]shardlease.Lease, len(ls))
		for _, l := range ls {
			byShard[l.Key.Shard] = l
		}
		for _, l := range ls {
			counts := read && room && enough && !held[l.Key.String()] && readable(l, byShard)
			s.sampleLease(stream, l.Key.String(), counts, now)
		}
	}
}

// sampleLease updates the untaken time of one lease of stream: counts says
// whether it is untaken now.
func (s *soak) sampleLease(stream, key string, counts bool, now time.Time) {
	u := &s.untaken
	u.mu.Lock()
	defer u.mu.Unlock()
	if !counts {
		delete(u.since, key)
		return
	}
	since, ok := u.since[key]
	if !ok {
		u.since[key] = now
		return
	}
	d := now.Sub(since)
	what := fmt.Sprintf("%s (from %.1fs)", key, since.Sub(s.start).Seconds())
	if d > u.max {
		u.max, u.maxKey = d, what
	}
	m := &s.mix.untakens
	m.mu.Lock()
	defer m.mu.Unlock()
	if d > m.max[stream] {
		m.max[stream], m.maxKey[stream] = d, what
	}
}

// markRead notes whether some live worker reads stream now.
func (s *soak) markRead(stream string, read bool, now time.Time) {
	u := &s.mix.untakens
	u.mu.Lock()
	defer u.mu.Unlock()
	since, unread := u.unreadSince[stream]
	switch {
	case !read && !unread:
		u.unreadSince[stream] = now
		fmt.Fprintf(s.cfg.Events, "%6.1fs no live worker reads %s\n", s.since(), stream)
	case read && unread:
		u.closeUnread(stream, since, now)
		fmt.Fprintf(s.cfg.Events, "%6.1fs %s is read again, after %v unread\n", s.since(), stream, now.Sub(since).Round(time.Millisecond))
	}
}

// endUnread closes every stretch of a stream unread at the watch's end.
func (s *soak) endUnread(now time.Time) {
	u := &s.mix.untakens
	u.mu.Lock()
	defer u.mu.Unlock()
	for stream, since := range u.unreadSince {
		u.closeUnread(stream, since, now)
	}
}

// closeUnread adds a stretch of stream unread from since to now. u.mu is
// held.
func (u *mixedUntaken) closeUnread(stream string, since, now time.Time) {
	d := now.Sub(since)
	u.unread[stream] += d
	u.unreadMax[stream] = max(u.unreadMax[stream], d)
	delete(u.unreadSince, stream)
}

// MixedStream is one stream's liveness figures in a mixed soak.
type MixedStream struct {
	Name    string
	Readers []string // the kinds of worker that read it at some time
	// UntakenMax is the longest any of its leases stayed free or expired
	// while a live worker reading it had room (UntakenLease).
	UntakenMax   time.Duration
	UntakenLease string
	// Unread is how long, in all, no live worker read it (its leases were
	// not counted meanwhile); UnreadMax the longest such stretch.
	Unread, UnreadMax time.Duration
}

// mixedResult is result for the mixed mode: the totals over every stream,
// each stream's figures, and its liveness.
func (s *soak) mixedResult(ctx context.Context, drained bool) *Result {
	r := s.result(ctx, drained)
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	r.Group = true
	r.SourceInterval = s.cfg.SourceInterval
	s.mu.Lock()
	defer s.mu.Unlock()
	store := s.memoryOrDynamo()
	byStream := map[string][]string{}
	for _, id := range s.produced {
		byStream[s.grp.streamOf[id]] = append(byStream[s.grp.streamOf[id]], id)
	}
	u := &s.mix.untakens
	for _, name := range s.mix.streams {
		ids := byStream[name]
		sr := StreamResult{Name: name, Role: "read by " + strings.Join(s.mix.readers(name), "; "), Produced: len(ids), Audited: len(ids), Overlaps: s.overlapsOf[name]}
		part := &Result{}
		s.recordAudit(part, ids, func(string, ...any) {})
		sr.Handled, sr.DeadLettered, sr.Lost, sr.Duplicates, sr.DupUnexplained = part.Handled, part.DeadLettered, part.Lost, part.Duplicates, part.DupUnexplained
		sr.Keys, sr.KeysOutOfOrder = part.Keys, part.KeysOutOfOrder
		ls, err := store.List(ctx, name)
		if err != nil {
			problem("listing the leases of %s at the end: %v", name, err)
		}
		for _, l := range ls {
			if l.Owner != "" {
				sr.HeldAtEnd++
				r.HeldAtEnd++
				problem("lease %s still held by %s after every worker stopped (%s)", l.Key, l.Owner, s.audit.lastWrites(l.Key.String(), 3))
			}
		}
		r.Streams = append(r.Streams, sr)
		u.mu.Lock()
		r.Mixed = append(r.Mixed, MixedStream{Name: name, Readers: s.mix.readers(name), UntakenMax: u.max[name], UntakenLease: u.maxKey[name],
			Unread: u.unread[name], UnreadMax: u.unreadMax[name]})
		u.mu.Unlock()
	}
	return r
}

// mixedTable prints each stream's liveness figures in a mixed soak.
func (r *Result) mixedTable(b *strings.Builder, ok func(bool) string) {
	if len(r.Mixed) == 0 {
		return
	}
	row := func(name string, v any, verdict string) { fmt.Fprintf(b, "  %-56s %8v  %s\n", name, v, verdict) }
	fmt.Fprintf(b, "\n%-58s %8s\n", "mixed: Consumers and Groups with different sets, one table", "figure")
	for _, st := range r.Mixed {
		row(fmt.Sprintf("%s: untaken max, a reader with room (bound %v)", st.Name, r.UntakenBound), st.UntakenMax.Round(10*time.Millisecond), ok(st.UntakenMax <= r.UntakenBound))
		row("  time no live worker read it (not counted), in all", st.Unread.Round(10*time.Millisecond), "")
		row("  longest such stretch", st.UnreadMax.Round(10*time.Millisecond), "")
	}
}

// mixedSummary prints a liveness summary line per stream of a mixed soak.
func (r *Result) mixedSummary(b *strings.Builder) {
	for _, st := range r.Mixed {
		lease := ""
		if st.UntakenLease != "" {
			lease = ", on " + st.UntakenLease
		}
		fmt.Fprintf(b, "summary %s: untaken max %v (bound %v)%s; unread %v (longest %v)\n", st.Name,
			st.UntakenMax.Round(10*time.Millisecond), r.UntakenBound, lease, st.Unread.Round(10*time.Millisecond), st.UnreadMax.Round(10*time.Millisecond))
	}
}
