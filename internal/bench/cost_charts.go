package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// costFigures are what the cost steps measured that the charts draw.
type costFigures struct {
	// models holds, per lease duration, the models of the busy workers'
	// measured rates.
	models map[time.Duration]costModels
	// failover holds, per lease duration, the crash failover trials.
	failover map[time.Duration][]time.Duration
}

// costModels are the measured models of one lease duration.
type costModels struct{ perLease, sessions costModel }

// costs returns the run's cost figures, made on first use.
func (e *env) costs() *costFigures {
	if e.cost == nil {
		e.cost = &costFigures{models: map[time.Duration]costModels{}, failover: map[time.Duration][]time.Duration{}}
	}
	return e.cost
}

// chartLeases are the x values of the cost charts: leases per worker.
var chartLeases = []float64{1, 2, 5, 10, 20, 50, 100}

// costChart returns the chart of write units per lease-minute against
// leases per worker at lease: the KCL 3.x's model and the measured models.
func costChart(lease time.Duration, m costModels) lineChart {
	line := func(name string, cm costModel) chartSeries {
		s := chartSeries{Name: name, X: chartLeases}
		for _, k := range chartLeases {
			s.Y = append(s.Y, cm.at(int(k)))
		}
		return s
	}
	return lineChart{
		Title:  "Write units per lease-minute, busy leases, " + settingName(lease),
		XLabel: "leases per worker", YLabel: "write units per lease-minute", LogX: true,
		Series: []chartSeries{
			line("KCL 3.x (model)", kclModel(lease, 100)),
			line("per-lease renewals", m.perLease),
			line("sessions", m.sessions),
		},
	}
}

// failoverChart returns the bars of the crash failover trials.
func failoverChart(f map[time.Duration][]time.Duration) barChart {
	c := barChart{Title: "Crash failover with sessions, until every shard is read again", YLabel: "seconds",
		Target: 5, TargetLabel: fmt.Sprintf("target at %v: 5 s", fastLease)}
	for i, lease := range costLeases {
		if ds := f[lease]; len(ds) > 0 {
			worst, median := worstOf(ds)
			c.Bars = append(c.Bars, chartBar{fmt.Sprintf("L %v worst", lease), worst.Seconds(), i}, chartBar{fmt.Sprintf("L %v median", lease), median.Seconds(), i})
		}
	}
	return c
}

// writeCharts writes the charts of what the run measured into dir:
// cost-10s.svg and cost-3s.svg, and failover.svg.
func writeCharts(dir string, c *costFigures) error {
	if c == nil {
		return fmt.Errorf("no chart to write to %s: the run measured no cost (run the cost steps, -only cost)", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{}
	for lease, m := range c.models {
		files[fmt.Sprintf("cost-%v.svg", lease)] = costChart(lease, m).svg()
	}
	if len(c.failover) > 0 {
		files["failover.svg"] = failoverChart(c.failover).svg()
	}
	for name, doc := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			return fmt.Errorf("write chart: %w", err)
		}
	}
	return nil
}
