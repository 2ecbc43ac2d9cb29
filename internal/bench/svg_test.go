package main

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// svgElements parses doc as XML and returns the names of its elements and
// the text of its text elements, failing t if it is not well formed.
func svgElements(t *testing.T, doc string) (elems map[string]int, texts []string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(doc))
	elems = map[string]int{}
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			elems[tok.Name.Local]++
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if elems["svg"] != 1 {
		t.Fatalf("%d svg root elements, want 1", elems["svg"])
	}
	return elems, texts
}

func contains(texts []string, s string) bool {
	for _, t := range texts {
		if t == s {
			return true
		}
	}
	return false
}

func TestLineChartSVG(t *testing.T) {
	c := lineChart{
		Title: "Cost & <failover>", XLabel: "leases per worker", YLabel: "write units per lease-minute", LogX: true,
		Series: []chartSeries{
			{Name: "KCL 3.x", X: []float64{1, 10, 100}, Y: []float64{21, 19.3, 19.2}},
			{Name: "per-lease renewals", X: []float64{1, 10, 100}, Y: []float64{19, 18.2, 18}},
			{Name: "sessions", X: []float64{1, 10, 100}, Y: []float64{18, 1.8, 0.18}},
		},
	}
	elems, texts := svgElements(t, c.svg())
	if elems["polyline"] != 3 {
		t.Errorf("%d polylines, want one per series (3)", elems["polyline"])
	}
	for _, want := range []string{"Cost & <failover>", "leases per worker", "write units per lease-minute", "KCL 3.x", "sessions", "1", "10", "100", "0", "25"} {
		if !contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
}

func TestLineChartSVGOnePoint(t *testing.T) {
	c := lineChart{Title: "t", XLabel: "x", YLabel: "y", Series: []chartSeries{{Name: "s", X: []float64{5}, Y: []float64{0}}}}
	elems, texts := svgElements(t, c.svg())
	if elems["polyline"] != 1 || !contains(texts, "5") {
		t.Errorf("one point: %d polylines, texts %q", elems["polyline"], texts)
	}
	if strings.Contains(c.svg(), "NaN") || strings.Contains(c.svg(), "Inf") {
		t.Errorf("a coordinate is not a number:\n%s", c.svg())
	}
}

func TestBarChartSVG(t *testing.T) {
	c := barChart{Title: "crash failover", YLabel: "seconds", TargetLabel: "target 5 s", Target: 5,
		Bars: []chartBar{{"L 10 s worst", 13.2, 0}, {"L 10 s median", 12.1, 0}, {"L 3 s worst", 4.1, 1}, {"L 3 s median", 3.6, 1}}}
	doc := c.svg()
	elems, texts := svgElements(t, doc)
	// The background and one bar each.
	if elems["rect"] != 1+len(c.Bars) {
		t.Errorf("%d rects, want %d", elems["rect"], 1+len(c.Bars))
	}
	for _, want := range []string{"crash failover", "seconds", "target 5 s", "L 3 s worst", "13.2", "4.1"} {
		if !contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	if !strings.Contains(doc, "stroke-dasharray") {
		t.Error("no dashed target line")
	}
}

func TestNiceMax(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.7, 0.8}, {1, 1}, {1.2, 1.5}, {19.3, 20}, {21, 25}, {63, 80}, {102, 150}} {
		if got := niceMax(c.in); got != c.want {
			t.Errorf("niceMax(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
