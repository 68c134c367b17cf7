package tui

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/trace"
)

// chartSizes are the terminal sizes the Charts pane is pinned at: a small
// terminal, a medium one, a common laptop one (the grid's minimum) and a
// large one.
var chartSizes = [][2]int{{80, 24}, {100, 30}, {120, 36}, {160, 48}}

// TestGoldenCharts pins the whole screen with the Charts pane focused (the
// grid where it fits) and the pane zoomed, at every size.
func TestGoldenCharts(t *testing.T) {
	for _, sz := range chartSizes {
		w, h := sz[0], sz[1]
		t.Run(fmt.Sprintf("%dx%d", w, h), func(t *testing.T) {
			m := press(fixtureModel(t, w, h), "2")
			checkGolden(t, fmt.Sprintf("charts_screen_%dx%d", w, h), m.View(), w, h)
			checkGolden(t, fmt.Sprintf("charts_zoom_%dx%d", w, h), press(m, "z").View(), w, h)
		})
	}
}

// TestChartsShowEverySeriesAtEverySize checks, independently of the
// goldens, that every series is on screen with a value and a unit at every
// pinned size, in the grid and zoomed: full plots or compact rows, never
// labels alone.
func TestChartsShowEverySeriesAtEverySize(t *testing.T) {
	for _, sz := range chartSizes {
		m := press(fixtureModel(t, sz[0], sz[1]), "2")
		for _, v := range []string{m.View(), press(m, "z").View()} {
			for _, want := range []string{"GPU mem", "RSS", "weights cached", "PCIe RX", "TTFT/request", "ITL p50/request"} {
				if !strings.Contains(v, want) {
					t.Errorf("%v: no %q:\n%s", sz, want, v)
				}
			}
			full := strings.Contains(v, "┤")
			compact := strings.ContainsAny(v, "▁▂▃▄▅▆▇")
			if !full && !compact {
				t.Errorf("%v: neither plots nor sparklines:\n%s", sz, v)
			}
		}
	}
	// At 120×36 the grid's Charts pane is too small for plots: compact
	// rows with the current value, unit and min…max of each series.
	v := fixtureModel(t, 120, 36).View()
	for _, re := range []string{
		`GPU mem +9\.75 GiB [▁-█]+ 0\.56…9\.75`,
		`RSS +1\.60 GiB [▁-█]+ +0…1\.60`,
		`weights cached +100 % [▁-█]+ +0…100`,
		`TTFT/request +12\.1 ms [▁-█]+ +11\.5…96\.4`,
	} {
		if !regexp.MustCompile(re).MatchString(v) {
			t.Errorf("120×36 grid lacks a compact row matching %s:\n%s", re, v)
		}
	}
}

func TestPickUnit(t *testing.T) {
	for _, c := range []struct {
		base   string
		maxAbs float64
		want   string
	}{
		{"B", 0, "B"}, {"B", 1023, "B"}, {"B", 1024, "KiB"}, {"B", 337.9 * (1 << 20), "MiB"},
		{"B", 1.33 * (1 << 30), "GiB"}, {"B", 3 << 40, "TiB"},
		{"B/s", 2.3e9, "GB/s"}, {"B/s", 999, "B/s"}, {"B/s", 12e6, "MB/s"},
		{"ms", 9999, "ms"}, {"ms", 57_300, "s"}, {"%", 100, "%"}, {"req", 3, "req"},
	} {
		if got := pickUnit(c.base, c.maxAbs).name; got != c.want {
			t.Errorf("pickUnit(%s, %g) = %s, want %s", c.base, c.maxAbs, got, c.want)
		}
	}
}

// axisLabels are the y-axis values of a rendered plot, top to bottom.
func axisLabels(lines []string) []float64 {
	var out []float64
	re := regexp.MustCompile(`^ *(-?[0-9.]+)[┤┼]`)
	for _, l := range lines {
		if m := re.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			out = append(out, v)
		}
	}
	return out
}

