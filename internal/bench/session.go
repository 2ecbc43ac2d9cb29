package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/shardleasetest"
)

// The session rows (WithSessions: one keep a renew interval keeps every
// lease a worker holds) measure what sessions promise against today's
// per-lease renewals: writes a worker makes whatever it holds, failover
// after a crash, a zone's loss and a graceful leave, reads as the fleet
// grows, and a fleet rolled from sessions off to on and back.
//
//	session-cost      dynalite: keeps a minute per worker with 1, 10, 100 idle leases
//	session-failover  in-process: a zone lost at 16 and 64 workers, one crash, one leave
//	session-reads     dynalite: read units a minute, 64 workers vs 2 over 64 shards
//	session-upgrade   in-process: 4 workers rolled to sessions and back, records flowing

// sessionSection is the section of the session rows.
const sessionSection = "sessions (WithSessions: one keep per worker)"

// sessionSteps are the steps of the session rows; "-only sessions" runs
// them all.
var sessionSteps = []string{"session-cost", "session-failover", "session-reads", "session-upgrade"}

// memoryFleet returns a fleet of no workers over a stream of shards on the
// in-process fake, its leases in store (a MemoryStore); start workers with
// startSession.
func memoryFleet(ctx context.Context, shards int, lease time.Duration) (*fleet, *shardlease.MemoryStore, error) {
	f := &fleet{fake: shardleasetest.NewKinesis(), stream: "sessions", shards: shards, lease: lease}
	_, err := f.fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(f.stream), ShardCount: aws.Int32(int32(shards))})
	return f, shardlease.NewMemoryStore(), err
}

// startSession starts one more worker of f on store, with sessions on
// unless extra turns them off; its calls fail like a dead process's once
// its switch is thrown. The timings are fleet.start's.
func (f *fleet) startSession(store shardlease.LeaseStore, dyn *dyncount.Client, extra ...shardlease.Option) error {
	sw := &crash.Switch{}
	id := fmt.Sprintf("w%03d", len(f.workers))
	opts := append([]shardlease.Option{
		shardlease.WithOwnerID(id), shardlease.WithLeaseDuration(f.lease),
		shardlease.WithShutdownTimeout(f.lease), shardlease.WithRetryBackoff(f.lease/50, f.lease/5),
		shardlease.WithSessions(true), shardlease.WithLogger(slog.New(quietWhenDown{slog.Default().Handler(), sw})),
	}, extra...)
	r, err := startConsumer(crash.Kinesis(f.fake, sw), crash.Store(store, sw), f.stream,
		func(context.Context, *shardlease.Batch) error { return nil }, opts...)
	if err != nil {
		return fmt.Errorf("start worker %s of stream %s: %w", id, f.stream, err)
	}
	f.workers = append(f.workers, &fleetWorker{run: r, sw: sw, dyn: dyn})
	return nil
}

// quietWhenDown is a worker's log handler that drops every record once its
// switch is thrown: a crashed process writes no log, and the survivors'
// lines are the ones worth reading.
type quietWhenDown struct {
	slog.Handler
	sw *crash.Switch
}

// Enabled reports false once the worker is down.
func (q quietWhenDown) Enabled(ctx context.Context, l slog.Level) bool {
	return !q.sw.Down() && q.Handler.Enabled(ctx, l)
}

// Handle drops r once the worker is down.
func (q quietWhenDown) Handle(ctx context.Context, r slog.Record) error {
	if q.sw.Down() {
		return nil
	}
	return q.Handler.Handle(ctx, r)
}

// WithAttrs keeps the handler quiet when down.
func (q quietWhenDown) WithAttrs(as []slog.Attr) slog.Handler {
	return quietWhenDown{q.Handler.WithAttrs(as), q.sw}
}

// WithGroup keeps the handler quiet when down.
func (q quietWhenDown) WithGroup(name string) slog.Handler {
	return quietWhenDown{q.Handler.WithGroup(name), q.sw}
}

// startSessions starts n workers with sessions on store and waits until they
// are balanced over f's shards (within 30 lease durations). On an error the
// fleet is stopped.
func (f *fleet) startSessions(store shardlease.LeaseStore, n int, perWorker func() *dyncount.Client) error {
	for range n {
		var dyn *dyncount.Client
		if perWorker != nil {
			dyn = perWorker()
		}
		if err := f.startSession(store, dyn); err != nil {
			f.stop()
			return err
		}
	}
	if !waitUntil(30*f.lease, f.balanced) {
		f.stop()
		return fmt.Errorf("%d workers with sessions over the %d shards of stream %s not balanced within %v", n, f.shards, f.stream, 30*f.lease)
	}
	return nil
}

// zone returns a third of f's live workers, as one zone or deploy batch
// would lose them: the coordinator and the workers the table's notes name
// deputy first, then others in order. The notes are read from store;
// deputies is how many live workers they name.
func (f *fleet) zone(ctx context.Context, store shardlease.LeaseStore) (zone []*fleetWorker, deputies int, err error) {
	ls, err := store.List(ctx, f.stream)
	if err != nil {
		return nil, 0, fmt.Errorf("list the leases of stream %s: %w", f.stream, err)
	}
	named := map[string]bool{}
	for _, l := range ls {
		if _, ok := balance.DeputyFirst(l.Note); ok {
			named[l.Owner] = true
		}
	}
	live := f.live()
	coord := f.coordinator()
	for _, w := range live {
		if named[w.run.c.OwnerID()] && w != coord {
			deputies++
		}
		if w == coord || named[w.run.c.OwnerID()] {
			zone = append(zone, w)
		}
	}
	for _, w := range live {
		if len(zone) >= len(live)/3 {
			break
		}
		if !slices.Contains(zone, w) {
			zone = append(zone, w)
		}
	}
	return zone, deputies, nil
}

// heldOf returns every lease the workers run.
func heldOf(ws []*fleetWorker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.run.c.Held()...)
	}
	return out
}

// worstOf returns the largest and the median of ds.
func worstOf(ds []time.Duration) (worst, median time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)-1], s[len(s)/2]
}
