package tui

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// feed gives evs to the model through Update, in the batches the event
// command makes.
func feed(m Model, evs []trace.Event) Model {
	for len(evs) > 0 {
		n := min(len(evs), maxBatch)
		mm, _ := m.Update(eventsMsg{evs: evs[:n]})
		m = mm.(Model)
		evs = evs[n:]
	}
	return m
}

// longRun is a cold run followed by n sampler ticks (GPU and process
// samples, one log line each), with one spike of the GPU's memory spike
// ticks before the end: a day of a target that keeps running.
func longRun(n, spike int) []trace.Event {
	evs := []trace.Event{
		{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart}},
		{Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 7, ServerKind: "treni"}},
		{At: ms(400), Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StagePageCache, End: ms(400), Source: "engine"}},
		{At: ms(500), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}},
		{At: ms(700), Kind: trace.KindRequest, Request: &trace.Request{ID: "c", Label: "cold_1", Phase: trace.PhaseCold, Sent: ms(510),
			FirstToken: ms(150), End: ms(190), Tokens: []time.Duration{ms(150)}, CompletionTokens: 1, Done: true}},
	}
	for i := 0; i < n; i++ {
		at := time.Second + time.Duration(i)*100*time.Millisecond
		mem := 2e9 + float64(i%100)*1e6
		if i == n-spike {
			mem = 7e10
		}
		evs = append(evs,
			trace.Event{At: at, Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu0", Values: map[string]float64{trace.MetricGPUMemUsed: mem, trace.MetricGPUMemTotal: 8e10}}},
			trace.Event{At: at, Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourceProcess, Values: map[string]float64{trace.MetricRSS: 1e9}}},
			trace.Event{At: at, Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: fmt.Sprintf("INFO tick %d", i)}})
	}
	return evs
}

// TestRetentionBounded feeds a million events (samples and log lines)
// through Update: what the model keeps stays within its bounds (the
// charts' series, the log's ring, what the diagnosis reads), the chart
// still shows a spike among the points it plots, and the log says how
// many earlier lines it let go.
func TestRetentionBounded(t *testing.T) {
	const ticks = 1_000_000 / 3
	m := NewModel(Options{Header: fixtureHeader(), NoColor: true, File: "day.jsonl"})
	m.ctx.width, m.ctx.height = 160, 48
	m = feed(m, longRun(ticks, 50))
	m.analyzeNow(true)
	st := m.st
	for k, s := range st.samples.series {
		if len(s.v) > maxSeriesPoints || len(s.t) != len(s.v) {
			t.Errorf("series %v keeps %d points (bound %d)", k, len(s.v), maxSeriesPoints)
		}
	}
	if len(st.logs) > maxLogLines || st.logDropped+len(st.logs) != ticks {
		t.Errorf("log keeps %d lines and counts %d dropped, of %d", len(st.logs), st.logDropped, ticks)
	}
	if n := len(st.input.Events()); n > 100 {
		t.Errorf("the diagnosis input keeps %d events", n)
	}
	if d := st.diagnosis(-1); d.Facts.GPUMemRise != 0 || !d.Facts.HaveGPU || len(st.runs) != 1 {
		t.Errorf("diagnosis of the run: %+v", d.Facts)
	}
	charts := strings.Join(m.panes[paneCharts].view(m.ctx, st, 150, 40), "\n")
	if !strings.Contains(charts, "65.2┤") { // 7e10 B in GiB, the axis' top
		t.Errorf("the GPU memory spike is not on the chart:\n%s", charts)
	}
	m = press(m, "5", "z", "g")
	log := m.View()
	for _, want := range []string{fmt.Sprintf("%d lines (%d earlier not kept)", len(st.logs), st.logDropped),
		fmt.Sprintf("… %d earlier lines not kept here (search covers the lines below); the session file has them all", st.logDropped)} {
		if !strings.Contains(log, want) {
			t.Errorf("the log pane lacks %q:\n%s", want, log)
		}
	}
}

// TestChartShowsSpike: a spike between the points a plot would sample
// when it has more points than columns is still drawn, at its value.
func TestChartShowsSpike(t *testing.T) {
	data := make([]float64, 400)
	for i := range data {
		data[i] = 10
	}
	data[201] = 90
	got := strings.Join(renderChart(newTheme(&bytes.Buffer{}, true, false), chart{label: "x", unit: "ms", now: "10", data: data}, 60, 8), "\n")
	if !strings.Contains(got, "90.0┤") {
		t.Errorf("spike lost:\n%s", got)
	}
}

// TestDisplayPauseBounded: events that arrive while the display is paused
// are held up to maxPending, then applied with a status that says so; a
// resume applies the rest.
func TestDisplayPauseBounded(t *testing.T) {
	m := NewModel(Options{Header: fixtureHeader(), NoColor: true})
	m.ctx.width, m.ctx.height = 120, 36
	m = press(m, "p")
	n := maxPending/3 + 1000
	m = feed(m, longRun(n, 1))
	if len(m.pending) > maxPending || len(m.st.logs) == 0 || !strings.Contains(m.status, "shown to bound memory") {
		t.Errorf("paused: %d events held, %d log lines applied, status %q", len(m.pending), len(m.st.logs), m.status)
	}
	m = press(m, "p")
	if len(m.pending) != 0 || len(m.st.logs)+m.st.logDropped != n {
		t.Errorf("resumed: %d events held, %d+%d log lines applied, want %d", len(m.pending), len(m.st.logs), m.st.logDropped, n)
	}
}

