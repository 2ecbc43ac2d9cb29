// Command soak runs the shardlease soak for as long as asked and prints the
// table of faults injected and invariants checked. It exits 1 when an
// invariant was broken.
//
//	go run ./internal/soak/cmd/soak -world emulator -duration 5m -workers 4 -shards 8 -seed 1
//	go run ./internal/soak/cmd/soak -world emulator -group -duration 2m -shards 4
//	go run ./internal/soak/cmd/soak -world fake -mixed -duration 2m -shards 4
//	go run ./internal/soak/cmd/soak -world fake -sessions -duration 40s -workers 4 -shards 4 -lease 2s
//
// The emulator world starts its own dynalite and kinesalite (Node.js and npm
// needed; installed into .emulators/ on first use). The fake world runs the
// in-process Kinesis fake and MemoryStore in real time.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/internal/soak"
	"github.com/shardlease/shardlease/shardleasetest"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		world    = flag.String("world", "emulator", "fake (in-process Kinesis and MemoryStore) or emulator (kinesalite and DynamoDB on dynalite)")
		duration = flag.Duration("duration", 5*time.Minute, "how long to inject faults and produce records; a drain follows")
		workers  = flag.Int("workers", 4, "consumers running at once")
		shards   = flag.Int("shards", 8, "shards of the stream at the start")
		seed     = flag.Uint64("seed", 1, "seed of the fault schedule")
		rate     = flag.Int("rate", 50, "records produced per second")
		keys     = flag.Int("keys", 64, "partition keys")
		faults   = flag.Float64("fault-rate", 0.03, "probability that a worker's DynamoDB or Kinesis call fails")
		lease    = flag.Duration("lease", 2*time.Second, "lease duration of the consumers")
		poison   = flag.Int("poison-every", 50, "every n-th record is one the handler always fails on (dead-lettered); -1 for none")
		events   = flag.Bool("events", true, "print each crash, pause and reshard as it happens")
		verbose  = flag.Bool("v", false, "print the library's logs (info and up)")
		group    = flag.Bool("group", false, "run each worker as one Group over three streams from a polled source; a fourth is added and one removed while it runs")
		mixed    = flag.Bool("mixed", false, "run Consumers and Groups with different stream sets on one lease table (three streams); the sets change while it runs, and a restarted worker may come back as another kind; needs -workers 4 or more")
		sessions = flag.Bool("sessions", false, "run every worker WithSessions(true) (one keep a renew interval keeps all its leases) and add zone losses, takers crashing between a fence and their claims, and same-id restarts to the faults")
		interval = flag.Duration("source-interval", 2*time.Second, "with -group or -mixed: how often the workers poll the stream sources")
		fanOut   = flag.String("fanout", "", "read with enhanced fan-out through the stream consumer of this name instead of polling; the emulator world then runs kinesis-local behind the fan-out shim instead of kinesalite")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg := soak.Config{
		Seed: *seed, Workers: *workers, Shards: *shards, Duration: *duration,
		Rate: *rate, Keys: *keys, FaultRate: *faults, Lease: *lease, PoisonEvery: *poison,
		Stream: emulator.UniqueName("soak"), Table: emulator.UniqueName("soak-leases"), FanOut: *fanOut,
		Group: *group, Mixed: *mixed, SourceInterval: *interval, Sessions: *sessions,
	}
	if *events {
		cfg.Events = os.Stdout
	}
	if *verbose {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	closeWorld, err := startWorld(ctx, *world, *fanOut, &cfg)
	defer closeWorld()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Print("\n" + res.Table())
	if !res.OK() {
		return 1
	}
	return 0
}

// startWorld sets cfg's Kinesis (and DynamoDB) for world, starting the
// emulators it needs; the function it returns stops them.
func startWorld(ctx context.Context, world, fanOut string, cfg *soak.Config) (func(), error) {
	var closers []io.Closer
	stop := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closeServer(closers[i])
		}
	}
	switch world {
	case "fake":
		cfg.Kinesis = shardleasetest.NewKinesis()
		return stop, nil
	case "emulator":
	default:
		return stop, fmt.Errorf("soak: -world %q: use fake or emulator", world)
	}
	start := emulator.StartKinesalite
	if fanOut != "" {
		fmt.Println("starting dynalite and kinesis-local (behind the fan-out shim)")
		start = emulator.StartKinesisLocal
	} else {
		fmt.Println("starting dynalite and kinesalite")
	}
	db, err := emulator.StartDynalite(ctx)
	if err != nil {
		return stop, err
	}
	closers = append(closers, db)
	ks, err := start(ctx)
	if err != nil {
		return stop, err
	}
	closers = append(closers, ks)
	cfg.Dynamo = emulator.NewDynamoClient(db.Endpoint)
	cfg.Kinesis = emulator.NewKinesisClient(ks.Endpoint)
	if fanOut != "" {
		shim, err := emulator.StartFanOutShim(ks.Endpoint)
		if err != nil {
			return stop, err
		}
		closers = append(closers, closerFunc(func() error { shim.Close(); return nil }))
		cfg.Kinesis = shim.Client()
	}
	return stop, nil
}

// closerFunc is a func as an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func closeServer(s io.Closer) {
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
