package tui

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/guptarohit/asciigraph"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// seriesSpec is one row of the Charts pane: what to plot and in which
// unit. The pane is its list of specs, so a new series (a server metric,
// say) is one more row.
type seriesSpec struct {
	label string
	// source is a trace.Sample source ("process", "pagecache", "server",
	// "gpu0"), sourceAllGPUs for a GPU metric summed over every device, or
	// sourceRequests for a per-request figure of the finished requests.
	source string
	// metric is the key in trace.Sample.Values, or for sourceRequests one
	// of reqTTFT and reqITLP50.
	metric string
	// per, when set, plots scale·metric/per of the same samples (a ratio
	// such as the share of the weights in the page cache).
	per string
	// unit is what the values are in after scale. "B" (bytes, binary
	// prefixes), "B/s" (decimal prefixes) and "ms" (ms or s) pick their
	// display unit from the data's range; any other unit ("%", "req") is
	// shown as given.
	unit string
	// scale multiplies the raw values into unit (0 means 1): 1000 for a
	// metric in seconds plotted in ms, 100 for a 0–1 fraction in %.
	scale float64
	// of, when set, is a metric of the same source whose latest value the
	// title shows after the current one ("9.75 of 139.84 GiB"), in ofUnit
	// (empty: unit).
	of, ofUnit string
	// empty is shown while there is no data.
	empty string
	// optional rows are left out while they have no data: sources that
	// only some targets have (a server's own metrics).
	optional bool
}

// sourceRequests is the pseudo-source of per-request series, one point per
// finished request in send order.
const sourceRequests = "requests"

// Metrics of sourceRequests, in ms.
const (
	reqTTFT   = "ttft_ms"
	reqITLP50 = "itl_p50_ms"
)

// defaultSeries are the Charts pane's rows. Server-side series (source
// "server": TTFT, KV-cache usage, queue depth) are added here as optional
// rows; they appear once such samples arrive.
var defaultSeries = []seriesSpec{
	{label: "GPU mem", source: sourceAllGPUs, metric: trace.MetricGPUMemUsed, unit: "B", of: trace.MetricGPUMemTotal,
		empty: "no GPU samples (no NVML here)"},
	{label: "RSS", source: trace.SourceProcess, metric: trace.MetricRSS, unit: "B", empty: "no process samples"},
	{label: "weights cached", source: trace.SourcePageCache, metric: trace.MetricResidentBytes, per: trace.MetricWeightBytes,
		scale: 100, unit: "%", of: trace.MetricWeightBytes, ofUnit: "B", empty: "no residency samples"},
	{label: "PCIe RX", source: sourceAllGPUs, metric: trace.MetricPCIeRX, unit: "B/s", empty: "no PCIe samples (no NVML here)"},
	{label: "TTFT/request", source: sourceRequests, metric: reqTTFT, unit: "ms", empty: "no requests yet"},
	{label: "ITL p50/request", source: sourceRequests, metric: reqITLP50, unit: "ms", empty: "no requests yet"},
	// The server's own view (probe/scrape), beside the client's: the gap
	// between server and client TTFT is network and queueing (hypothesis F).
	{label: "server TTFT", source: trace.SourceServer, metric: trace.MetricServerTTFTMean, unit: "ms", scale: 1000, optional: true},
	{label: "server queue", source: trace.SourceServer, metric: trace.MetricServerQueueMean, unit: "ms", scale: 1000, optional: true},
	{label: "running", source: trace.SourceServer, metric: trace.MetricServerRunning, unit: "req", optional: true},
	{label: "waiting", source: trace.SourceServer, metric: trace.MetricServerWaiting, unit: "req", optional: true},
	{label: "KV cache used", source: trace.SourceServer, metric: trace.MetricServerKVUsage, unit: "%", scale: 100, optional: true},
	{label: "prefix hits", source: trace.SourceServer, metric: trace.MetricServerPrefixHitRate, unit: "%", scale: 100, optional: true},
}

