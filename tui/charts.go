package tui

import (
	"fmt"
	"strings"

	"github.com/guptarohit/asciigraph"

	"github.com/treni-top/treni-top/sessions"
)

// chartsPane shows the samplers' and prober's histories as asciigraph line
// charts, each titled with its unit and current value.
type chartsPane struct{}

func (chartsPane) title() string { return "Charts" }

// chart is one plot: a title with the current value and the values to draw.
type chart struct {
	title string
	unit  string
	now   string
	data  []float64
	empty string // shown instead of a plot when there is nothing yet
}

const gib = 1024 * 1024 * 1024

func (chartsPane) charts(st *state) []chart {
	scale := func(s series, f float64) []float64 {
		out := make([]float64, len(s.v))
		for i, v := range s.v {
			out[i] = v / f
		}
		return out
	}
	var cs []chart
	gm := chart{title: "GPU mem", unit: "GiB", data: scale(st.gpuMem, gib), empty: "no GPU samples (no NVML here)"}
	if v, ok := st.gpuMem.last(); ok {
		gm.now = fmtBytes(v)
		if tot := sum(st.gpuTotalBy); tot > 0 {
			gm.now += " / " + fmtBytes(tot)
		}
	}
	cs = append(cs, gm)
	rss := chart{title: "RSS", unit: "GiB", data: scale(st.rss, gib), empty: "no process samples"}
	if v, ok := st.rss.last(); ok {
		rss.now = fmtBytes(v)
	}
	cs = append(cs, rss)
	pc := chart{title: "weights cached", unit: "%", data: st.residentPct.v, empty: "no residency samples"}
	if v, ok := st.residentPct.last(); ok {
		pc.now = fmt.Sprintf("%.0f%% of %s", v, fmtBytes(st.weightBytes))
	}
	cs = append(cs, pc)
	rx := chart{title: "PCIe RX", unit: "GB/s", data: scale(st.pcieRX, 1e9), empty: "no PCIe samples (no NVML here)"}
	if v, ok := st.pcieRX.last(); ok {
		rx.now = fmt.Sprintf("%.2f GB/s", v/1e9)
	}
	cs = append(cs, rx)
	reqs := st.allRequests()
	ttft := chart{title: "TTFT/request", unit: "ms", empty: "no requests yet"}
	itl := chart{title: "ITL p50/request", unit: "ms", empty: "no requests yet"}
	for _, q := range reqs {
		if !q.OK() {
			continue
		}
		row := sessions.Row(q)
		ttft.data = append(ttft.data, row.TTFT)
		ttft.now = fmtMS(row.TTFT) + " ms " + row.Label
		if row.ITLP50 > 0 {
			itl.data = append(itl.data, row.ITLP50)
			itl.now = fmtMS(row.ITLP50) + " ms " + row.Label
		}
	}
	return append(cs, ttft, itl)
}

func (p chartsPane) view(c *programContext, st *state, w, h int) []string {
	cs := p.charts(st)
	cols := 1
	switch {
	case w >= 150:
		cols = 3
	case w >= 60:
		cols = 2
	}
	rows := (len(cs) + cols - 1) / cols
	cellH := h / rows
	if cellH < 2 {
		// Too short for plots: one line per chart with its current value.
		var lines []string
		for _, ch := range cs {
			lines = append(lines, chartTitle(c.theme, ch))
		}
		return lines
	}
	cellW := (w - (cols - 1)) / cols
	var out []string
	for r := 0; r < rows; r++ {
		var blocks [][]string
		for k := 0; k < cols; k++ {
			i := r*cols + k
			var cell []string
			if i < len(cs) {
				cell = c.chart(cs[i], cellW, cellH)
			}
			cell = fitLines(cell, cellW, cellH)
			if k < cols-1 {
				for j := range cell {
					cell[j] += " "
				}
			}
			blocks = append(blocks, cell)
		}
		out = append(out, joinH(blocks...)...)
	}
	return out
}

// chart renders ch in w×h cells, reusing the last plot of the same title
// when nothing it is drawn from changed (new samples of a flat series
// leave the plotted window as it was).
func (c *programContext) chart(ch chart, w, h int) []string {
	data := ch.data
	if n := 4 * (w - yLabelW - 2); n > 0 && len(data) > n {
		data = data[len(data)-n:] // the window renderChart plots
	}
	if c.charts != nil {
		if m, ok := c.charts[ch.title]; ok && m.w == w && m.h == h && m.now == ch.now && equalFloats(m.data, data) {
			return m.lines
		}
	}
	lines := renderChart(c.theme, ch, w, h)
	if c.charts != nil {
		c.charts[ch.title] = chartMemo{w: w, h: h, now: ch.now, data: append([]float64(nil), data...), lines: lines}
	}
	return lines
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// chartTitle is the title with the current value, which carries the unit;
// before the first value the unit alone is shown.
func chartTitle(t *theme, ch chart) string {
	if ch.now == "" {
		return t.render(t.bold, ch.title) + t.render(t.dim, " ("+ch.unit+")")
	}
	return t.render(t.bold, ch.title) + " " + t.render(t.accent, ch.now)
}

// yLabelW is the width of the y-axis labels our formatter writes;
// asciigraph adds one space before a label and the axis glyph after it.
const yLabelW = 5

// renderChart draws one titled asciigraph plot in w×h cells.
func renderChart(t *theme, ch chart, w, h int) []string {
	lines := []string{chartTitle(t, ch)}
	if len(ch.data) == 0 {
		return append(lines, t.render(t.dim, ch.empty))
	}
	plotW := w - yLabelW - 2 // label, its leading space and the axis glyph
	if plotW < 4 || h < 3 {
		return lines
	}
	data := ch.data
	if len(data) == 1 {
		data = []float64{data[0], data[0]}
	}
	if len(data) > 4*plotW {
		data = data[len(data)-4*plotW:]
	}
	lo, hi := data[0], data[0]
	for _, v := range data {
		lo, hi = min(lo, v), max(hi, v)
	}
	opts := []asciigraph.Option{
		asciigraph.Height(h - 2), asciigraph.Width(plotW), asciigraph.Offset(2),
		asciigraph.YAxisValueFormatter(yLabel),
	}
	if lo >= 0 {
		opts = append(opts, asciigraph.LowerBound(0))
	}
	if hi == lo {
		opts = append(opts, asciigraph.UpperBound(hi+1))
	}
	if t.color {
		opts = append(opts, asciigraph.SeriesColors(asciigraph.Blue), asciigraph.AxisColor(asciigraph.Gray), asciigraph.LabelColor(asciigraph.Gray))
	}
	plot := asciigraph.Plot(data, opts...)
	return append(lines, strings.Split(plot, "\n")...)
}

// yLabel formats axis values in at most yLabelW cells.
func yLabel(v float64) string {
	var s string
	switch a := abs(v); {
	case a < 0.005:
		s = "0" // also hides -0.00 from float noise at the lower bound
	case a >= 100:
		s = fmt.Sprintf("%.0f", v)
	case a >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	return padLeft(s, yLabelW)
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
