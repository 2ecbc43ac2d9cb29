// Quickstart runs several workers of one service in one process, sharing the
// shards of a Kinesis stream through one lease store, and shows the shards
// moving between them. It needs no AWS account and no emulator: the stream is
// an in-process fake and the lease store is a shardlease.MemoryStore.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -workers 4 -shards 16 -rate 500 -duration 20s
//
// In a service, each worker is a process of its own, and the wiring is
//
//	store, err := shardlease.NewDynamoStore(dynamodb.NewFromConfig(cfg), "orders-leases")
//	consumer, err := shardlease.NewConsumer(kinesis.NewFromConfig(cfg), store, "orders", handle)
//	err = consumer.Run(ctx)
//
// What the program does, on a clock that starts at t=0 when the workers
// start:
//
//   - A producer puts -rate records a second into the stream, each carrying a
//     unique id.
//   - The workers share the shards' leases out among themselves: each shard
//     is read by one worker at a time, which checkpoints its progress in the
//     lease store.
//   - At a third of -duration, the worker holding the most shards is stopped
//     gracefully, by cancelling the context its Run was given. It finishes
//     the batch in hand, writes its checkpoints and releases its leases; the
//     others take them over and resume after the checkpoints.
//   - One record (number -poison) carries a payload the handler cannot
//     parse. The handler fails on it; after 3 attempts the library narrows
//     its batch down to that record, hands it to the dead-letter callback,
//     and moves on: the records around it are handled once.
//   - A second before the end of -duration, the producer stops. The remaining
//     workers read what is left; then they are stopped too.
//   - The summary counts the records produced, handled, dead-lettered,
//     handled twice and never handled (lost). The program exits with status
//     0 only when none was lost.
//
// Every two seconds it prints which worker holds which shard and how far each
// shard has been read.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// Lease timings, much shorter than the library's defaults (a 10s lease) so
// that shards move within a second or two.
const (
	leaseDuration      = 3 * time.Second        // a silent holder loses its lease after this
	renewInterval      = leaseDuration / 3      // each held lease is renewed this often
	takeInterval       = 500 * time.Millisecond // workers look for leases to take this often
	checkpointInterval = 250 * time.Millisecond // progress is written to the lease store this often
	idlePoll           = 100 * time.Millisecond // a reader at the tip of a shard polls this often
	shutdownTimeout    = 5 * time.Second        // bound on finishing batches and releasing at stop
)

const (
	streamName = "quickstart"
	// tableEvery is how often the table of shards is printed.
	tableEvery = 2 * time.Second
	// drainTimeout bounds the wait for the last records once producing stops.
	drainTimeout = 15 * time.Second
	// maxAttempts is how often a failing batch is handed to the handler
	// before its failing records go to the dead-letter callback.
	maxAttempts = 3
	// poisonSuffix marks the payload the handler cannot parse.
	poisonSuffix = " (garbled)"
)

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// settings are the command line's values.
type settings struct {
	duration time.Duration
	workers  int
	shards   int
	rate     int
	poison   int
	log      bool
}

func parseFlags(args []string, out io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&s.duration, "duration", 12*time.Second, "how long the demo runs, give or take the final drain")
	fs.IntVar(&s.workers, "workers", 3, "number of workers (consumers) sharing the stream, at least 2")
	fs.IntVar(&s.shards, "shards", 8, "number of shards of the stream")
	fs.IntVar(&s.rate, "rate", 200, "records produced per second")
	fs.IntVar(&s.poison, "poison", 42, "number of the record written with a payload the handler cannot parse; 0 for none")
	fs.BoolVar(&s.log, "log", false, "also print the library's own log (leases taken, handed over, released)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	bad := func(format string, args ...any) (settings, error) {
		err := fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
		fmt.Fprintln(out, err)
		return s, err
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case s.duration < time.Second:
		return bad("-duration %v: use at least 1s", s.duration)
	case s.workers < 2:
		return bad("-workers %d: use at least 2, so that one can take over from another", s.workers)
	case s.shards < 1 || s.shards > 1000:
		return bad("-shards %d: use 1 to 1000", s.shards)
	case s.rate < 1:
		return bad("-rate %d: use at least 1 record per second", s.rate)
	case s.poison < 0:
		return bad("-poison %d: use a record number, or 0 for none", s.poison)
	}
	return s, nil
}

