package tui

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// BenchStatus is the state of a running bench as the bench pane shows it:
// the current run's progress, its rates and its latency distributions.
type BenchStatus struct {
	Workload string
	// Repeat is the measured repeat (1-based), 0 during warm-up.
	Repeat, Repeats int
	Warmup          bool
	// Total requests of the run; Sent so far, Done (ok or not), Failed
	// among them, InFlight = Sent − Done.
	Total, Sent, Done, Failed, InFlight int
	// Elapsed since the run started.
	Elapsed time.Duration
	// OutputTokens streamed so far in the run.
	OutputTokens int64
	// OutputTokPerSec and ReqPerSec are averages since the run started.
	OutputTokPerSec, ReqPerSec float64
	// TTFT and ITL of the run so far.
	TTFT, ITL BenchQuantiles
}

// BenchQuantiles summarize a latency distribution.
type BenchQuantiles struct {
	N             int64
	P50, P90, P99 time.Duration
}

// BenchProgress is the live bench's progress, read once a second by the UI
// (the command adapts probe/load's Progress to it; tui does not import the
// load generator).
type BenchProgress interface {
	BenchSnapshot() BenchStatus
}

// benchEvery is how often a live bench's progress is read.
const benchEvery = time.Second

// maxBenchPoints bounds the tok/s history the pane keeps.
const maxBenchPoints = 1024

type benchTickMsg struct{}

func benchTick() tea.Cmd {
	return tea.Tick(benchEvery, func(time.Time) tea.Msg { return benchTickMsg{} })
}

// benchLive is what the model keeps of a live bench between ticks.
type benchLive struct {
	src        BenchProgress
	prev, cur  BenchStatus
	have       bool
	tokS, reqS float64 // current rates, between the last two snapshots
	hist       []float64
}

// sample reads the progress once and updates the rates and the history.
func (b *benchLive) sample() {
	s := b.src.BenchSnapshot()
	if s.Total == 0 && s.Workload == "" {
		return // not started yet
	}
	b.prev, b.cur = b.cur, s
	b.tokS, b.reqS = benchRates(b.prev, s, b.have)
	b.have = true
	b.hist = append(b.hist, b.tokS)
	if len(b.hist) > maxBenchPoints {
		b.hist = append(b.hist[:0], b.hist[len(b.hist)-maxBenchPoints/2:]...)
	}
}

// benchRates is the rate between two snapshots of one run; across runs (or
// for the first snapshot) the run's averages.
func benchRates(prev, now BenchStatus, havePrev bool) (tokPerSec, reqPerSec float64) {
	dt := (now.Elapsed - prev.Elapsed).Seconds()
	if !havePrev || dt <= 0 || now.Workload != prev.Workload || now.Repeat != prev.Repeat || now.Warmup != prev.Warmup {
		return now.OutputTokPerSec, now.ReqPerSec
	}
	return float64(now.OutputTokens-prev.OutputTokens) / dt, float64(now.Done-prev.Done) / dt
}

// benchTrack follows the bench runs of a recorded (or replayed) session
// from its bench_start / bench_end markers and its bench requests.
type benchTrack struct {
	runs, ended int
	open        bool
	first       time.Duration // the first run's start: offset 0 of the history
	start       time.Duration // the current (or last) run's start
	end         time.Duration
	st          BenchStatus
	ttft, itl   []time.Duration
	// tokBins counts output tokens per second of session since first.
	tokBins []float64
	sorted  bool
	// sent are the current run's requests seen so far (done or streaming).
	sent map[string]bool
}

func (b *benchTrack) marker(e trace.Event) {
	switch e.Marker.Name {
	case trace.MarkerBenchStart:
		a := e.Marker.Attrs
		w, _ := a.String("workload")
		run, _ := a.Float("run")
		reps, _ := a.Float("repeats")
		n, _ := a.Float("requests")
		warm, _ := a["warmup"].(bool)
		if b.runs == 0 {
			b.first = e.At
		}
		b.runs++
		b.open = true
		b.start, b.end = e.At, e.At
		rep := int(run)
		if warm {
			rep = 0
		}
		b.st = BenchStatus{Workload: w, Repeat: rep, Repeats: int(reps), Warmup: warm, Total: int(n)}
		b.ttft, b.itl = b.ttft[:0], b.itl[:0]
		b.sorted = true
		b.sent = map[string]bool{}
	case trace.MarkerBenchEnd:
		if b.open {
			b.open = false
			b.ended++
			b.end = e.At
		}
	}
}

