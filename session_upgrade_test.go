package shardlease_test

// The upgrade to sessions and the downgrade from them, with workers of the
// previous release (the last commit before sessions) running beside this
// one as real processes built from the repository's history (see
// internal/prevrelease). Rows a session keeps read as corrupt to the
// previous release, so it never takes them: both releases share the table
// with one reader per shard while a fleet rolls either way.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/internal/prevrelease"
)

// prevReleaseCommit is the previous release: main just before sessions.
const prevReleaseCommit = "0beb1dd"

// upgradeWork is how long every handler call of these tests works, in both
// releases, so that two readers of one shard would be seen at once.
const upgradeWork = 5 * time.Millisecond

var prevBuild struct {
	once sync.Once
	bin  string
	err  error
}

// prevReleaseWorker returns the previous release's worker binary, built
// once per test binary run (and kept in the user's cache directory across
// runs). It skips the test, saying why, when git or the go command is
// missing or the clone lacks the commit (a shallow clone), unless
// SHARDLEASE_REQUIRE_PREVIOUS_RELEASE is set in the environment: there the
// test fails.
func prevReleaseWorker(t *testing.T) string {
	t.Helper()
	prevBuild.once.Do(func() {
		root, err := os.UserCacheDir()
		if err != nil {
			root = os.TempDir()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		began := time.Now()
		prevBuild.bin, prevBuild.err = prevrelease.Cached(ctx, ".", prevReleaseCommit, filepath.Join(root, "shardlease-prevrelease"))
		if prevBuild.err == nil {
			t.Logf("previous release's worker (%s) ready in %v", prevReleaseCommit, time.Since(began).Round(time.Millisecond))
		}
	})
	if prevBuild.err != nil {
		if os.Getenv("SHARDLEASE_REQUIRE_PREVIOUS_RELEASE") == "" && isUnavailable(prevBuild.err) {
			t.Skipf("cannot run the previous release here: %v", prevBuild.err)
		}
		t.Fatal(prevBuild.err)
	}
	return prevBuild.bin
}

func isUnavailable(err error) bool { return errors.Is(err, prevrelease.ErrUnavailable) }

// releaseFleet is a table and a stream on the emulators, the workers of both
// releases on them, a producer, and every record each worker handled. The
// test's goroutine writes every field but spans.
type releaseFleet struct {
	w        *world
	table    string
	bin      string // the previous release's worker
	dir      string // the processes' record files and logs
	dynURL   string
	kinURL   string
	prod     *steadyProducer
	olds     map[string]*prevrelease.Worker // by owner id
	news     map[string]*worker             // by owner id
	switches map[string]*crash.Switch       // the news' crash switches
	began    time.Time

	mu    sync.Mutex         // guards spans
	spans []prevrelease.Span // the in-process workers'; appended by their handlers
}

// newReleaseFleet makes a fleet on a fresh table and stream of shards
// shards, with the emulator world's timings (L = 2 s), and starts its
// producer. It holds a slot of the timed tests (world.timed).
func newReleaseFleet(t *testing.T, shards int32) *releaseFleet {
	t.Helper()
	if testing.Short() {
		t.Skip("runs processes of the previous release on the emulators; not under -short")
	}
	bin := prevReleaseWorker(t)
	client, table := dynamoTable(t)
	store, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, shards))
	w := &world{name: "emulator", kin: kc, store: store, stream: stream,
		lease: 2 * time.Second, renew: 2 * time.Second / 3, take: 300 * time.Millisecond, idle: 50 * time.Millisecond}
	w.timed(t)
	f := &releaseFleet{w: w, table: table, bin: bin, dir: t.TempDir(), olds: map[string]*prevrelease.Worker{},
		news: map[string]*worker{}, switches: map[string]*crash.Switch{}, began: time.Now(), dynURL: emulator.DynamoEndpoint(t), kinURL: emulator.KinesisEndpoint(t)}
	f.prod = startSteadyProducer(kc, stream, 4, 50*time.Millisecond)
	t.Cleanup(func() { _ = f.prod.halt() })
	return f
}