// worker is one Consumer and its running Run.
type worker struct {
	name     string
	consumer *shardlease.Consumer
	cancel   context.CancelFunc // stops Run gracefully
	stopped  bool               // cancel was called
	done     chan struct{}      // closed when Run has returned
	err      error              // what Run returned; read after done
}

func (w *worker) start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		w.err = w.consumer.Run(ctx)
	}()
}

// stop cancels Run's context and waits for Run to return: the worker has
// then written its last checkpoints and released its leases.
func (w *worker) stop() error {
	w.stopped = true
	w.cancel()
	<-w.done
	return w.err
}

// failed returns the error of a Run that returned although nobody stopped it.
func (w *worker) failed() error {
	select {
	case <-w.done:
		if !w.stopped {
			return fmt.Errorf("%s stopped by itself: %v", w.name, w.err)
		}
	default:
	}
	return nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	s, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	out := &lockedWriter{w: stdout} // shared with the library's log (-log)
	stopAt := s.duration / 3
	// Producing stops a second before the end (earlier in short runs), which
	// leaves the workers the time to read the rest.
	produceUntil := s.duration - min(s.duration/4, time.Second)

	// The stream. A service passes kinesis.NewFromConfig(cfg) to NewConsumer
	// instead.
	stream := shardleasetest.NewKinesis()
	_, err = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(streamName), ShardCount: aws.Int32(int32(s.shards))})
	if err != nil {
		return err
	}
	// The lease store that all workers share. A service uses a DynamoStore.
	store := shardlease.NewMemoryStore()
	tally := newTally(out)

	fmt.Fprintf(out, "%d workers share stream %q of %d shards; %d records/s are produced for %v.\n",
		s.workers, streamName, s.shards, s.rate, produceUntil)
	fmt.Fprintf(out, "lease %v, renew every %v, take interval %v, checkpoint interval %v, idle poll %v\n",
		leaseDuration, renewInterval, takeInterval, checkpointInterval, idlePoll)
	fmt.Fprintf(out, "Every %v: each shard's holder; records produced into it and handled from it; and the\n"+
		"checkpoint in the lease store, as a record number: a new holder resumes after that record.\n", tableEvery)

	workers := make([]*worker, s.workers)
	for i := range workers {
		name := fmt.Sprintf("worker-%d", i+1)
		opts := []shardlease.Option{
			shardlease.WithOwnerID(name), // unique per worker; the default is host name plus a random suffix
			shardlease.WithLeaseDuration(leaseDuration),
			shardlease.WithRenewInterval(renewInterval),
			shardlease.WithTakeInterval(takeInterval),
			shardlease.WithCheckpointInterval(checkpointInterval),
			shardlease.WithIdlePollInterval(idlePoll),
			shardlease.WithShutdownTimeout(shutdownTimeout),
			// A record the handler fails on maxAttempts times goes to the
			// dead-letter callback; the default is to retry without a limit.
			shardlease.WithMaxAttempts(maxAttempts),
			shardlease.WithDeadLetter(tally.deadLetter),
		}
		if s.log {
			opts = append(opts, shardlease.WithLogger(slog.New(slog.NewTextHandler(out, nil))))
		} else {
			// The consumer logs to slog.Default() otherwise; the quickstart
			// prints its own summary instead.
			opts = append(opts, shardlease.WithLogger(slog.New(slog.DiscardHandler)))
		}
		c, err := shardlease.NewConsumer(stream, store, streamName, tally.handle, opts...)
		if err != nil {
			return err
		}
		workers[i] = &worker{name: name, consumer: c}
	}

	start := time.Now()
	for _, w := range workers {
		w.start(ctx)
	}
	// stopAll stops the workers still running and waits for them.
	stopAll := func() error {
		var errs []error
		for _, w := range workers {
			if !w.stopped {
				w.cancel()
				w.stopped = true
			}
		}
		for _, w := range workers {
			<-w.done
			if w.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w.name, w.err))
			}
		}
		return errors.Join(errs...)
	}

	produceCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	producer := make(chan error, 1) // receives what produce returned; nil once received
	go func() { producer <- produce(produceCtx, stream, s.rate, s.poison, tally) }()
	// halt stops the producer and every worker, and waits for all of them.
	halt := func() error {
		stopProducing()
		if producer != nil {
			<-producer
			producer = nil
		}
		return stopAll()
	}

	var (
		tick      = time.NewTicker(100 * time.Millisecond)
		nextTable = tableEvery
		stopped   *worker         // the worker stopped partway
		moving    map[string]bool // its shards that no other worker has taken yet
		producing = true
	)
	defer tick.Stop()
	// event prints one line about what just happened, stamped with the time
	// since the start; table prints the table of shards.
	afterTable := false
	event := func(format string, args ...any) {
		if afterTable {
			fmt.Fprintln(out)
			afterTable = false
		}
		fmt.Fprintf(out, "t=%.1fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	table := func() {
		printTable(out, fmt.Sprintf("t=%.1fs", time.Since(start).Seconds()), workers, store, tally)
		afterTable = true
	}
	interrupted := func() error {
		event("interrupted: stopping every worker")
		err := halt()
		table()
		tally.summary(out, workers, time.Since(start), false)
		return errors.Join(errors.New("interrupted"), err)
	}
	for {
		select {
		case <-ctx.Done():
			return interrupted()
		case err := <-producer:
			producer = nil
			if err != nil && ctx.Err() == nil {
				_ = halt()
				return fmt.Errorf("producing: %w", err)
			}
		case <-tick.C:
		}
		if ctx.Err() != nil {
			// The producer or a worker saw the interrupt before this loop did.
			return interrupted()
		}
		now := time.Since(start)
		for _, w := range workers {
			if err := w.failed(); err != nil {
				_ = halt()
				return err
			}
		}

		// Stop the busiest worker partway, the way a deployment stops an
		// instance: cancel its Run context and wait for Run to return.
		if stopped == nil && now >= stopAt {
			if w := busiest(workers); w != nil {
				held := w.consumer.Held()
				released := w.consumer.Stats().LeasesReleased
				event("stopping %s (cancelling its Run context); it holds %s", w.name, strings.Join(held, " "))
				if err := w.stop(); err != nil {
					_ = halt()
					return fmt.Errorf("%s: %w", w.name, err)
				}
				// Run has returned: the worker wrote its last checkpoints and
				// released its leases, so the others may take them at once.
				event("%s stopped: Run returned after releasing %d leases", w.name, w.consumer.Stats().LeasesReleased-released)
				stopped, moving = w, make(map[string]bool)
				for _, shard := range held {
					moving[shard] = true
				}
			}
		}
		// Report each of the stopped worker's shards once another worker
		// holds it. It resumes right after the checkpoint the stopped worker
		// wrote on its way out.
		if len(moving) > 0 {
			leases, err := store.List(ctx, streamName)
			if err == nil {
				for _, l := range leases {
					if !moving[l.Key.Shard] {
						continue
					}
					if to := holders(workers, l.Key.Shard); len(to) > 0 {
						delete(moving, l.Key.Shard)
						event("%s moved %s -> %s, resuming after record %s", l.Key.Shard, stopped.name, strings.Join(to, "+"), tally.position(l))
					}
				}
			}
		}

		if producing && now >= produceUntil {
			stopProducing()
			producing = false
			event("producing stopped after %d records; waiting for the rest to be handled", tally.producedCount())
		}
		if !producing && producer == nil && tally.allHandled() {
			event("every record produced was handled; stopping the other workers")
			break
		}
		if !producing && now >= produceUntil+drainTimeout {
			event("gave up waiting after %v; stopping the other workers", drainTimeout)
			break
		}
		if now >= nextTable {
			table()
			nextTable += tableEvery
		}
	}
	err = halt()
	// The final table: every lease is released (no holder), and every
	// checkpoint is at the last record of its shard.
	table()
	lost := tally.summary(out, workers, time.Since(start), true)
	if err != nil {
		return err
	}
	if lost > 0 {
		return fmt.Errorf("%d records lost", lost)
	}
	return nil
}