// chartsPane shows the samplers' and prober's histories, one series per
// spec: full asciigraph plots where they fit, else one compact sparkline
// row per series (the way nvitop switches its panels by terminal size).
type chartsPane struct {
	// specs are the rows; nil means defaultSeries.
	specs []seriesSpec
}

func (chartsPane) title() string { return "Charts" }

// chart is one resolved series: its values in the display unit, chosen
// once from the data's range and used by the title and the axis alike.
type chart struct {
	label  string
	unit   string // display unit, e.g. "GiB"
	now    string // the latest value in unit, "" before the first
	suffix string // what follows the value: "of 139.84 GiB", a request label
	data   []float64
	empty  string // shown instead of a plot when there is nothing yet
}

// displayUnit is a unit values are shown in: value/div in name.
type displayUnit struct {
	name string
	div  float64
}

// pickUnit chooses the display unit for values of base whose largest
// magnitude is maxAbs: the largest prefix that keeps that value ≥ 1, so an
// axis reads 0…338 MiB rather than 0…0.33 GiB.
func pickUnit(base string, maxAbs float64) displayUnit {
	var steps []displayUnit
	switch base {
	case "B":
		steps = []displayUnit{{"B", 1}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}}
	case "B/s":
		steps = []displayUnit{{"B/s", 1}, {"kB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}}
	case "ms":
		// Seconds once a value reaches 10 s: 57.3 s reads better than
		// 57300 ms, and a cold 57 s beside warm 0.6 s still shows both.
		if maxAbs >= 1e4 {
			return displayUnit{"s", 1e3}
		}
		return displayUnit{"ms", 1}
	default:
		return displayUnit{base, 1}
	}
	u := steps[0]
	for _, s := range steps[1:] {
		if maxAbs >= s.div {
			u = s
		}
	}
	return u
}

// fmtNum renders a value already in its display unit: three significant
// figures at most, as the axis labels.
func fmtNum(v float64) string {
	return strings.TrimSpace(yLabel(v))
}

// fmtTotal renders a capacity in a title ("of 139.84 GiB"): two decimals,
// since a total is read, not compared on an axis.
func fmtTotal(v float64) string {
	if math.Abs(v) >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func (p chartsPane) rows() []seriesSpec {
	if p.specs == nil {
		return defaultSeries
	}
	return p.specs
}

// charts resolves every spec against the state.
func (p chartsPane) charts(st *state) []chart {
	var reqs []trace.Request
	var cs []chart
	for _, sp := range p.rows() {
		scale := sp.scale
		if scale == 0 {
			scale = 1
		}
		var raw []float64
		var suffix string
		switch {
		case sp.source == sourceRequests:
			if reqs == nil {
				reqs = st.allRequests()
			}
			raw, suffix = requestValues(reqs, sp.metric)
		case sp.per != "":
			raw = ratio(st.samples.lookup(sp.source, sp.metric), st.samples.lookup(sp.source, sp.per), 1)
		default:
			if s := st.samples.lookup(sp.source, sp.metric); s != nil {
				raw = s.v
			}
		}
		if len(raw) == 0 && sp.optional {
			continue
		}
		maxAbs := 0.0
		data := make([]float64, len(raw))
		for i, v := range raw {
			data[i] = v * scale
			maxAbs = max(maxAbs, math.Abs(data[i]))
		}
		u := pickUnit(sp.unit, maxAbs)
		for i := range data {
			data[i] /= u.div
		}
		ch := chart{label: sp.label, unit: u.name, data: data, empty: sp.empty, suffix: suffix}
		if len(data) > 0 {
			ch.now = fmtNum(data[len(data)-1])
		}
		if sp.of != "" && len(data) > 0 {
			if s := st.samples.lookup(sp.source, sp.of); s != nil {
				if v, ok := s.last(); ok && v > 0 {
					if sp.ofUnit == "" || sp.ofUnit == sp.unit {
						ch.suffix = "of " + fmtTotal(v*scale/u.div) + " " + u.name
					} else {
						ou := pickUnit(sp.ofUnit, v)
						ch.suffix = "of " + fmtTotal(v/ou.div) + " " + ou.name
					}
				}
			}
		}
		cs = append(cs, ch)
	}
	return cs
}

// requestValues is one per-request figure (ms) of the successful requests
// and the label of the last one.
func requestValues(reqs []trace.Request, metric string) (vals []float64, last string) {
	for _, q := range reqs {
		if !q.OK() {
			continue
		}
		row := sessions.Row(q)
		v := row.TTFT
		if metric == reqITLP50 {
			v = row.ITLP50
		}
		if v > 0 {
			vals = append(vals, v)
			last = row.Label
		}
	}
	return vals, last
}

// Sizes below which a full plot is not drawn: a title line and at least
// three plot rows, and room for the axis labels and a few points.
const (
	minFullH = 5
	minFullW = 24
)

// fullLayout picks the columns for full plots of n charts in w×h cells:
// as many as the width suggests, more when that makes every cell tall
// enough. ok is false when no layout fits.
func fullLayout(n, w, h int) (cols, cellH int, ok bool) {
	if n == 0 {
		return 0, 0, false
	}
	pref := 1
	switch {
	case w >= 150:
		pref = 3
	case w >= 60:
		pref = 2
	}
	for cols := pref; cols <= 3; cols++ {
		if (w-(cols-1))/cols < minFullW {
			break
		}
		rows := (n + cols - 1) / cols
		if cellH := h / rows; cellH >= minFullH {
			return cols, cellH, true
		}
	}
	return 0, 0, false
}

func (p chartsPane) view(c *programContext, st *state, w, h int) []string {
	cs := p.charts(st)
	if len(cs) == 0 || w <= 0 || h <= 0 {
		return nil
	}
	cols, cellH, ok := fullLayout(len(cs), w, h)
	if !ok {
		return compactRows(c.theme, cs, w, h)
	}
	rows := (len(cs) + cols - 1) / cols
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

// compactRows draws each chart as one line — label, current value with
// its unit, a sparkline and the min…max of the plotted window — in as
// many columns as it takes to show them all, or with a "… more" line when
// even that does not fit.
func compactRows(t *theme, cs []chart, w, h int) []string {
	const minColW = 32
	cols := 1
	for cols*h < len(cs) && (w-cols)/(cols+1) >= minColW {
		cols++
	}
	show := cs
	more := 0
	if cols*h < len(cs) {
		n := max(cols*h-1, 0)
		show, more = cs[:n], len(cs)-n
	}
	colW := (w - (cols - 1)) / cols
	labelW, valW, rngW := 0, 0, 0
	for _, ch := range show {
		labelW = max(labelW, widthOf(ch.label))
		valW = max(valW, widthOf(compactValue(ch)))
		rngW = max(rngW, widthOf(compactRange(ch)))
	}
	labelW = min(labelW, max(colW/3, 6))
	spark := colW - labelW - valW - rngW - 3
	if spark < 6 { // too narrow for the range: keep the sparkline
		rngW = 0
		spark = colW - labelW - valW - 2
	}
	var lines []string
	for _, ch := range show {
		var b strings.Builder
		b.WriteString(t.render(t.bold, fit(ch.label, labelW)))
		b.WriteString(" ")
		val := compactValue(ch)
		if ch.now == "" {
			b.WriteString(t.render(t.dim, padLeft(val, valW)))
		} else {
			b.WriteString(t.render(t.accent, padLeft(val, valW)))
		}
		switch {
		case len(ch.data) == 0 && spark > 0:
			// Nothing to draw: the reason takes the sparkline's and the
			// range's room.
			room := spark
			if rngW > 0 {
				room += 1 + rngW
			}
			b.WriteString(" " + t.render(t.dim, fit(ch.empty, room)))
		case spark > 0:
			b.WriteString(" " + fit(sparkline(ch.data, spark), spark))
			if rngW > 0 {
				b.WriteString(" " + t.render(t.dim, padLeft(compactRange(ch), rngW)))
			}
		}
		lines = append(lines, fit(b.String(), colW))
	}
	if more > 0 {
		lines = append(lines, t.render(t.dim, fmt.Sprintf("… %d more series (z zooms)", more)))
	}
	if cols == 1 {
		return lines
	}
	var out []string
	for r := 0; r < h && r < len(lines); r++ {
		var row []string
		for k := 0; k < cols; k++ {
			cell := strings.Repeat(" ", colW)
			if i := k*h + r; i < len(lines) {
				cell = fit(lines[i], colW)
			}
			row = append(row, cell)
		}
		out = append(out, strings.Join(row, " "))
	}
	return out
}

// compactValue is the current value with its unit, or a dash before the
// first value.
func compactValue(ch chart) string {
	if ch.now == "" {
		return "—"
	}
	return strings.TrimSpace(ch.now + " " + ch.unit)
}

// compactRange is the plotted window's min…max in the display unit.
func compactRange(ch chart) string {
	if len(ch.data) == 0 {
		return ""
	}
	lo, hi := ch.data[0], ch.data[0]
	for _, v := range ch.data {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmtNum(lo) + "…" + fmtNum(hi)
}

var sparkBars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws data in at most w cells, one bar each: the whole window
// in buckets (the largest value of each, so a short spike stays visible)
// when it has more points than cells. Bars rise from 0, or from the
// minimum when values go below 0, as the full plots do.
func sparkline(data []float64, w int) string {
	if w <= 0 || len(data) == 0 {
		return ""
	}
	cells := columnMax(data, w)
	lo, hi := 0.0, cells[0]
	for _, v := range cells {
		lo, hi = min(lo, v), max(hi, v)
	}
	var b strings.Builder
	for _, v := range cells {
		k := 0
		if hi > lo {
			k = int(math.Round((v - lo) / (hi - lo) * float64(len(sparkBars)-1)))
		}
		b.WriteRune(sparkBars[max(0, min(k, len(sparkBars)-1))])
	}
	return b.String()
}

// columnMax fits data to w columns: when it has more points, each column
// is the largest of its points, so a short spike stays visible (a plotter
// that interpolates would step over it).
func columnMax(data []float64, w int) []float64 {
	if len(data) <= w {
		return data
	}
	cells := make([]float64, w)
	for i := range w {
		a, b := i*len(data)/w, (i+1)*len(data)/w
		m := data[a]
		for _, v := range data[a:b] {
			m = max(m, v)
		}
		cells[i] = m
	}
	return cells
}

// chart renders ch in w×h cells, reusing the last plot of the same label
// when nothing it is drawn from changed (new samples of a flat series
// leave the plotted window as it was).
func (c *programContext) chart(ch chart, w, h int) []string {
	data := ch.data
	if n := 4 * (w - yLabelW - 2); n > 0 && len(data) > n {
		data = data[len(data)-n:] // the window renderChart plots
	}
	title := chartTitle(c.theme, ch)
	if c.charts != nil {
		if m, ok := c.charts[ch.label]; ok && m.w == w && m.h == h && m.now == title && slices.Equal(m.data, data) {
			return m.lines
		}
	}
	lines := renderChart(c.theme, ch, w, h)
	if c.charts != nil {
		c.charts[ch.label] = chartMemo{w: w, h: h, now: title, data: append([]float64(nil), data...), lines: lines}
	}
	return lines
}

// chartTitle is the label, the axis' unit in parentheses and the current
// value in that unit: "RSS (MiB) 338"; the label alone before any data.
func chartTitle(t *theme, ch chart) string {
	s := t.render(t.bold, ch.label)
	if ch.now == "" {
		return s // no plot, no axis: the unit comes with the first value
	}
	s += t.render(t.dim, " ("+ch.unit+")") + " " + t.render(t.accent, ch.now)
	if ch.suffix != "" {
		s += t.render(t.dim, " "+ch.suffix)
	}
	return s
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
	data = columnMax(data, plotW)
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