func (b *benchTrack) request(at time.Duration, q *trace.Request) {
	if b.runs == 0 || q.Sent < b.start || (q.Phase != trace.PhaseBench && q.Phase != trace.PhaseWarmup) {
		return
	}
	if b.sent[q.ID] && !q.Done {
		return
	}
	if !b.sent[q.ID] {
		b.sent[q.ID] = true
		b.st.Sent++
	}
	if !q.Done {
		return
	}
	if at > b.end {
		b.end = at
	}
	b.st.Done++
	if !q.OK() {
		b.st.Failed++
		return
	}
	n := q.CompletionTokens
	if n == 0 {
		n = len(q.Tokens)
	}
	b.st.OutputTokens += int64(n)
	if q.FirstToken > 0 {
		b.ttft = append(b.ttft, q.FirstToken)
	}
	b.itl = append(b.itl, q.ITLs()...)
	b.sorted = false
	// Spread the request's tokens over the seconds they arrived in.
	per := 1.0
	if len(q.Tokens) > 0 && n > len(q.Tokens) {
		per = float64(n) / float64(len(q.Tokens))
	}
	for _, t := range q.Tokens {
		i := int((q.Sent + t - b.first) / time.Second)
		if i < 0 {
			continue
		}
		if i >= 1<<16 {
			break // a corrupt offset must not allocate without bound
		}
		for len(b.tokBins) <= i {
			b.tokBins = append(b.tokBins, 0)
		}
		b.tokBins[i] += per
	}
}

// status is the current run's state at session offset now.
func (b *benchTrack) status(now time.Duration) BenchStatus {
	s := b.st
	end := now
	if !b.open || end < b.end {
		end = b.end
	}
	s.Elapsed = max(end-b.start, 0)
	s.InFlight = s.Sent - s.Done
	if sec := s.Elapsed.Seconds(); sec > 0 {
		s.OutputTokPerSec = float64(s.OutputTokens) / sec
		s.ReqPerSec = float64(s.Done-s.Failed) / sec
	}
	if !b.sorted {
		sort.Slice(b.ttft, func(i, j int) bool { return b.ttft[i] < b.ttft[j] })
		sort.Slice(b.itl, func(i, j int) bool { return b.itl[i] < b.itl[j] })
		b.sorted = true
	}
	s.TTFT, s.ITL = quantiles(b.ttft), quantiles(b.itl)
	return s
}