// TestAxisUnitMatchesTitle feeds RSS histories of different ranges and
// checks the title's unit is the axis': the top axis label is the maximum
// expressed in the unit the title names (within 5%: asciigraph interpolates
// between points), and so is the current value.
func TestAxisUnitMatchesTitle(t *testing.T) {
	for _, c := range []struct {
		name      string
		vals      []float64 // bytes
		unit      string
		top, last float64 // in unit
	}{
		// The case: a history up to 1.33 GiB whose current value
		// is 337.9 MiB must not say MiB over a GiB axis.
		{"drop", []float64{0.17 * gib, 0.8 * gib, 1.33 * gib, 337.9 * (1 << 20)}, "GiB", 1.33, 0.33},
		{"small", []float64{22e6, 200 << 20, 337.9 * (1 << 20)}, "MiB", 338, 338},
		{"tiny", []float64{100 << 10, 300 << 10}, "KiB", 300, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newState()
			for i, v := range c.vals {
				st.applyOne(trace.Event{At: time.Duration(i) * time.Second, Kind: trace.KindSample,
					Sample: &trace.Sample{Source: trace.SourceProcess, Values: map[string]float64{trace.MetricRSS: v}}})
			}
			p := chartsPane{specs: []seriesSpec{{label: "RSS", source: trace.SourceProcess, metric: trace.MetricRSS, unit: "B"}}}
			cs := p.charts(st)
			if len(cs) != 1 || cs[0].unit != c.unit {
				t.Fatalf("charts = %+v, want one in %s", cs, c.unit)
			}
			th := newTheme(io.Discard, true, false)
			lines := renderChart(th, cs[0], 60, 12)
			if want := fmt.Sprintf("RSS (%s) %s", c.unit, fmtNum(c.last)); lines[0] != want {
				t.Errorf("title %q, want %q", lines[0], want)
			}
			labels := axisLabels(lines[1:])
			if len(labels) == 0 {
				t.Fatalf("no axis labels:\n%s", strings.Join(lines, "\n"))
			}
			if top := labels[0]; math.Abs(top-c.top) > 0.05*c.top {
				t.Errorf("top axis label %g %s, want %g %s (title and axis disagree)", top, c.unit, c.top, c.unit)
			}
			if bot := labels[len(labels)-1]; bot != 0 {
				t.Errorf("axis starts at %g, want 0", bot)
			}
		})
	}
}

// TestServerSeriesRows checks the server's own metrics (probe/scrape's
// samples, source "server") are rows of the default pane: hidden until the
// first server sample, then shown at every size in a unit derived from the
// row's scale (seconds → ms, a 0–1 fraction → %).
func TestServerSeriesRows(t *testing.T) {
	m := fixtureModel(t, 160, 48)
	if v := m.View(); strings.Contains(v, "server TTFT") {
		t.Fatalf("optional server rows shown before any server sample:\n%s", v)
	}
	for i := 0; i < 20; i++ {
		m.applyEvents([]trace.Event{{At: 6*time.Second + time.Duration(i)*100*time.Millisecond, Kind: trace.KindSample,
			Sample: &trace.Sample{Source: trace.SourceServer, Values: map[string]float64{
				trace.MetricServerTTFTMean: 0.020 + 0.001*float64(i),
				trace.MetricServerKVUsage:  0.05 * float64(i),
				trace.MetricServerWaiting:  float64(i % 4)}}}})
	}
	for _, sz := range chartSizes {
		mm := press(fixtureModel(t, sz[0], sz[1]), "2")
		mm.st = m.st
		for _, v := range []string{mm.View(), press(mm, "z").View()} {
			if !strings.Contains(v, "server TTFT") || !strings.Contains(v, "KV cache used") {
				t.Errorf("%v: server rows missing:\n%s", sz, v)
			}
		}
	}
	got := map[string]chart{}
	for _, c := range (chartsPane{}).charts(m.st) {
		got[c.label] = c
	}
	if c := got["server TTFT"]; c.unit != "ms" || c.now != "39.0" {
		t.Errorf("server TTFT = %+v, want 39.0 ms", c)
	}
	if c := got["KV cache used"]; c.unit != "%" || c.now != "95.0" {
		t.Errorf("KV cache used = %+v, want 95.0 %%", c)
	}
	if c := got["waiting"]; c.unit != "req" || c.now != "3.00" {
		t.Errorf("waiting = %+v, want 3 req", c)
	}
	if _, ok := got["server queue"]; ok {
		t.Errorf("server queue shown without a queue-time sample")
	}
}

