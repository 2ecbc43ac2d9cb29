package shardlease

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Status is a snapshot of what one consumer does now, for operators: the
// shards it holds with their checkpoints, lag and stuck retries, and its
// coordination role. Its JSON form (see MarshalJSON) is stable: fields are
// added, never renamed or removed.
type Status struct {
	// Stream is the stream consumed; Owner this consumer's identity (see
	// OwnerID).
	Stream, Owner string
	// Role names the coordination role: "uncoordinated", "quiet",
	// "watching", "deputy", "catching up", "alarmed" or "coordinator" (see
	// docs/coordination.md).
	Role string
	// Coordinating reports whether this consumer coordinates the stream
	// (Role is "coordinator"), as Stats().Coordinating does.
	Coordinating bool
	// WorkersWanted is the coordinator's workers-wanted figure (see
	// docs/operating.md); zero on other workers and until it is known.
	WorkersWanted int
	// MaxBehindLatest is the largest BehindLatest of the held shards.
	MaxBehindLatest time.Duration
	// Shards are the held shards, ordered by shard id.
	Shards []ShardStatus
	// Abandoned are the shards whose handler was abandoned and still runs
	// (see Handler): this worker neither holds nor takes them.
	Abandoned []string
	// Untaken are the leases (named as Shards are) that this worker's
	// latest listing showed free or expired, and that had stayed so for a
	// lease duration: no live worker that reads their stream takes them
	// (every one is at its WithMaxLeases cap, or none is left). Empty on a
	// worker that has not listed lately (it sees no listing to judge).
	Untaken []string
	// Time is when the snapshot was taken.
	Time time.Time
}

// ShardStatus is one held shard in a Status.
type ShardStatus struct {
	// Shard is the shard id ("stream/shard" in a Group's Status); Counter
	// the lease's fencing counter as the
	// last write left it; HandoffTo the worker it was asked to go to, or "".
	Shard     string
	Counter   int64
	HandoffTo string
	// Checkpoint and SubSequence are the checkpoint the next write carries
	// (-1: the whole record); Checkpoint is "" when nothing was processed.
	Checkpoint  string
	SubSequence int64
	// Read is false until the reader's first read: BehindLatest and
	// CheckpointAge are zero then.
	Read bool
	// BehindLatest is the MillisBehindLatest of the reader's last read;
	// CheckpointAge how long the checkpoint has waited while records were
	// behind it (see Lag).
	BehindLatest, CheckpointAge time.Duration
	// Stuck is set while the handler keeps failing on one batch.
	Stuck *StuckRetry
}

// StuckRetry is a shard whose handler keeps failing on one batch (see
// docs/handlers.md#records-that-keep-failing).
type StuckRetry struct {
	// For is how long the batch has been retried; Sequence its first
	// record, which the checkpoint stays before.
	For      time.Duration
	Sequence string
	// AgesOutIn is how long until that record leaves the stream, when
	// AgesOutKnown (the stream's retention is known).
	AgesOutIn    time.Duration
	AgesOutKnown bool
}

// statusView is what Status reads that Run's goroutine decides: the role,
// and the coordinator's workers-wanted sizing. Run's goroutine writes it
// through seeRole.
type statusView struct {
	role   atomic.Int32 // the role plus one; 0 before Run decided one
	sizing sizing
	// untaken is Status.Untaken as the latest take round judged it.
	untaken atomic.Pointer[untakenSeen]
}

// untakenSeen is the leases a take round at at judged untaken (see
// Status.Untaken).
type untakenSeen struct {
	leases []string
	at     time.Time
}

// seeRole is Run's goroutine passing a role decision, made at the end of
// every take round (with the round's listing, leases at at) and at every
// other role change.
func (c *Consumer) seeRole(r role, leases []Lease, at time.Time) {
	c.view.role.Store(int32(r) + 1)
	c.view.sizing.sample(r == coordinator, leases, at, c.cfg.leaseDuration)
}

// roleNow returns the role Run's goroutine last passed, or the one it
// starts in.
func (c *Consumer) roleNow() role {
	if v := c.view.role.Load(); v > 0 {
		return role(v - 1)
	}
	if c.caps.notes == nil {
		return uncoordinated
	}
	return catchingUp
}

// Status returns a snapshot of the consumer: the shards it holds with their
// checkpoints, lag and stuck retries, and its coordination role. It may be
// called at any time, from any goroutine, before, during and after Run.
func (c *Consumer) Status() Status {
	now := time.Now()
	r := c.roleNow()
	s := Status{Stream: c.stream, Owner: c.cfg.identity, Role: r.String(), Coordinating: r == coordinator, Time: now}
	s.WorkersWanted, _ = c.view.sizing.workersWanted()
	c.mu.Lock()
	runners := make([]*leaseRunner, 0, len(c.held))
	for _, run := range c.held {
		runners = append(runners, run)
	}
	for shard := range c.stuck {
		s.Abandoned = append(s.Abandoned, shard)
	}
	c.mu.Unlock()
	slices.Sort(s.Abandoned)
	if u := c.view.untaken.Load(); u != nil && now.Sub(u.at) <= 2*c.cfg.takeInterval {
		s.Untaken = slices.Clone(u.leases)
	}
	for _, run := range runners {
		sh := run.status(now)
		s.MaxBehindLatest = max(s.MaxBehindLatest, sh.BehindLatest)
		s.Shards = append(s.Shards, sh)
	}
	slices.SortFunc(s.Shards, func(a, b ShardStatus) int { return strings.Compare(a.Shard, b.Shard) })
	return s
}

