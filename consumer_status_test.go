package shardlease_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// statusDoc is Status's documented JSON form, as a client decodes it.
type statusDoc struct {
	Version       int    `json:"version"`
	Stream        string `json:"stream"`
	Owner         string `json:"owner"`
	Role          string `json:"role"`
	Coordinating  bool   `json:"coordinating"`
	WorkersWanted *int   `json:"workers_wanted"`
	MaxBehindMs   *int64 `json:"max_behind_latest_ms"`
	Shards        []struct {
		Shard       string `json:"shard"`
		Counter     int64  `json:"counter"`
		HandoffTo   string `json:"handoff_to"`
		Checkpoint  string `json:"checkpoint"`
		SubSequence *int64 `json:"sub_sequence"`
		BehindMs    *int64 `json:"behind_latest_ms"`
		AgeMs       *int64 `json:"checkpoint_age_ms"`
		Stuck       *struct {
			ForMs       int64  `json:"for_ms"`
			Sequence    string `json:"sequence"`
			AgesOutInMs *int64 `json:"ages_out_in_ms"`
		} `json:"stuck"`
	} `json:"shards"`
	Abandoned []string `json:"abandoned"`
	Untaken   []string `json:"untaken"`
	Time      string   `json:"time"`
}

// getStatus serves one GET of c's StatusHandler and decodes it.
func getStatus(t *testing.T, c *shardlease.Consumer) statusDoc {
	t.Helper()
	rec := httptest.NewRecorder()
	c.StatusHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var doc statusDoc
	dec := json.NewDecoder(strings.NewReader(rec.Body.String()))
	dec.DisallowUnknownFields() // every field is documented in statusDoc
	require.NoError(t, dec.Decode(&doc), rec.Body.String())
	return doc
}

// Status shows the held shards, sorted, with the checkpoint the handler
// reached, and the role: the single worker coordinates. The handler serves
// the same as JSON, version 1, and refuses anything but GET and HEAD.
func TestStatusShowsHeldShardsAndRole(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		wk := startWorker(t, w, w.kin, w.store, h.handler("solo"), w.opts("solo")...)
		w.put(t, p, 20, 10)
		waitFor(t, 30*w.lease, "every record handled and the worker coordinating", func() bool {
			return h.distinct() == 20 && wk.c.Status().Coordinating
		})
		s := wk.c.Status()
		assert.Equal(t, w.stream, s.Stream)
		assert.Equal(t, wk.c.OwnerID(), s.Owner)
		assert.Equal(t, "coordinator", s.Role)
		require.Len(t, s.Shards, 2)
		assert.Equal(t, "shardId-000000000000", s.Shards[0].Shard)
		assert.Equal(t, "shardId-000000000001", s.Shards[1].Shard)
		for _, sh := range s.Shards {
			ids := p.byShard[sh.Shard]
			require.NotEmpty(t, ids, sh.Shard)
			waitFor(t, 10*w.lease, "the last checkpoint", func() bool {
				got, _ := shardStatus(wk.c, sh.Shard)
				return got.Checkpoint == p.seq[ids[len(ids)-1]]
			})
			assert.Nil(t, sh.Stuck)
			assert.Positive(t, sh.Counter)
			assert.Equal(t, int64(-1), sh.SubSequence)
		}

		doc := getStatus(t, wk.c)
		assert.Equal(t, 1, doc.Version)
		assert.Equal(t, "coordinator", doc.Role)
		assert.True(t, doc.Coordinating)
		assert.Equal(t, wk.c.OwnerID(), doc.Owner)
		require.Len(t, doc.Shards, 2)
		for _, sh := range doc.Shards {
			assert.Nil(t, sh.SubSequence, "a whole record")
			require.NotNil(t, sh.BehindMs, "read already")
			require.NotNil(t, sh.AgeMs)
			assert.Nil(t, sh.Stuck)
		}
		assert.Equal(t, []string{}, doc.Abandoned)

		rec := httptest.NewRecorder()
		wk.c.StatusHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/status", nil))
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
		assert.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
	})
}