// busiest returns the running worker holding the most shards, or nil while
// no running worker holds any.
func busiest(workers []*worker) *worker {
	var best *worker
	most := 0
	for _, w := range workers {
		if n := len(w.consumer.Held()); !w.stopped && n > most {
			best, most = w, n
		}
	}
	return best
}

// holders returns the names of the running workers that hold shard: one,
// or none while the lease is free or being handed over. For a moment during
// a handover the old holder may still be listed next to the new one.
func holders(workers []*worker, shard string) []string {
	var names []string
	for _, w := range workers {
		if w.stopped {
			continue
		}
		for _, id := range w.consumer.Held() {
			if id == shard {
				names = append(names, w.name)
			}
		}
	}
	return names
}

// produce puts rate records a second until ctx is done. Each record's data
// and partition key is a unique id; the partition key's hash picks the shard.
// Record number poison carries a payload the handler cannot parse.
func produce(ctx context.Context, stream *shardleasetest.Kinesis, rate, poison int, tally *tally) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * float64(rate))
		for sent < due {
			n := min(due-sent, shardleasetest.MaxPutRecordsEntries)
			ids := make([]string, n)
			entries := make([]types.PutRecordsRequestEntry, n)
			for i := range entries {
				ids[i] = fmt.Sprintf("rec-%06d", sent+i+1)
				data := ids[i]
				if sent+i+1 == poison {
					data += poisonSuffix
				}
				entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(ids[i]), Data: []byte(data)}
			}
			res, err := stream.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(streamName), Records: entries})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			for i, e := range res.Records {
				// An entry with an ErrorCode was not written (a real
				// producer retries it); it does not count as produced.
				if e.ErrorCode == nil {
					tally.put(ids[i], aws.ToString(e.ShardId), aws.ToString(e.SequenceNumber))
				}
			}
			sent += n
		}
	}
}