// startOld starts a worker process of the previous release.
func (f *releaseFleet) startOld(t *testing.T, owner string) {
	t.Helper()
	p, err := prevrelease.Start(prevrelease.Config{Bin: f.bin, Dir: f.dir, DynamoEndpoint: f.dynURL, KinesisEndpoint: f.kinURL,
		Table: f.table, Stream: f.w.stream, Owner: owner,
		Lease: f.w.lease, Renew: f.w.renew, Take: f.w.take, Idle: f.w.idle, Work: upgradeWork})
	require.NoError(t, err)
	f.olds[owner] = p
	t.Cleanup(func() {
		_ = p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			t.Logf("log of %s (previous release):\n%s", owner, b)
		}
	})
}

// sessionRowComplaint is what the previous release logs of a row a
// session keeps: it reads the row as corrupt and leaves it alone.
const sessionRowComplaint = "attribute lease_duration is a string, want a number"

// oldComplaints returns the previous release's WARN and ERROR log lines:
// those about rows a session keeps, and the others.
func (f *releaseFleet) oldComplaints(t *testing.T) (sessionRows, others []string) {
	t.Helper()
	for _, p := range f.olds {
		b, err := os.ReadFile(p.Log)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case !strings.Contains(line, `"level":"WARN"`) && !strings.Contains(line, `"level":"ERROR"`):
			case strings.Contains(line, sessionRowComplaint):
				sessionRows = append(sessionRows, line)
			default:
				others = append(others, line)
			}
		}
	}
	return sessionRows, others
}

// stopOld stops a process of the previous release gracefully (SIGTERM) and
// requires a clean exit.
func (f *releaseFleet) stopOld(t *testing.T, owner string) {
	t.Helper()
	require.NoError(t, f.olds[owner].Stop(5*f.w.lease), "graceful stop of %s (log %s)", owner, f.olds[owner].Log)
}

// startNew starts an in-process worker of this release; its switch
// crashes it (see internal/crash). Sessions on is this release's default,
// so such a worker is started without WithSessions: an upgrade is the
// default beside the previous release.
func (f *releaseFleet) startNew(t *testing.T, owner string, sessions bool) {
	t.Helper()
	sw := &crash.Switch{}
	f.switches[owner] = sw
	opts := []shardlease.Option{shardlease.WithShutdownTimeout(f.w.lease)}
	if !sessions {
		opts = append(opts, shardlease.WithSessions(false))
	}
	f.news[owner] = startWorker(t, f.w, crash.Kinesis(f.w.kin, sw), crash.Store(f.w.store, sw), f.handler(owner),
		f.w.opts(owner, opts...)...)
}

// handler records each record an in-process worker handled, as the
// previous release's worker writes it to its file.
func (f *releaseFleet) handler(owner string) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		start := time.Now()
		time.Sleep(upgradeWork) // the handler's work
		end := time.Now()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range b.Records {
			f.spans = append(f.spans, prevrelease.Span{Owner: owner, Shard: b.ShardID, Seq: r.SequenceNumber, Start: start, End: end})
		}
		return nil
	}
}

// allSpans returns every record handled so far by both releases.
func (f *releaseFleet) allSpans(t *testing.T) []prevrelease.Span {
	t.Helper()
	f.mu.Lock()
	out := slices.Clone(f.spans)
	f.mu.Unlock()
	for _, p := range f.olds {
		s, err := prevrelease.ReadSpans(p.Out)
		require.NoError(t, err)
		out = append(out, s...)
	}
	return out
}

// holders maps each owner id (without its incarnation) to the shards whose
// rows name it, and counts the rows a session keeps.
func (f *releaseFleet) holders(t *testing.T) (held map[string][]string, sessionRows, rows int) {
	t.Helper()
	ls := f.w.leases(t)
	for _, l := range ls {
		if l.Session != "" {
			sessionRows++
		}
	}
	return heldBy(ls), sessionRows, len(ls)
}

// waitHeld waits until every row of the stream has an owner and cond
// holds of the owners.
func (f *releaseFleet) waitHeld(t *testing.T, what string, cond func(held map[string][]string, sessionRows int) bool) {
	t.Helper()
	began := time.Now()
	waitFor(t, 15*f.w.lease, what, func() bool {
		held, sessionRows, rows := f.holders(t)
		return rows > 0 && len(held[""]) == 0 && cond(held, sessionRows)
	})
	t.Logf("%6.1fs  %s (%.1f L)", time.Since(f.began).Seconds(), what, time.Since(began).Seconds()/f.w.lease.Seconds())
}

