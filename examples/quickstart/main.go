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
// shard has been read. In between it prints a line for each shard that moves
// from one worker to another, with the cause (its holder stopped, or handed it
// over to even out the load) and the record its new holder resumes after, and
// a line for the record sent to the dead-letter callback. Records are named by
// number: record 42 is the 42nd produced in the run; in the tables, a record's
// number is its place in its shard.
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
	"strconv"
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
	d, err := newDemo(ctx, s, &lockedWriter{w: stdout}) // the writer is shared with the library's log (-log)
	if err != nil {
		return err
	}
	return d.run(ctx)
}

// demo is one run of the program: the stream, the store, the workers and
// what the main loop knows of them. Only the goroutine that calls run uses
// its fields; the workers, the producer and the tally have their own.
type demo struct {
	s            settings
	out          io.Writer
	stream       *shardleasetest.Kinesis
	store        *shardlease.MemoryStore
	tally        *tally
	workers      []*worker
	moves        *moveWatch
	stopAt       time.Duration // when the busiest worker is stopped
	produceUntil time.Duration // when the producer stops

	start         time.Time
	producer      chan error // receives what produce returned; nil once received
	stopProducing context.CancelFunc
	producing     bool
	stopped       *worker // the worker stopped partway
	nextTable     time.Duration
	afterTable    bool // the last thing printed was a table
}

// newDemo makes the stream, the store and the workers, and prints what the
// run will do.
func newDemo(ctx context.Context, s settings, out io.Writer) (*demo, error) {
	d := &demo{
		s: s, out: out, stopAt: s.duration / 3,
		// Producing stops a second before the end (earlier in short runs),
		// which leaves the workers the time to read the rest.
		produceUntil: s.duration - min(s.duration/4, time.Second),
		// The stream. A service passes kinesis.NewFromConfig(cfg) to
		// NewConsumer instead.
		stream: shardleasetest.NewKinesis(),
		// The lease store that all workers share. A service uses a DynamoStore.
		store: shardlease.NewMemoryStore(),
		tally: newTally(),
		moves: newMoveWatch(),
	}
	_, err := d.stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(streamName), ShardCount: aws.Int32(int32(s.shards))})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "%d workers share stream %q of %d shards; %d records/s are produced for %v.\n",
		s.workers, streamName, s.shards, s.rate, d.produceUntil)
	fmt.Fprintf(out, "lease %v, renew every %v, take interval %v, checkpoint interval %v, idle poll %v\n",
		leaseDuration, renewInterval, takeInterval, checkpointInterval, idlePoll)
	fmt.Fprintf(out, "Every %v: each shard's holder; records produced into it and handled from it; and the\n"+
		"checkpoint in the lease store, as a record number: a new holder resumes after that record.\n"+
		"Records are numbered in the order they were produced (record 42 of the run) and, in the\n"+
		"tables, by their place in their shard (record 5 of the shard).\n", tableEvery)
	for i := range s.workers {
		w, err := newWorker(fmt.Sprintf("worker-%d", i+1), s, d.stream, d.store, d.tally, out)
		if err != nil {
			return nil, err
		}
		d.workers = append(d.workers, w)
	}
	return d, nil
}

// newWorker makes one worker's Consumer, with the quickstart's short timings.
func newWorker(name string, s settings, stream *shardleasetest.Kinesis, store *shardlease.MemoryStore, t *tally, out io.Writer) (*worker, error) {
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
		shardlease.WithDeadLetter(t.deadLetter),
	}
	if s.log {
		opts = append(opts, shardlease.WithLogger(slog.New(slog.NewTextHandler(out, nil))))
	} else {
		// The consumer logs to slog.Default() otherwise; the quickstart
		// prints its own summary instead.
		opts = append(opts, shardlease.WithLogger(slog.New(slog.DiscardHandler)))
	}
	c, err := shardlease.NewConsumer(stream, store, streamName, t.handle, opts...)
	if err != nil {
		return nil, err
	}
	return &worker{name: name, consumer: c}, nil
}