// tally counts what was produced and what the handlers saw.
type tally struct {
	out      io.Writer
	mu       sync.Mutex
	dead     map[string]bool // ids of the records handed to the dead-letter callback
	produced map[string]int  // records put, by shard
	ordinal  map[string]int  // position of a record in its shard (1, 2, ...), by sequence number
	putIDs   map[string]bool // ids of the records put
	seen     map[string]int  // times each record id was handled
	handled  map[string]int  // records handled, by shard, duplicates included
}

func newTally(out io.Writer) *tally {
	return &tally{
		out: out, dead: make(map[string]bool),
		produced: make(map[string]int), ordinal: make(map[string]int),
		putIDs: make(map[string]bool), seen: make(map[string]int), handled: make(map[string]int),
	}
}

func (t *tally) put(id, shard, seq string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.produced[shard]++
	t.ordinal[seq] = t.produced[shard]
	t.putIDs[id] = true
}

// handle is every worker's Handler. Returning nil marks the batch processed:
// the library checkpoints its last record. A real handler does its work here
// and returns an error to have the batch retried: this one fails on a
// payload it cannot parse.
func (t *tally) handle(ctx context.Context, batch *shardlease.Batch) error {
	for _, r := range batch.Records {
		if strings.HasSuffix(string(r.Data), poisonSuffix) {
			return fmt.Errorf("record %s: cannot parse %q", r.SequenceNumber, r.Data)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range batch.Records {
		t.seen[string(r.Data)]++
		t.handled[batch.ShardID]++
	}
	return nil
}

// deadLetter is every worker's dead-letter callback: it receives the records
// the handler failed on every attempt. A service stores them to look at later
// (a queue, a table); returning nil lets the checkpoint move past them.
func (t *tally) deadLetter(ctx context.Context, shard string, records []shardlease.Record, err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range records {
		id := strings.TrimSuffix(string(r.Data), poisonSuffix)
		t.dead[id] = true
		fmt.Fprintf(t.out, "dead-letter callback: %s of %s, after %d attempts: %v\n", id, shard, maxAttempts, err)
	}
	return nil
}

func (t *tally) producedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.putIDs)
}

// allHandled reports whether every record produced so far was handled.
func (t *tally) allHandled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.putIDs {
		if t.seen[id] == 0 && !t.dead[id] {
			return false
		}
	}
	return true
}