// drain stops the producer and waits until every record it wrote was
// handled.
func (f *releaseFleet) drain(t *testing.T) {
	t.Helper()
	require.NoError(t, f.prod.halt())
	waitFor(t, 15*f.w.lease, "every record produced handled", func() bool {
		return len(unhandledSeqs(f.prod.written(), f.allSpans(t))) == 0
	})
}

// judge checks what both releases handled: nothing lost, no shard handled
// by two workers at overlapping times. It logs the counts.
func (f *releaseFleet) judge(t *testing.T) []prevrelease.Span {
	t.Helper()
	spans := f.allSpans(t)
	written := f.prod.written()
	lost := unhandledSeqs(written, spans)
	overlaps := spanOverlaps(spans)
	t.Logf("produced %d, handled %d (%d distinct), duplicates %d, lost %d, overlaps %d, wall %v",
		len(written), len(spans), len(written)-len(lost), len(spans)-distinctSpans(spans), len(lost), len(overlaps),
		time.Since(f.began).Round(100*time.Millisecond))
	assert.Empty(t, lost, "records never handled")
	assert.Empty(t, overlaps, "one shard handled by two workers at once")
	return spans
}

// unhandledSeqs returns the sequence numbers written and never handled.
func unhandledSeqs(written map[string]string, spans []prevrelease.Span) []string {
	seen := make(map[string]bool, len(spans))
	for _, s := range spans {
		seen[s.Shard+"/"+s.Seq] = true
	}
	var lost []string
	for seq, shard := range written {
		if !seen[shard+"/"+seq] {
			lost = append(lost, shard+"/"+seq)
		}
	}
	slices.Sort(lost)
	return lost
}

func distinctSpans(spans []prevrelease.Span) int {
	seen := make(map[string]bool, len(spans))
	for _, s := range spans {
		seen[s.Shard+"/"+s.Seq] = true
	}
	return len(seen)
}

// spanOverlaps returns, as text, each handler call of a shard that
// began while another worker's call of the same shard had not ended.
func spanOverlaps(spans []prevrelease.Span) []string {
	type call struct {
		owner      string
		start, end time.Time
	}
	byShard := map[string][]call{}
	seen := map[string]bool{}
	for _, s := range spans {
		k := fmt.Sprint(s.Owner, s.Shard, s.Start.UnixNano())
		if !seen[k] {
			seen[k] = true
			byShard[s.Shard] = append(byShard[s.Shard], call{s.Owner, s.Start, s.End})
		}
	}
	var out []string
	for shard, calls := range byShard {
		slices.SortFunc(calls, func(a, b call) int { return a.start.Compare(b.start) })
		lastEnd := map[string]time.Time{} // owner -> latest end so far
		for _, c := range calls {
			for owner, end := range lastEnd {
				if owner != c.owner && end.After(c.start) {
					out = append(out, fmt.Sprintf("%s: %s began at %s while %s's call ran until %s",
						shard, c.owner, c.start.Format(time.StampMicro), owner, end.Format(time.StampMicro)))
				}
			}
			if c.end.After(lastEnd[c.owner]) {
				lastEnd[c.owner] = c.end
			}
		}
	}
	slices.Sort(out)
	return out
}

// firstSpanOf returns, per shard, when a worker whose name has prefix
// first handled a record of it.
func firstSpanOf(spans []prevrelease.Span, prefix string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, s := range spans {
		if strings.HasPrefix(s.Owner, prefix) {
			if t, ok := out[s.Shard]; !ok || s.Start.Before(t) {
				out[s.Shard] = s.Start
			}
		}
	}
	return out
}

// waitFlowing waits until a record of every shard was handled after the
// call: records flow again wherever the last step moved a lease.
func (f *releaseFleet) waitFlowing(t *testing.T) {
	t.Helper()
	since := time.Now()
	waitFor(t, 15*f.w.lease, "records handled from every shard", func() bool {
		shards := map[string]bool{}
		for _, shard := range f.prod.written() {
			shards[shard] = false
		}
		for _, s := range f.allSpans(t) {
			if s.Start.After(since) {
				shards[s.Shard] = true
			}
		}
		for _, ok := range shards {
			if !ok {
				return false
			}
		}
		return len(shards) > 0
	})
}