// run starts the workers and the producer, and watches them every 100ms
// until every record produced was handled, the drain gives up, or ctx ends.
func (d *demo) run(ctx context.Context) error {
	d.start = time.Now()
	d.tally.start = d.start
	for _, w := range d.workers {
		w.start(ctx)
	}
	produceCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	d.stopProducing, d.producing, d.nextTable = stopProducing, true, tableEvery
	d.producer = make(chan error, 1)
	go func() { d.producer <- produce(produceCtx, d.stream, d.s.rate, d.s.poison, d.tally) }()

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return d.interrupted()
		case err := <-d.producer:
			d.producer = nil
			if err != nil && ctx.Err() == nil {
				_ = d.halt()
				return fmt.Errorf("producing: %w", err)
			}
		case <-tick.C:
		}
		if ctx.Err() != nil {
			// The producer or a worker saw the interrupt before this loop did.
			return d.interrupted()
		}
		done, err := d.step(ctx, time.Since(d.start))
		if err != nil {
			_ = d.halt()
			return err
		}
		if done {
			break
		}
	}
	err := d.halt()
	// The final table: every lease is released (no holder), and every
	// checkpoint is at the last record of its shard.
	d.table()
	lost := d.tally.summary(d.out, d.workers, time.Since(d.start), true)
	if err != nil {
		return err
	}
	if lost > 0 {
		return fmt.Errorf("%d records lost", lost)
	}
	return nil
}

// step does what is due now, time since the start: stop a worker partway,
// announce dead letters and moves, stop producing, print a table. It
// reports whether the run is over.
func (d *demo) step(ctx context.Context, now time.Duration) (bool, error) {
	for _, w := range d.workers {
		if err := w.failed(); err != nil {
			return true, err
		}
	}
	if d.stopped == nil && now >= d.stopAt {
		if err := d.stopBusiest(); err != nil {
			return true, err
		}
	}
	for _, note := range d.tally.takeNotes() {
		d.event("%s", note)
	}
	held := heldBy(d.workers)
	if leases, err := d.store.List(ctx, streamName); err == nil {
		for _, move := range d.moves.observe(d.workers, held, leases, d.tally.position) {
			d.event("%s", move)
		}
	}
	if d.producing && now >= d.produceUntil {
		d.stopProducing()
		d.producing = false
		d.event("producing stopped after %d records; waiting for the rest to be handled", d.tally.producedCount())
	}
	if !d.producing && d.producer == nil && d.tally.allHandled() {
		d.event("every record produced was handled; stopping the other workers")
		return true, nil
	}
	if !d.producing && now >= d.produceUntil+drainTimeout {
		d.event("gave up waiting after %v; stopping the other workers", drainTimeout)
		return true, nil
	}
	if now >= d.nextTable {
		d.printTable(held)
		d.nextTable += tableEvery
	}
	return false, nil
}

// stopBusiest stops the worker holding the most shards, the way a
// deployment stops an instance: it cancels its Run context and waits for Run
// to return.
func (d *demo) stopBusiest() error {
	w := busiest(d.workers)
	if w == nil {
		return nil
	}
	released := w.consumer.Stats().LeasesReleased
	d.event("stopping %s (cancelling its Run context); it holds %s", w.name, strings.Join(w.consumer.Held(), " "))
	if err := w.stop(); err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	// Run has returned: the worker wrote its last checkpoints and released
	// its leases, so the others may take them at once.
	d.event("%s stopped: Run returned after releasing %d leases", w.name, w.consumer.Stats().LeasesReleased-released)
	d.stopped = w
	return nil
}

// halt stops the producer and every worker, and waits for all of them.
func (d *demo) halt() error {
	d.stopProducing()
	if d.producer != nil {
		<-d.producer
		d.producer = nil
	}
	var errs []error
	for _, w := range d.workers {
		if !w.stopped {
			w.cancel()
			w.stopped = true
		}
	}
	for _, w := range d.workers {
		<-w.done
		if w.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.name, w.err))
		}
	}
	return errors.Join(errs...)
}

// interrupted stops everything after Ctrl-C and prints the counts so far.
func (d *demo) interrupted() error {
	d.event("interrupted: stopping every worker")
	err := d.halt()
	d.table()
	d.tally.summary(d.out, d.workers, time.Since(d.start), false)
	return errors.Join(errors.New("interrupted"), err)
}

// event prints one line about what just happened, stamped with the time
// since the start.
func (d *demo) event(format string, args ...any) {
	if d.afterTable {
		fmt.Fprintln(d.out)
		d.afterTable = false
	}
	fmt.Fprintf(d.out, "t=%.1fs  "+format+"\n", append([]any{time.Since(d.start).Seconds()}, args...)...)
}