// A shard whose handler keeps failing shows as stuck: since when, on the
// first record of the batch, which the checkpoint stays before.
func TestStatusStuckRetry(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		var failing atomic.Bool
		failing.Store(true)
		h := func(ctx context.Context, b *shardlease.Batch) error {
			if failing.Load() {
				return errors.New("poison")
			}
			return nil
		}
		wk := startWorker(t, w, w.kin, w.store, h, w.opts("stuck")...)
		p := &produced{}
		w.put(t, p, 3, 1)
		// Stuck for a millisecond at least, so that the document's ForMs,
		// in whole milliseconds, is positive too.
		waitFor(t, 30*w.lease, "a stuck retry", func() bool {
			s, ok := shardStatus(wk.c, shard0)
			return ok && s.Stuck != nil && s.Stuck.For >= time.Millisecond
		})
		s, _ := shardStatus(wk.c, shard0)
		assert.Equal(t, p.seq[p.ids[0]], s.Stuck.Sequence)
		assert.Empty(t, s.Checkpoint, "nothing handled")
		doc := getStatus(t, wk.c)
		require.Len(t, doc.Shards, 1)
		require.NotNil(t, doc.Shards[0].Stuck)
		assert.Equal(t, p.seq[p.ids[0]], doc.Shards[0].Stuck.Sequence)
		assert.Positive(t, doc.Shards[0].Stuck.ForMs)

		failing.Store(false)
		waitFor(t, 30*w.lease, "moving again", func() bool {
			s, ok := shardStatus(wk.c, shard0)
			return ok && s.Stuck == nil && s.Checkpoint == p.seq[p.ids[2]]
		})
	})
}

// A lease no live worker may take shows in Status.Untaken once it has
// stood free for a lease duration: here the only worker is at its
// WithMaxLeases cap of one, of two shards. It leaves Untaken once taken.
func TestStatusShowsUntakenLeases(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		wk := startWorker(t, w, w.kin, w.store, newHandled().handler("capped"), w.opts("capped", shardlease.WithMaxLeases(1))...)
		waitFor(t, 30*w.lease, "the lease it may not take shown untaken", func() bool {
			return len(wk.c.Status().Untaken) == 1
		})
		held := wk.c.Held()
		require.Len(t, held, 1)
		untaken := wk.c.Status().Untaken[0]
		assert.NotEqual(t, held[0], untaken, "the lease it holds is not untaken")
		assert.Equal(t, []string{untaken}, getStatus(t, wk.c).Untaken)

		other := startWorker(t, w, w.kin, w.store, newHandled().handler("other"), w.opts("other")...)
		waitFor(t, 30*w.lease, "the lease taken by a second worker, and no longer untaken", func() bool {
			return slices.Contains(other.c.Held(), untaken) && len(wk.c.Status().Untaken) == 0
		})
	})
}

// Of two workers only one coordinates; the other names another role, and
// neither reports workers wanted until the coordinator has sampled for a
// lease duration.
func TestStatusRoleOfTwoWorkers(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitFor(t, 60*w.lease, "two leases each, one coordinator", func() bool {
			sa, sb := a.c.Status(), b.c.Status()
			return len(sa.Shards) == 2 && len(sb.Shards) == 2 && sa.Coordinating != sb.Coordinating
		})
		lead, other := a.c, b.c
		if !lead.Status().Coordinating {
			lead, other = other, lead
		}
		assert.NotEqual(t, "coordinator", other.Status().Role)
		assert.Contains(t, []string{"quiet", "watching", "deputy", "catching up", "alarmed"}, other.Status().Role)
		assert.Zero(t, other.Status().WorkersWanted)
		assert.Nil(t, getStatus(t, other).WorkersWanted)
		// Caught up: the coordinator wants the two workers there are.
		waitFor(t, 30*w.lease, "workers wanted", func() bool { return lead.Status().WorkersWanted == 2 })
		assert.Equal(t, 2, *getStatus(t, lead).WorkersWanted)
	})
}

// Before Run, Status holds no shard and the role a consumer starts in.
func TestStatusBeforeRun(t *testing.T) {
	t.Parallel()
	c, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders",
		func(context.Context, *shardlease.Batch) error { return nil }, shardlease.WithOwnerID("idle"))
	require.NoError(t, err)
	s := c.Status()
	assert.Empty(t, s.Shards)
	assert.Equal(t, "catching up", s.Role)
	assert.False(t, s.Coordinating)
	doc := getStatus(t, c)
	assert.NotNil(t, doc.Shards)
	assert.Empty(t, doc.Shards)
	assert.Nil(t, doc.WorkersWanted)
}