// idleSessionRows pauses the producer until every row a session keeps has
// stood still for two lease durations, as the test reads the table, while
// the previous release runs: an idle lease of a session worker is never
// written, so to a worker that judged it by its own row it would look
// expired. It requires that no such row changed hands meanwhile.
func (f *releaseFleet) idleSessionRows(t *testing.T) {
	t.Helper()
	f.prod.pause()
	defer f.prod.resume()
	type seen struct {
		owner   string
		counter int64
		since   time.Time
	}
	rows := map[string]seen{}
	began := time.Now()
	waitFor(t, 15*f.w.lease, "the rows sessions keep standing still for two lease durations", func() bool {
		still := 0
		for _, l := range f.w.leases(t) {
			k := l.Key.String()
			if l.Session == "" {
				delete(rows, k)
				continue
			}
			r, ok := rows[k]
			if !ok || r.counter != l.Counter || r.owner != l.Owner {
				if ok && r.owner != l.Owner {
					t.Errorf("%s moved from %s to %s while sessions kept it idle", k, r.owner, l.Owner)
				}
				rows[k] = seen{owner: l.Owner, counter: l.Counter, since: time.Now()}
				continue
			}
			if time.Since(r.since) >= 2*f.w.lease {
				still++
			}
		}
		return still >= 3 && still == len(rows)
	})
	t.Logf("%6.1fs  %d rows kept by sessions stood still for 2 L beside the previous release (%.1f L)",
		time.Since(f.began).Seconds(), len(rows), time.Since(began).Seconds()/f.w.lease.Seconds())
}

// oldsByLeases returns the previous release's processes, those holding
// the most leases first.
func oldsByLeases(held map[string][]string) []string {
	olds := []string{"old-0", "old-1", "old-2"}
	slices.SortStableFunc(olds, func(a, b string) int { return len(held[b]) - len(held[a]) })
	return olds
}

// heldWithPrefix counts the owners with prefix that hold at least one lease.
func heldWithPrefix(held map[string][]string, prefix string) (owners, leases int) {
	for o, shards := range held {
		if strings.HasPrefix(o, prefix) {
			owners++
			leases += len(shards)
		}
	}
	return owners, leases
}

// TestSessionUpgradeBesideThePreviousRelease: three processes of the
// previous release hold a stream of six shards while records flow; three
// workers of this release with its defaults (sessions on) join; the old processes stop
// one at a time: a graceful stop, a crash (SIGKILL), a graceful stop. No
// record is lost, no shard is handled by two workers at once, no old
// process handles a shard after a session worker did (it never takes a row
// a session keeps), and at the end a session keeps every row.
func TestSessionUpgradeBesideThePreviousRelease(t *testing.T) {
	t.Parallel()
	f := newReleaseFleet(t, 6)
	for i := range 3 {
		f.startOld(t, fmt.Sprintf("old-%d", i))
	}
	f.waitHeld(t, "the previous release holds every lease", func(held map[string][]string, _ int) bool {
		owners, leases := heldWithPrefix(held, "old-")
		return owners == 3 && leases == 6
	})
	f.waitFlowing(t)
	for i := range 3 {
		f.startNew(t, fmt.Sprintf("new-%d", i), true)
	}
	// The previous release never takes a row a session keeps, so an old
	// process that handed its leases over may stay idle: the fleet is
	// balanced as far as both releases can tell.
	var held map[string][]string
	f.waitHeld(t, "each session worker holds a lease", func(h map[string][]string, sessionRows int) bool {
		owners, leases := heldWithPrefix(h, "new-")
		_, old := heldWithPrefix(h, "old-")
		held = h
		return owners == 3 && sessionRows == leases && old >= 2
	})
	f.waitFlowing(t)
	f.idleSessionRows(t)
	order := oldsByLeases(held)
	f.stopOld(t, order[0])
	f.waitHeld(t, fmt.Sprintf("%s's %d leases taken after its graceful stop", order[0], len(held[order[0]])),
		func(h map[string][]string, _ int) bool { return len(h[order[0]]) == 0 })
	f.waitFlowing(t)
	held, _, _ = f.holders(t)
	require.NoError(t, f.olds[order[1]].Kill())
	f.waitHeld(t, fmt.Sprintf("%s's %d leases taken after its crash", order[1], len(held[order[1]])),
		func(h map[string][]string, _ int) bool { return len(h[order[1]]) == 0 })
	f.waitFlowing(t)
	f.stopOld(t, order[2])
	f.waitHeld(t, "sessions keep every lease", func(h map[string][]string, sessionRows int) bool {
		_, leases := heldWithPrefix(h, "new-")
		return leases == 6 && sessionRows == 6
	})
	f.waitFlowing(t)
	f.drain(t)
	spans := f.judge(t)
	firstNew := firstSpanOf(spans, "new-")
	for _, s := range spans {
		if first, ok := firstNew[s.Shard]; ok && strings.HasPrefix(s.Owner, "old-") && s.Start.After(first) {
			t.Errorf("%s handled %s at %s, after a session worker first did at %s: the previous release took a row a session keeps",
				s.Owner, s.Shard, s.Start.Format(time.StampMicro), first.Format(time.StampMicro))
			break
		}
	}
	sessionRows, others := f.oldComplaints(t)
	t.Logf("previous release's warnings and errors: %d about rows a session keeps, %d others %q", len(sessionRows), len(others), others)
	assert.NotEmpty(t, sessionRows, "the previous release logs the rows a session keeps as rows it cannot decode")
	// A lease handed over between session workers is a row without a
	// session until its taker claims it: wait for the fleet to settle.
	f.waitHeld(t, "two leases each, every row kept by a session", func(h map[string][]string, sessionRows int) bool {
		return sessionRows == 6 && len(h["new-0"]) == 2 && len(h["new-1"]) == 2 && len(h["new-2"]) == 2
	})
	for _, l := range f.w.leases(t) {
		assert.NotEmpty(t, l.Session, "lease %s names a session", l.Key)
		assert.True(t, strings.HasPrefix(shardlease.OwnerName(l.Owner), "new-"), "lease %s held by %s", l.Key, l.Owner)
	}
}