// TestGPUSeriesSumDevices checks a sourceAllGPUs series sums every GPU's
// latest reading and a ratio series pairs metrics of the same samples.
func TestGPUSeriesSumDevices(t *testing.T) {
	st := newState()
	add := func(at time.Duration, src string, vals map[string]float64) {
		st.applyOne(trace.Event{At: at, Kind: trace.KindSample, Sample: &trace.Sample{Source: src, Values: vals}})
	}
	add(0, "gpu0", map[string]float64{trace.MetricGPUMemUsed: 1 * gib})
	add(1, "gpu1", map[string]float64{trace.MetricGPUMemUsed: 2 * gib})
	add(2, "gpu0", map[string]float64{trace.MetricGPUMemUsed: 3 * gib, trace.MetricPCIeRX: math.NaN()})
	add(3, "gpuX", map[string]float64{trace.MetricGPUMemUsed: 100 * gib}) // not a device: not summed
	add(4, trace.SourcePageCache, map[string]float64{trace.MetricResidentBytes: 1, trace.MetricWeightBytes: 4})
	add(5, trace.SourcePageCache, map[string]float64{trace.MetricResidentBytes: 3, trace.MetricWeightBytes: 0})
	add(6, trace.SourcePageCache, map[string]float64{trace.MetricResidentBytes: 4, trace.MetricWeightBytes: 4})
	s := st.samples.lookup(sourceAllGPUs, trace.MetricGPUMemUsed)
	if s == nil || fmt.Sprint(s.v) != fmt.Sprint([]float64{1 * gib, 3 * gib, 5 * gib}) {
		t.Fatalf("summed GPU memory = %v", s)
	}
	if st.samples.lookup(sourceAllGPUs, trace.MetricPCIeRX) != nil {
		t.Error("a NaN reading made a series")
	}
	r := ratio(st.samples.lookup(trace.SourcePageCache, trace.MetricResidentBytes), st.samples.lookup(trace.SourcePageCache, trace.MetricWeightBytes), 100)
	if fmt.Sprint(r) != "[25 100]" {
		t.Errorf("ratio = %v, want [25 100] (the point with total 0 skipped)", r)
	}
}

func TestSparkline(t *testing.T) {
	for _, c := range []struct {
		data []float64
		w    int
		want string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 8, "▁▂▃▄▅▆▇█"},
		{[]float64{5, 5, 5}, 10, "███"},                // bars rise from 0
		{[]float64{0, 0}, 4, "▁▁"},                     // nothing but zeros
		{[]float64{0, 0, 0, 9, 0, 0, 0, 0}, 4, "▁█▁▁"}, // a spike survives bucketing
		{[]float64{-1, 1}, 2, "▁█"},
	} {
		if got := sparkline(c.data, c.w); got != c.want {
			t.Errorf("sparkline(%v, %d) = %q, want %q", c.data, c.w, got, c.want)
		}
	}
}

// TestCompactRowsOverflow: more series than lines and no room for columns
// ends with a line saying how many are not shown.
func TestCompactRowsOverflow(t *testing.T) {
	m := fixtureModel(t, 80, 24)
	cs := chartsPane{}.charts(m.st)
	lines := compactRows(m.ctx.theme, cs, 40, 3)
	if len(lines) != 3 || !strings.Contains(lines[2], "… 4 more series") {
		t.Errorf("overflow rows:\n%s", strings.Join(lines, "\n"))
	}
	wide := compactRows(m.ctx.theme, cs, 100, 3)
	if len(wide) != 3 || !strings.Contains(strings.Join(wide, "\n"), "ITL p50") {
		t.Errorf("wide compact rows should use two columns:\n%s", strings.Join(wide, "\n"))
	}
	for _, l := range append(lines, wide...) {
		if n := widthOf(l); n > 100 {
			t.Errorf("row %d wide: %q", n, l)
		}
	}
}

// TestCompactRowsWithoutData: before any sample the compact rows say why
// each series is empty, in full, at the grid's minimum size.
func TestCompactRowsWithoutData(t *testing.T) {
	m := NewModel(Options{Header: fixtureHeader(), NoColor: true})
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 120, Height: 36})
	v := mm.(Model).View()
	for _, want := range []string{"no GPU samples (no NVML here)", "no process samples", "no residency samples", "no requests yet"} {
		if !strings.Contains(v, want) {
			t.Errorf("120×36 without data lacks %q:\n%s", want, v)
		}
	}
}