// position turns a lease's checkpoint into the position of the checkpointed
// record in its shard: "0" before any checkpoint.
func (t *tally) position(l shardlease.Lease) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case l.Checkpoint == "":
		return "0"
	case l.Checkpoint == shardlease.ShardEnd:
		return "end"
	}
	if n, ok := t.ordinal[l.Checkpoint]; ok {
		return fmt.Sprint(n)
	}
	return "?"
}

// printTable prints one line per shard:
//
//	holder      the worker reading the shard now (from Consumer.Held)
//	produced    records put into the shard so far
//	handled     records of the shard the handlers returned nil for
//	checkpoint  the position of the record the lease store's checkpoint
//	            names (from LeaseStore.List): a worker taking the shard
//	            over resumes after it. It trails "handled" by up to a
//	            checkpoint interval.
//	note        a handover in progress, or a lease nobody holds
func printTable(out io.Writer, now string, workers []*worker, store *shardlease.MemoryStore, t *tally) {
	leases, err := store.List(context.Background(), streamName)
	if err != nil {
		fmt.Fprintf(out, "%s  listing leases: %v\n", now, err)
		return
	}
	fmt.Fprintf(out, "\n%s\n", now)
	for _, w := range workers {
		state := "running"
		if w.stopped {
			state = "stopped"
		}
		fmt.Fprintf(out, "  %-9s %-8s %2d shards  %6d records handled\n", w.name, state, len(w.consumer.Held()), w.consumer.Stats().RecordsHandled)
	}
	fmt.Fprintf(out, "  %-20s  %-9s  %8s  %8s  %10s  %s\n", "shard", "holder", "produced", "handled", "checkpoint", "note")
	for _, l := range leases {
		holder := strings.Join(holders(workers, l.Key.Shard), "+")
		note := ""
		switch {
		case l.HandoffTo != "":
			note = "being handed to " + l.HandoffTo
		case holder == "" && l.Owner == "":
			holder, note = "-", "free"
		case holder == "":
			holder, note = "-", "passing to "+l.Owner
		}
		t.mu.Lock()
		produced, handled := t.produced[l.Key.Shard], t.handled[l.Key.Shard]
		t.mu.Unlock()
		line := fmt.Sprintf("  %-20s  %-9s  %8d  %8d  %10s  %s", l.Key.Shard, holder, produced, handled, t.position(l), note)
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
}

// summary prints the final counts and returns how many records were lost.
// A record is lost when it was produced and never handled. When the run was
// interrupted (complete is false), unhandled records are still in the stream
// and are reported as such.
func (t *tally) summary(out io.Writer, workers []*worker, took time.Duration, complete bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	distinct, duplicates, lost := 0, 0, 0
	for id := range t.putIDs {
		n := t.seen[id]
		if n == 0 {
			if !t.dead[id] {
				lost++
			}
			continue
		}
		distinct++
		duplicates += n - 1
	}
	fmt.Fprintf(out, "\nsummary after %.1fs\n", took.Seconds())
	fmt.Fprintf(out, "  produced    %6d records, each with a unique id\n", len(t.putIDs))
	fmt.Fprintf(out, "  handled     %6d distinct records\n", distinct)
	fmt.Fprintf(out, "  dead-letter %6d (failed every attempt; handed to the dead-letter callback)\n", len(t.dead))
	fmt.Fprintf(out, "  duplicates  %6d (handled more than once)\n", duplicates)
	if complete {
		fmt.Fprintf(out, "  lost        %6d (produced, neither handled nor dead-lettered)\n", lost)
	} else {
		fmt.Fprintf(out, "  unhandled   %6d (interrupted: they are still in the stream)\n", lost)
	}
	for _, w := range workers {
		st := w.consumer.Stats()
		fmt.Fprintf(out, "  %-9s   %6d records handled; leases taken %d, handed in %d, released %d, lost %d\n",
			w.name, st.RecordsHandled, st.LeasesTaken, st.LeasesHandedIn, st.LeasesReleased, st.LeasesLost)
	}
	return lost
}

// lockedWriter serializes writes from the program and the library's logger.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