// TestSessionDowngradeBesideThePreviousRelease: three workers of this
// release with sessions on hold a stream of six shards while records flow;
// they roll to sessions off one at a time (a worker with sessions off
// starts, one with sessions on stops: gracefully, by a crash, gracefully)
// until no row names a session; then three processes of the previous release join and the
// workers of this release stop gracefully. No record is lost, no shard is
// handled by two workers at once, and the previous release ends up holding
// every lease.
func TestSessionDowngradeBesideThePreviousRelease(t *testing.T) {
	t.Parallel()
	f := newReleaseFleet(t, 6)
	for i := range 3 {
		f.startNew(t, fmt.Sprintf("on-%d", i), true)
	}
	f.waitHeld(t, "sessions keep every lease", func(held map[string][]string, sessionRows int) bool {
		owners, leases := heldWithPrefix(held, "on-")
		return owners == 3 && leases == 6 && sessionRows == 6
	})
	f.waitFlowing(t)
	for i := range 3 {
		f.startNew(t, fmt.Sprintf("off-%d", i), false)
		on := fmt.Sprintf("on-%d", i)
		how := "graceful stop"
		if i == 1 { // the second crashes: its session is fenced, then its leases taken
			held, _, _ := f.holders(t)
			how = fmt.Sprintf("crash holding %d leases", len(held[on]))
			f.switches[on].Crash()
		} else {
			require.NoError(t, f.news[on].stop(t))
		}
		f.waitHeld(t, on+"'s leases taken after its "+how, func(held map[string][]string, _ int) bool {
			return len(held[on]) == 0
		})
		f.waitFlowing(t)
	}
	f.waitHeld(t, "no row names a session", func(held map[string][]string, sessionRows int) bool {
		_, leases := heldWithPrefix(held, "off-")
		return leases == 6 && sessionRows == 0
	})
	for i := range 3 {
		f.startOld(t, fmt.Sprintf("old-%d", i))
	}
	f.waitHeld(t, "each process of the previous release holds a lease", func(held map[string][]string, _ int) bool {
		owners, _ := heldWithPrefix(held, "old-")
		return owners == 3
	})
	f.waitFlowing(t)
	for i := range 3 {
		off := fmt.Sprintf("off-%d", i)
		require.NoError(t, f.news[off].stop(t))
		f.waitHeld(t, off+"'s leases taken after its graceful stop", func(held map[string][]string, _ int) bool {
			return len(held[off]) == 0
		})
		f.waitFlowing(t)
	}
	f.waitHeld(t, "the previous release holds every lease", func(held map[string][]string, _ int) bool {
		_, leases := heldWithPrefix(held, "old-")
		return leases == 6
	})
	f.drain(t)
	f.judge(t)
	sessionRows, others := f.oldComplaints(t)
	t.Logf("previous release's warnings and errors: %d about rows a session keeps, %d others %q", len(sessionRows), len(others), others)
	assert.Empty(t, sessionRows, "the previous release started after every row was written without a session")
	for _, l := range f.w.leases(t) {
		assert.Empty(t, l.Session, "lease %s names no session", l.Key)
		assert.True(t, strings.HasPrefix(shardlease.OwnerName(l.Owner), "old-"), "lease %s held by %s", l.Key, l.Owner)
	}
}