// table prints the table of shards as the workers hold them now.
func (d *demo) table() { d.printTable(heldBy(d.workers)) }

func (d *demo) printTable(held map[string][]string) {
	printTable(d.out, fmt.Sprintf("t=%.1fs", time.Since(d.start).Seconds()), d.workers, held, d.store, d.tally)
	d.afterTable = true
}

// moveWatch announces every change of a shard's holder: each shard of a
// stopped worker, and each lease one running worker hands another.
type moveWatch struct {
	last map[string]string // shard → the worker last seen holding it alone
	lost map[string]int64  // worker → its LeasesLost when last looked
}

func newMoveWatch() *moveWatch {
	return &moveWatch{last: make(map[string]string), lost: make(map[string]int64)}
}

// observe compares who holds each shard now (held, from heldBy) with who
// held it when last seen, and returns a line for each shard that moved.
// A shard held by no running worker, or by two for a moment during a
// handover, has not moved yet. position names a lease's checkpoint.
func (m *moveWatch) observe(workers []*worker, held map[string][]string, leases []shardlease.Lease, position func(shardlease.Lease) string) []string {
	byName := make(map[string]*worker, len(workers))
	lostNow := make(map[string]bool, len(workers))
	for _, w := range workers {
		byName[w.name] = w
		n := w.consumer.Stats().LeasesLost
		lostNow[w.name] = n > m.lost[w.name]
		m.lost[w.name] = n
	}
	var lines []string
	for _, l := range leases {
		shard := l.Key.Shard
		h := held[shard]
		if len(h) != 1 {
			continue
		}
		from, to := m.last[shard], h[0]
		m.last[shard] = to
		if from == "" || from == to {
			continue
		}
		var why string
		switch {
		case byName[from] != nil && byName[from].stopped:
			why = from + " stopped"
		case lostNow[from]:
			why = from + " lost its lease"
		default:
			why = from + " handed it over to even out the load"
		}
		lines = append(lines, fmt.Sprintf("%s moved from %s to %s (%s); %s resumes after record %s",
			shard, from, to, why, to, position(l)))
	}
	return lines
}

// heldBy returns the names of the running workers holding each shard: one,
// or two for a moment during a handover, when the old holder may still be
// listed next to the new one. A shard nobody holds is absent.
func heldBy(workers []*worker) map[string][]string {
	held := make(map[string][]string)
	for _, w := range workers {
		if w.stopped {
			continue
		}
		for _, shard := range w.consumer.Held() {
			held[shard] = append(held[shard], w.name)
		}
	}
	return held
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
	start    time.Time // when the workers started; set before they do
	mu       sync.Mutex
	notes    []string        // lines for the main loop to print (dead letters)
	dead     map[string]bool // ids of the records handed to the dead-letter callback
	produced map[string]int  // records put, by shard
	ordinal  map[string]int  // position of a record in its shard (1, 2, ...), by sequence number
	putIDs   map[string]bool // ids of the records put
	seen     map[string]int  // times each record id was handled
	handled  map[string]int  // records handled, by shard, duplicates included
}

func newTally() *tally {
	return &tally{
		dead:     make(map[string]bool),
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
			return fmt.Errorf("record %d: cannot parse %q", recordNumber(string(r.Data)), r.Data)
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
		inShard := "?"
		if n, ok := t.ordinal[r.SequenceNumber]; ok {
			inShard = strconv.Itoa(n)
		}
		t.notes = append(t.notes, fmt.Sprintf("record %d (record %s of %s) went to the dead-letter callback after %d failed attempts: %v",
			recordNumber(id), inShard, shard, maxAttempts, err))
	}
	return nil
}

// takeNotes returns the lines noted since it was last called.
func (t *tally) takeNotes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	notes := t.notes
	t.notes = nil
	return notes
}

// recordNumber is the number in the run of the record with payload data
// ("rec-000042" is record 42), or 0 for a payload that names none.
func recordNumber(data string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(data, poisonSuffix), "rec-"))
	return n
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
func printTable(out io.Writer, now string, workers []*worker, held map[string][]string, store *shardlease.MemoryStore, t *tally) {
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
		holder := strings.Join(held[l.Key.Shard], "+")
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
		fmt.Fprintf(out, "  %-9s   %6d records handled; leases: %d taken free or expired, %d handed over by their holder, %d released, %d lost\n",
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