// StatusVersion is the version of Status's JSON form.
const StatusVersion = 1

// statusJSON is Status's JSON form; its field names are the promise.
type statusJSON struct {
	Version       int               `json:"version"`
	Stream        string            `json:"stream"`
	Owner         string            `json:"owner"`
	Role          string            `json:"role"`
	Coordinating  bool              `json:"coordinating"`
	WorkersWanted *int              `json:"workers_wanted"`
	MaxBehindMs   int64             `json:"max_behind_latest_ms"`
	Shards        []shardStatusJSON `json:"shards"`
	Abandoned     []string          `json:"abandoned"`
	Untaken       []string          `json:"untaken"`
	Time          time.Time         `json:"time"`
}

type shardStatusJSON struct {
	Shard       string          `json:"shard"`
	Counter     int64           `json:"counter"`
	HandoffTo   string          `json:"handoff_to"`
	Checkpoint  string          `json:"checkpoint"`
	SubSequence *int64          `json:"sub_sequence"`
	BehindMs    *int64          `json:"behind_latest_ms"`
	AgeMs       int64           `json:"checkpoint_age_ms"`
	Stuck       *stuckRetryJSON `json:"stuck"`
}

type stuckRetryJSON struct {
	ForMs       int64  `json:"for_ms"`
	Sequence    string `json:"sequence"`
	AgesOutInMs *int64 `json:"ages_out_in_ms"`
}

// MarshalJSON returns the status's JSON form, version StatusVersion:
//
//	{"version":1, "stream", "owner", "role", "coordinating",
//	 "workers_wanted" (null unless known to the coordinator),
//	 "max_behind_latest_ms",
//	 "shards":[{"shard", "counter", "handoff_to", "checkpoint",
//	   "sub_sequence" (null for a whole record),
//	   "behind_latest_ms" (null before the first read), "checkpoint_age_ms",
//	   "stuck" (null, or {"for_ms", "sequence", "ages_out_in_ms" (null when unknown)})}],
//	 "abandoned":[shard ids], "untaken":[shard ids], "time" (RFC 3339)}
//
// Durations are whole milliseconds. Fields are added, never renamed or
// removed, without a new version.
func (s Status) MarshalJSON() ([]byte, error) {
	j := statusJSON{Version: StatusVersion, Stream: s.Stream, Owner: s.Owner, Role: s.Role, Coordinating: s.Coordinating,
		MaxBehindMs: s.MaxBehindLatest.Milliseconds(), Shards: []shardStatusJSON{}, Abandoned: s.Abandoned, Time: s.Time}
	if s.WorkersWanted > 0 {
		j.WorkersWanted = &s.WorkersWanted
	}
	if j.Abandoned == nil {
		j.Abandoned = []string{}
	}
	j.Untaken = s.Untaken
	if j.Untaken == nil {
		j.Untaken = []string{}
	}
	for _, sh := range s.Shards {
		js := shardStatusJSON{Shard: sh.Shard, Counter: sh.Counter, HandoffTo: sh.HandoffTo, Checkpoint: sh.Checkpoint,
			AgeMs: sh.CheckpointAge.Milliseconds()}
		if sh.SubSequence >= 0 {
			js.SubSequence = &sh.SubSequence
		}
		if sh.Read {
			ms := sh.BehindLatest.Milliseconds()
			js.BehindMs = &ms
		}
		if st := sh.Stuck; st != nil {
			js.Stuck = &stuckRetryJSON{ForMs: st.For.Milliseconds(), Sequence: st.Sequence}
			if st.AgesOutKnown {
				ms := st.AgesOutIn.Milliseconds()
				js.Stuck.AgesOutInMs = &ms
			}
		}
		j.Shards = append(j.Shards, js)
	}
	return json.Marshal(j)
}

// StatusHandler returns an http.Handler that serves c.Status() as JSON (see
// Status.MarshalJSON) to GET and HEAD requests, and refuses other methods
// with 405. Mount it where operators look, e.g. mux.Handle("/status",
// consumer.StatusHandler()); it reads only the consumer's memory.
func (c *Consumer) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "shardlease status: use GET", http.StatusMethodNotAllowed)
			return
		}
		body, err := json.Marshal(c.Status())
		if err != nil {
			http.Error(w, "shardlease status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(body, '\n'))
	})
}