// steadyProducer writes n records every interval with distinct partition
// keys until halted, and remembers each record's shard by sequence number.
type steadyProducer struct {
	kin    *kinesis.Client
	stream string
	stopc  chan struct{}
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	seqs   map[string]string // sequence number -> shard
	err    error             // the first failed write; written by the producing goroutine
	paused bool              // set by the test's goroutine
}

// pause stops writing until resume: the shards go idle.
func (p *steadyProducer) pause() { p.mu.Lock(); p.paused = true; p.mu.Unlock() }

func (p *steadyProducer) resume() { p.mu.Lock(); p.paused = false; p.mu.Unlock() }

func (p *steadyProducer) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func startSteadyProducer(kin *kinesis.Client, stream string, n int, every time.Duration) *steadyProducer {
	p := &steadyProducer{kin: kin, stream: stream, stopc: make(chan struct{}), done: make(chan struct{}), seqs: map[string]string{}}
	go p.run(n, every)
	return p
}

func (p *steadyProducer) run(n int, every time.Duration) {
	defer close(p.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
		if p.isPaused() {
			continue
		}
		entries := make([]ktypes.PutRecordsRequestEntry, n)
		for j := range entries {
			key := fmt.Sprintf("key-%d-%d", i, j)
			entries[j] = ktypes.PutRecordsRequestEntry{PartitionKey: aws.String(key), Data: []byte(key)}
		}
		out, err := p.kin.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String(p.stream), Records: entries})
		p.mu.Lock()
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("put records to %s: %w", p.stream, err)
		}
		if err == nil {
			for _, r := range out.Records {
				if r.ErrorCode == nil { // a failed entry was not written: nothing to handle
					p.seqs[aws.ToString(r.SequenceNumber)] = aws.ToString(r.ShardId)
				}
			}
		}
		p.mu.Unlock()
	}
}

// halt stops the producer and returns its first error. Halting twice is
// harmless.
func (p *steadyProducer) halt() error {
	p.once.Do(func() { close(p.stopc) })
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// written returns the records written so far, sequence number -> shard.
func (p *steadyProducer) written() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.seqs))
	for k, v := range p.seqs {
		out[k] = v
	}
	return out
}

// TestSessionUpgradeChecksSeeOverlapsAndLoss: the checks of the fleet
// tests above find two workers in one shard's handler at once and a record
// never handled, and pass a clean handover.
func TestSessionUpgradeChecksSeeOverlapsAndLoss(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1_700_000_000, int64(ms)*int64(time.Millisecond)) }
	span := func(owner, shard, seq string, from, to int) prevrelease.Span {
		return prevrelease.Span{Owner: owner, Shard: shard, Seq: seq, Start: at(from), End: at(to)}
	}
	handover := []prevrelease.Span{
		span("old-0", "s0", "1", 0, 5), span("old-0", "s0", "2", 0, 5), span("new-0", "s0", "3", 6, 9),
		span("old-0", "s1", "1", 0, 5), span("new-0", "s1", "1", 6, 9), // a record handled again after a crash
	}
	assert.Empty(t, spanOverlaps(handover))
	assert.Empty(t, unhandledSeqs(map[string]string{"1": "s0", "2": "s0", "3": "s0"}, handover))
	assert.Equal(t, 4, distinctSpans(handover))

	overlapping := append(slices.Clone(handover), span("old-1", "s0", "4", 8, 12))
	assert.Len(t, spanOverlaps(overlapping), 1, "old-1 began while new-0's call of s0 ran")
	assert.Equal(t, []string{"s1/2"}, unhandledSeqs(map[string]string{"1": "s1", "2": "s1"}, handover))
}
