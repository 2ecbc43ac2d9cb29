// Command bench measures shardlease against the targets of its performance
// work and prints one table: each row a figure measured in this run, the
// target it is held to, and whether it meets it. Comparisons are ratios of
// two things measured side by side in the same run.
//
//	go run ./internal/bench                     # full sizes
//	go run ./internal/bench -quick              # smaller sizes; about 7 minutes on 2 cores
//	go run ./internal/bench -only fleet-large   # the 1,000-shard, 100-worker fleet row alone
//	go run ./internal/bench -only sessions      # the session rows (session-cost, -failover, -reads, -upgrade)
//	go run ./internal/bench -json out.json
//	go run ./internal/bench -quick -only cost -charts docs/img   # the cost rows, and their charts as SVG
//
// It starts its own dynalite and kinesalite (internal/emulator), which need
// Node.js and npm on the PATH.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardlease/shardlease/internal/emulator"
)

// row is one line of the table.
type row struct {
	Section string  `json:"section"`
	Metric  string  `json:"metric"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Shown   string  `json:"shown"`
	Target  string  `json:"target"`
	// OK is nil for rows that are informational (no target).
	OK   *bool  `json:"ok,omitempty"`
	Note string `json:"note,omitempty"`
}

// sizes are the flag-controlled sizes of the measurements.
type sizes struct {
	quick bool
	// read throughput (kinesalite)
	recordsPerShard int
	batch           int
	// consumer overhead (in-process fake)
	overheadRecords int
	// DynamoDB cost
	costLeases int
	costWindow time.Duration
	// failover and balance (in-process fake, real time)
	lease    time.Duration
	trials   int
	balanceN int
	// scale (dynalite)
	scaleLeases, scaleRows int
	// fleet (dynalite): the window each fleet is measured over, and the size
	// of the large fleet
	fleetWindow               time.Duration
	fleetShards, fleetWorkers int
}

type env struct {
	sz       sizes
	dynamo   string // endpoint
	kinesis  string // endpoint
	rows     []row
	progress io.Writer
	cost     *costFigures // what the cost steps measured for the charts; see costs
}

func (e *env) add(r row) {
	e.rows = append(e.rows, r)
	fmt.Fprintf(e.progress, "  %-58s %s\n", r.Metric, r.Shown)
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, format+"\n", args...)
}

func okp(b bool) *bool { return &b }

func main() {
	quick := flag.Bool("quick", false, "smaller sizes and windows (about 7 minutes on 2 cores)")
	jsonOut := flag.String("json", "", "also write the rows as JSON to this file")
	charts := flag.String("charts", "", "also draw the cost and failover charts as SVG files in this directory (needs the cost steps)")
	only := flag.String("only", "", "comma-separated sections to run (throughput,overhead,cost,cost-units,cost-crash,cost-scale,failover,deploy,balance,scale,fleet,latency,lanes,window,memory,memory-large,idle-leases,group-reads,group-share,session-cost,session-failover,session-reads,session-upgrade; cost runs the four cost... sections, sessions the four session-... sections; fleet-large runs the fleet section's 1,000-shard row alone, idle-leases the scale section's idle-lease rows alone); default all")
	flag.Parse()
	// The consumers log to slog.Default(); their lease changes (Info) would
	// drown the table, their warnings are worth seeing.
	slog.SetLogLoggerLevel(slog.LevelWarn)

	sz := sizes{
		quick: *quick, recordsPerShard: 4000, batch: 500, overheadRecords: 400_000,
		costLeases: 4, costWindow: 60 * time.Second,
		lease: time.Second, trials: 10, balanceN: 64,
		scaleLeases: 1000, scaleRows: 10000,
		fleetWindow: 60 * time.Second, fleetShards: 1000, fleetWorkers: 100,
	}
	if *quick {
		sz.recordsPerShard, sz.batch, sz.overheadRecords = 1500, 250, 200_000
		sz.costWindow = 20 * time.Second
		sz.trials = 3
		sz.fleetWindow = 20 * time.Second
		sz.fleetShards, sz.fleetWorkers = 1000, 25
	}
	start := time.Now()
	e := &env{sz: sz, progress: os.Stderr}
	if err := run(e, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, e.rows)
	mode := "full"
	if *quick {
		mode = "quick"
	}
	fmt.Printf("\n%s run, %s, GOMAXPROCS %d, %s, took %s\n", mode, runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOARCH, time.Since(start).Round(time.Second))
	if *charts != "" {
		if err := writeCharts(*charts, e.cost); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(struct {
			Mode string `json:"mode"`
			Go   string `json:"go"`
			Rows []row  `json:"rows"`
		}{mode, runtime.Version(), e.rows}, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: write json:", err)
			os.Exit(1)
		}
	}
}

func run(e *env, only string) error {
	want := func(s string) bool {
		if only == "" {
			return true
		}
		for _, o := range strings.Split(only, ",") {
			if o = strings.TrimSpace(o); o == s || o == "sessions" && slices.Contains(sessionSteps, s) || o == "cost" && slices.Contains(costSteps, s) {
				return true
			}
		}
		return false
	}
	// fleet-large is the fleet section's large row alone, idle-leases the
	// scale section's idle-lease rows alone; only when named.
	named := func(s string) bool { return only != "" && want(s) }
	needDynamo := want("throughput") || want("cost") || want("cost-units") || want("scale") || want("fleet") || named("fleet-large") || want("group-reads") || want("group-share") || want("session-cost") || want("session-reads")
	needKinesis := want("throughput")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	if needDynamo {
		s, err := emulator.StartDynalite(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		e.dynamo = s.Endpoint
	}
	if needKinesis {
		s, err := emulator.StartKinesalite(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		e.kinesis = s.Endpoint
	}
	steps := []struct {
		name string
		fn   func(context.Context, *env) error
	}{
		{"throughput", measureThroughput},
		{"overhead", measureOverhead},
		{"cost", measureCost},
		{"cost-units", measureCostUnits},
		{"cost-crash", measureCostCrash},
		{"cost-scale", measureCostScale},
		{"failover", measureFailover},
		{"deploy", measureDeploy},
		{"balance", measureBalance},
		{"scale", measureScale},
		{"fleet", measureFleet},
		{"latency", measureLatency},
		{"lanes", measureLanes},
		{"window", measureWindow},
		{"memory", measureMemory},
		{"memory-large", measureMemoryLarge},
		{"idle-leases", measureIdleLeases},
		{"group-reads", measureGroupReads},
		{"group-share", measureGroupShare},
		{"session-cost", measureSessionCost},
		{"session-failover", measureSessionFailover},
		{"session-reads", measureSessionReads},
		{"session-upgrade", measureSessionUpgrade},
		{"fleet-large", measureFleetLarge},
	}
	for _, s := range steps {
		if (s.name == "fleet-large" || s.name == "idle-leases") && !named(s.name) || !want(s.name) {
			continue
		}
		t0 := time.Now()
		e.logf("%s:", s.name)
		if err := s.fn(ctx, e); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		e.logf("  (%s)", time.Since(t0).Round(100*time.Millisecond))
	}
	return nil
}

func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tvalue\ttarget\tok")
	fmt.Fprintln(tw, "------\t-----\t------\t--")
	section := ""
	for _, r := range rows {
		if r.Section != section {
			section = r.Section
			fmt.Fprintf(tw, "%s\t\t\t\n", "["+section+"]")
		}
		ok := "-"
		if r.OK != nil {
			ok = "yes"
			if !*r.OK {
				ok = "NO"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Metric, r.Shown, r.Target, ok)
	}
	tw.Flush()
	var notes []string
	for _, r := range rows {
		if r.Note != "" {
			notes = append(notes, "- "+r.Metric+": "+r.Note)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
}

// defaultTake is the consumer's default take interval for a lease duration.
func defaultTake(lease time.Duration) time.Duration { return lease * 2 / 5 }
