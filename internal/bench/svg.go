package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A small chart writer for the figures of docs/performance.md: data in,
// SVG text out, nothing else. Line charts draw one polyline per series over
// a linear or logarithmic x axis; bar charts draw one bar per value, with a
// dashed line for a target. Both start their y axis at zero.

// chartSeries is one line of a line chart: points (X[i], Y[i]).
type chartSeries struct {
	Name string
	X, Y []float64
}

// lineChart is a line chart's data and labels.
type lineChart struct {
	Title, XLabel, YLabel string
	LogX                  bool // a logarithmic x axis (every X > 0)
	Series                []chartSeries
}

// chartBar is one bar of a bar chart; bars of one Group share a colour.
type chartBar struct {
	Label string
	Value float64
	Group int
}

// barChart is a bar chart's data and labels; Target, when above zero, is
// drawn as a dashed line across the bars.
type barChart struct {
	Title, YLabel string
	Bars          []chartBar
	Target        float64
	TargetLabel   string
}

// The chart's frame, in SVG units.
const (
	svgW, svgH                    = 640, 400
	plotL, plotR, plotT, plotB    = 70, 190, 40, 60
	plotW, plotH                  = svgW - plotL - plotR, svgH - plotT - plotB
	svgFont                       = `font-family="sans-serif" font-size="12"`
	svgTicks                      = 5
	svgLegendRow, svgLegendSwatch = 18, 14
)

// chartColors are the series' and bars' colours, in order.
var chartColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// svgDoc collects an SVG document.
type svgDoc struct{ b bytes.Buffer }

func (d *svgDoc) printf(format string, args ...any) { fmt.Fprintf(&d.b, format, args...) }

// text writes s escaped at (x, y) with the given attributes.
func (d *svgDoc) text(x, y float64, attrs, s string) {
	var esc bytes.Buffer
	_ = xml.EscapeText(&esc, []byte(s))
	d.printf(`<text x="%s" y="%s" %s %s>%s</text>`+"\n", num(x), num(y), svgFont, attrs, esc.String())
}

// num formats a coordinate.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// open starts the document with its title and the y axis from 0 to yMax.
func (d *svgDoc) open(title, yLabel string, yMax float64) {
	d.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, svgH, svgW, svgH)
	d.printf(`<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	d.text(svgW/2, 22, `text-anchor="middle" font-weight="bold"`, title)
	d.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", plotL, plotT, plotL, plotT+plotH)
	d.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", plotL, plotT+plotH, plotL+plotW, plotT+plotH)
	for i := 0; i <= svgTicks; i++ {
		v := yMax * float64(i) / svgTicks
		y := yAt(v, yMax)
		d.printf(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#ddd"/>`+"\n", plotL, num(y), plotL+plotW, num(y))
		d.text(plotL-6, y+4, `text-anchor="end"`, tickLabel(v))
	}
	d.text(16, plotT+plotH/2, fmt.Sprintf(`text-anchor="middle" transform="rotate(-90 16 %d)"`, plotT+plotH/2), yLabel)
}

// legend writes one swatch and name a row, right of the plot.
func (d *svgDoc) legend(names []string) {
	for i, n := range names {
		y := float64(plotT + 10 + i*svgLegendRow)
		d.printf(`<rect x="%d" y="%s" width="%d" height="%d" fill="%s"/>`+"\n", plotL+plotW+12, num(y-10), svgLegendSwatch, svgLegendSwatch-4, chartColors[i%len(chartColors)])
		d.text(float64(plotL+plotW+12+svgLegendSwatch+6), y, "", n)
	}
}

func (d *svgDoc) close() string {
	d.printf("</svg>\n")
	return d.b.String()
}

// yAt maps v on an axis from 0 to yMax to the plot's y.
func yAt(v, yMax float64) float64 { return plotT + plotH - v/yMax*plotH }

// niceMax rounds v up to a round multiple of a power of ten (1, 1.5, 2,
// 2.5, 3, 4, 5, 6 or 8 times it); 1 when v is not above zero.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel formats an axis value without trailing zeros.
func tickLabel(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// svg returns the line chart as an SVG document.
func (c lineChart) svg() string {
	xMin, xMax, yMax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range c.Series {
		for i := range s.X {
			xMin, xMax, yMax = min(xMin, s.X[i]), max(xMax, s.X[i]), max(yMax, s.Y[i])
		}
	}
	scale := func(x float64) float64 { return x }
	if c.LogX {
		scale = math.Log10
	}
	lo, hi := scale(xMin), scale(xMax)
	if !(hi > lo) {
		lo, hi = lo-1, lo+1
	}
	xAt := func(x float64) float64 { return plotL + (scale(x)-lo)/(hi-lo)*plotW }
	yMax = niceMax(yMax)
	var d svgDoc
	d.open(c.Title, c.YLabel, yMax)
	ticks := map[float64]bool{}
	var names []string
	for i, s := range c.Series {
		pts := make([]string, len(s.X))
		for j := range s.X {
			pts[j] = num(xAt(s.X[j])) + "," + num(yAt(s.Y[j], yMax))
			ticks[s.X[j]] = true
		}
		d.printf(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", chartColors[i%len(chartColors)], strings.Join(pts, " "))
		names = append(names, s.Name)
	}
	for x := range ticks {
		d.text(xAt(x), plotT+plotH+16, `text-anchor="middle"`, tickLabel(x))
	}
	d.text(plotL+plotW/2, svgH-16, `text-anchor="middle"`, c.XLabel)
	d.legend(names)
	return d.close()
}

// svg returns the bar chart as an SVG document.
func (c barChart) svg() string {
	yMax := c.Target
	for _, b := range c.Bars {
		yMax = max(yMax, b.Value)
	}
	yMax = niceMax(yMax * 1.1)
	var d svgDoc
	d.open(c.Title, c.YLabel, yMax)
	slot := float64(plotW) / float64(max(len(c.Bars), 1))
	for i, b := range c.Bars {
		x, y := plotL+slot*float64(i)+slot*0.15, yAt(b.Value, yMax)
		d.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n", num(x), num(y), num(slot*0.7), num(plotT+plotH-y), chartColors[b.Group%len(chartColors)])
		d.text(x+slot*0.35, y-4, `text-anchor="middle"`, tickLabel(math.Round(b.Value*100)/100))
		d.text(x+slot*0.35, plotT+plotH+16, `text-anchor="middle"`, b.Label)
	}
	if c.Target > 0 {
		y := yAt(c.Target, yMax)
		d.printf(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="black" stroke-dasharray="6 4"/>`+"\n", plotL, num(y), plotL+plotW, num(y))
		d.text(plotL+plotW+6, y+4, "", c.TargetLabel)
	}
	return d.close()
}