// quantiles of sorted durations (nearest rank).
func quantiles(d []time.Duration) BenchQuantiles {
	if len(d) == 0 {
		return BenchQuantiles{}
	}
	at := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(d)))) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return BenchQuantiles{N: int64(len(d)), P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// benchActive reports whether the bench pane takes the first slot: a live
// bench, or a session that contains bench runs.
func (m Model) benchActive() bool {
	return m.bench != nil || m.st.bench != nil
}

// benchView gathers what the pane draws: the status, the current rates,
// the number of runs and the tok/s history.
func (m Model) benchView() (s BenchStatus, tokS, reqS float64, runs string, hist []float64, ok bool) {
	if b := m.bench; b != nil {
		if !b.have {
			return s, 0, 0, "", nil, false
		}
		return b.cur, b.tokS, b.reqS, "", b.hist, true
	}
	b := m.st.bench
	if b == nil || b.runs == 0 {
		return s, 0, 0, "", nil, false
	}
	now := m.st.last
	if m.opts.Clock != nil {
		now = m.opts.Clock()
	} else if r := m.opts.Replay; r != nil && r.Speed() > 0 {
		now = r.Position()
	}
	s = b.status(now)
	hist = b.tokBins
	tokS, reqS = s.OutputTokPerSec, s.ReqPerSec
	// The current rate is the last complete second's tokens.
	if n := len(hist); n >= 2 && b.open {
		tokS = hist[n-2]
	}
	runs = fmt.Sprintf("run %d of the session", b.runs)
	if !b.open {
		runs = fmt.Sprintf("%d runs finished", b.ended)
	}
	return s, tokS, reqS, runs, hist, true
}

// benchPane draws the bench: progress bar, rates, TTFT and ITL percentiles
// and the output tok/s over time.
type benchPane struct{ m *Model }

func (benchPane) title() string { return "Bench" }

func (p benchPane) view(c *programContext, _ *state, w, h int) []string {
	t := c.theme
	s, tokS, reqS, runs, hist, ok := p.m.benchView()
	if !ok {
		return []string{t.render(t.dim, "waiting for the first bench run…")}
	}
	name := s.Workload
	switch {
	case s.Warmup:
		name += " · warm-up (not counted)"
	case s.Repeats > 0:
		name += fmt.Sprintf(" · repeat %d/%d", s.Repeat, s.Repeats)
	}
	head := t.render(t.bold, name)
	if runs != "" {
		head += t.render(t.dim, " · "+runs)
	}
	lines := []string{spread(head, t.render(t.dim, "elapsed ")+stat.FormatDuration(s.Elapsed), w)}

	frac := 0.0
	if s.Total > 0 {
		frac = min(float64(s.Done)/float64(s.Total), 1)
	}
	counts := fmt.Sprintf(" %d/%d %3.0f%%", s.Done, s.Total, 100*frac)
	lines = append(lines, progressBar(t, frac, w-widthOf(counts))+counts)
	failed := fmt.Sprintf("failed %d", s.Failed)
	if s.Failed > 0 {
		failed = t.render(t.bad, failed)
	}
	lines = append(lines, fmt.Sprintf("sent %d · in flight %d · done %d · ", s.Sent, s.InFlight, s.Done)+failed)
	lines = append(lines, t.render(t.bold, "now ")+t.render(t.accent, fmt.Sprintf("%.1f tok/s · %.2f req/s", tokS, reqS))+
		t.render(t.dim, fmt.Sprintf("   run avg %.1f tok/s · %.2f req/s · %d tokens", s.OutputTokPerSec, s.ReqPerSec, s.OutputTokens)))
	q := func(name string, d BenchQuantiles) string {
		if d.N == 0 {
			return fmt.Sprintf("%-5s %s", name, t.render(t.dim, "no samples yet"))
		}
		ms := func(x time.Duration) string { return padLeft(stat.FormatMS(float64(x)/1e6), 8) }
		return fmt.Sprintf("%-5s %s %s %s %s", name, ms(d.P50), ms(d.P90), ms(d.P99), padLeft(itoa(int(d.N)), 8))
	}
	lines = append(lines, t.render(t.dim, fmt.Sprintf("%-5s %8s %8s %8s %8s", "ms", "p50", "p90", "p99", "n")),
		q("TTFT", s.TTFT), q("ITL", s.ITL))
	if left := h - len(lines); left >= 4 {
		ch := chart{label: "output", unit: "tok/s", data: hist, empty: "no tokens yet"}
		if len(hist) > 0 {
			ch.now = fmt.Sprintf("%.1f", tokS)
		}
		lines = append(lines, renderChart(t, ch, w, left)...)
	}
	return lines
}

// progressBar draws a bar of w cells filled to frac, in the style of
// bubbles/progress (full and empty block runes; colored when colors are on).
func progressBar(t *theme, frac float64, w int) string {
	if w <= 0 {
		return ""
	}
	full := int(math.Round(frac * float64(w)))
	full = min(max(full, 0), w)
	return t.render(t.accent, strings.Repeat("█", full)) + t.render(t.dim, strings.Repeat("░", w-full))
}

// benchState is the header's state word for a bench: benchmarking while a
// run is under way, else finished (or waiting before the first run).
func (m Model) benchState() string {
	if m.bench != nil {
		switch {
		case m.closed:
			return "finished"
		case !m.bench.have:
			return "waiting"
		}
		return "benchmarking"
	}
	if b := m.st.bench; b != nil && b.open {
		return "benchmarking"
	}
	return "finished"
}