// TestSeekBackAfterTrimming replays a file longer than the model keeps,
// to its end, then seeks back: the model forgets everything and shows
// what a fresh model fed the events up to that offset shows.
func TestSeekBackAfterTrimming(t *testing.T) {
	evs := longRun(maxLogLines+5000, 10)
	path := filepath.Join(t.TempDir(), "long.jsonl")
	rec, err := sessions.Create(path, fixtureHeader())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		rec.Emit(e)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	rp, err := sessions.OpenReplayer(path, sessions.ReplayOptions{Fast: true, WaitAtEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	sub, stop := rp.Play(context.Background())
	defer stop()
	m := NewModel(Options{Header: fixtureHeader(), NoColor: true, Sub: sub, Replay: rp})
	m.ctx.width, m.ctx.height = 160, 48
	// take reads n events from the replay into the model.
	take := func(n int) {
		for n > 0 {
			msg := waitEvents(sub)().(eventsMsg)
			mm, _ := m.Update(msg)
			m = mm.(Model)
			n -= len(msg.evs)
		}
		if n != 0 {
			t.Fatalf("%d events more than expected", -n)
		}
	}
	take(len(evs))
	if m.st.logDropped == 0 {
		t.Fatal("the replay did not trim the log")
	}
	to := evs[len(evs)/3].At
	upto := 0
	for upto < len(evs) && evs[upto].At <= to {
		upto++
	}
	rp.SetPaused(true) // the seek emits up to the offset, then waits
	rp.Seek(to)
	take(1 + upto) // the reset marker, then the events up to the offset
	m.analyzeNow(true)

	fresh := NewModel(Options{Header: fixtureHeader(), NoColor: true})
	fresh.applyEvents(evs[:upto])
	fresh.analyzeNow(true)
	if m.st.resets != 1 {
		t.Errorf("%d resets", m.st.resets)
	}
	if !reflect.DeepEqual(m.st.logs, fresh.st.logs) || m.st.logDropped != fresh.st.logDropped {
		t.Errorf("log after the seek: %d lines (%d dropped), fresh %d (%d dropped)", len(m.st.logs), m.st.logDropped, len(fresh.st.logs), fresh.st.logDropped)
	}
	if !reflect.DeepEqual(m.st.samples, fresh.st.samples) {
		t.Error("the charts' series after the seek differ from a fresh model's")
	}
	if !reflect.DeepEqual(m.st.runs, fresh.st.runs) || !reflect.DeepEqual(m.st.diagnosis(-1), fresh.st.diagnosis(-1)) {
		t.Error("runs or diagnosis after the seek differ from a fresh model's")
	}
	if !reflect.DeepEqual(m.st.input.Events(), fresh.st.input.Events()) {
		t.Error("the diagnosis input after the seek differs from a fresh model's")
	}
}

// TestLogTrimKeepsPreparedLines: when the state lets its oldest lines go,
// the log pane drops the same prepared lines instead of preparing the
// kept ones again, and ends with what a pane built afresh shows: the same
// lines, the same matches of a search, the current match on its line.
func TestLogTrimKeepsPreparedLines(t *testing.T) {
	m := NewModel(Options{Header: fixtureHeader(), NoColor: true})
	m.ctx.width, m.ctx.height = 160, 48
	c, st := m.ctx, m.st
	l := newLogView()
	l.query = "7"
	add := func(from, to int) {
		for i := from; i < to; i++ {
			st.applyOne(trace.Event{At: time.Duration(i) * time.Millisecond, Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: fmt.Sprintf("line %d", i)}})
		}
	}
	add(0, maxLogLines)
	l.sync(c, st, 20)
	l.jump(len(l.matches) - 1)
	curLine := st.logs[l.matches[l.cur]]
	// A mark on the last prepared line: kept lines are not prepared again.
	l.lines[len(l.lines)-1].prefix += "(prepared)"
	marked := l.lines[len(l.lines)-1]
	add(maxLogLines, maxLogLines+10) // one trim
	if st.logDropped == 0 {
		t.Fatal("the state kept every line")
	}
	l.sync(c, st, 20)
	if got := l.lines[len(l.lines)-11]; got != marked {
		t.Fatalf("the kept lines were prepared again: %+v, want %+v", got, marked)
	}
	l.lines[len(l.lines)-11].prefix = strings.TrimSuffix(marked.prefix, "(prepared)")
	fresh := newLogView()
	fresh.query = l.query
	fresh.sync(c, st, 20)
	if !reflect.DeepEqual(l.lines, fresh.lines) || !reflect.DeepEqual(l.matches, fresh.matches) {
		t.Fatalf("after the trim: %d lines, %d matches; built afresh %d, %d", len(l.lines), len(l.matches), len(fresh.lines), len(fresh.matches))
	}
	if st.logs[l.matches[l.cur]] != curLine {
		t.Errorf("the current match moved from %q to %q", curLine.text, st.logs[l.matches[l.cur]].text)
	}
	// A replay's reset (a seek back) prepares everything again.
	m.st.resets++
	add(maxLogLines+10, maxLogLines+20)
	l.sync(c, st, 20)
	if len(l.lines) != len(st.logs) || l.resets != st.resets {
		t.Errorf("after a reset: %d lines prepared of %d", len(l.lines), len(st.logs))
	}
}
