package tui

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/muesli/termenv"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// fixtureModel is a model that has consumed the whole fixture, colorless.
func fixtureModel(t testing.TB, w, h int) Model {
	t.Helper()
	s := loadFixture(t)
	m := NewModel(Options{Header: s.Header, NoColor: true, File: fixtureFile})
	m.applyEvents(s.Events)
	m.analyzeNow(true)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return mm.(Model)
}

// fixtureFile is where the fixture's session file lives, as the Session
// pane shows it.
const fixtureFile = "/home/dev/.local/share/treni-top/sessions/20261122-030000-treni.jsonl"

func press(m Model, keys ...string) Model {
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "tab":
			msg = tea.KeyMsg{Type: tea.KeyTab}
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		mm, _ := m.Update(msg)
		m = mm.(Model)
	}
	return m
}

// checkGolden compares got with testdata/name.golden (rewritten under
// -update) and checks the frame's geometry.
func checkGolden(t *testing.T, name, got string, w, h int) {
	t.Helper()
	lines := strings.Split(got, "\n")
	if len(lines) != h {
		t.Errorf("%s: %d lines, want %d", name, len(lines), h)
	}
	for i, l := range lines {
		if n := widthOf(l); n != w {
			t.Errorf("%s: line %d is %d cells wide, want %d: %q", name, i, n, w, l)
			break
		}
	}
	path := filepath.Join("testdata", name)
	if !strings.HasSuffix(name, ".txt") {
		path += ".golden"
	}
	if updating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tui -update)", err)
	}
	if !bytes.Equal(want, []byte(got)) {
		t.Errorf("%s differs from %s (go test ./tui -update rewrites it)\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

var paneNames = []string{"waterfall", "charts", "requests", "diagnosis", "log", "session"}

// TestGoldenPanes renders each pane focused at 80×24 (one pane on screen)
// and zoomed at 160×48.
func TestGoldenPanes(t *testing.T) {
	for i, name := range paneNames {
		for _, sz := range [][2]int{{80, 24}, {160, 48}} {
			t.Run(fmt.Sprintf("%s_%dx%d", name, sz[0], sz[1]), func(t *testing.T) {
				m := press(fixtureModel(t, sz[0], sz[1]), itoa(i+1))
				if sz[0] >= gridMinW {
					m = press(m, "z")
				}
				checkGolden(t, fmt.Sprintf("%s_%dx%d", name, sz[0], sz[1]), m.View(), sz[0], sz[1])
			})
		}
	}
}

// TestGoldenGrid renders the all-panes layout at 120×36 (the smallest
// grid: the requests pane keeps its tokens column, the warm E2E row and the
// cold penalty), 160×48 and 200×60.
func TestGoldenGrid(t *testing.T) {
	for _, sz := range [][2]int{{120, 36}, {160, 48}, {200, 60}} {
		name := fmt.Sprintf("grid_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			checkGolden(t, name, fixtureModel(t, sz[0], sz[1]).View(), sz[0], sz[1])
		})
	}
}

// TestFrameContents checks facts in the frames independently of the
// goldens, so a regenerated golden cannot hide a lost stage or number.
func TestFrameContents(t *testing.T) {
	m := fixtureModel(t, 160, 48)
	grid := m.View()
	r, _ := m.st.run(-1)
	diag := "insufficient evidence"
	if d := m.st.diag; d.Dominant != "" {
		diag = "diagnosis " + d.Dominant + ":"
	}
	for _, want := range []string{
		"cuda_init", "page_cache", "decoder_tensor_upload", "graph_capture", "unattributed",
		"▶ " + string(r.Attribution.Dominant), // the dominant stage is marked
		"cold_1", "warm_5", "cold penalty", diag, "ITL p50", "TTFT/request", "RSS", "weights cached",
		"GPU mem", "PCIe RX", "● healthy", "NVIDIA H200", "demo/qwen3-0.6b",
	} {
		if !strings.Contains(grid, want) {
			t.Errorf("160×48 grid lacks %q", want)
		}
	}
	small := fixtureModel(t, 80, 24).View()
	if !strings.Contains(small, "decoder_tensor_upload") || strings.Contains(small, "cold penalty") {
		t.Errorf("80×24 should show the waterfall pane only:\n%s", small)
	}
}

func TestHelpOverlayFromKeymap(t *testing.T) {
	m := press(fixtureModel(t, 120, 40), "?")
	v := m.View()
	for _, g := range m.ctx.keys.FullHelp() {
		for _, b := range g {
			if !strings.Contains(v, b.Help().Desc) {
				t.Errorf("help overlay lacks %q", b.Help().Desc)
			}
		}
	}
	if v2 := press(m, "x").View(); strings.Contains(v2, "toggle help") && !strings.Contains(v2, "? ") {
		t.Error("any key should close the help overlay")
	}
}

func TestControllerKeysWithoutController(t *testing.T) {
	m := fixtureModel(t, 80, 24)
	for _, k := range []string{"r", "w", "e", "s"} {
		v := press(m, k).View()
		if !strings.Contains(v, "not available") {
			t.Errorf("key %s without a controller: status missing\n%s", k, v)
		}
	}
}

type fakeCtl struct{ calls []string }

func (f *fakeCtl) NewColdRun()      { f.calls = append(f.calls, "r") }
func (f *fakeCtl) WarmProbe()       { f.calls = append(f.calls, "w") }
func (f *fakeCtl) EvictAndRestart() { f.calls = append(f.calls, "e") }
func (f *fakeCtl) Save() (string, error) {
	f.calls = append(f.calls, "s")
	return "/tmp/x.jsonl", nil
}
func (f *fakeCtl) Quit() { f.calls = append(f.calls, "q") }

func TestControllerKeys(t *testing.T) {
	ctl := &fakeCtl{}
	s := loadFixture(t)
	m := NewModel(Options{Header: s.Header, NoColor: true, Controller: ctl})
	m = press(m, "r", "w", "e", "s")
	if !strings.Contains(m.status, "/tmp/x.jsonl") {
		t.Errorf("status after save = %q", m.status)
	}
	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	if got := strings.Join(ctl.calls, ""); got != "rwes" {
		t.Errorf("controller calls %q, want rwes (Run calls Quit, not the key)", got)
	}
	if cmd == nil {
		t.Fatal("q returned no command")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("q did not quit")
	}
}

func TestLogSearch(t *testing.T) {
	m := press(fixtureModel(t, 80, 24), "/", "k", "v", " ", "c", "a", "c", "h", "e", "enter")
	v := m.View()
	if !strings.Contains(v, "/kv cache  1/") || !strings.Contains(v, "» kv cache: 4096 blocks") {
		t.Errorf("search did not find the kv cache line:\n%s", v)
	}
}

func TestReplayResetForgets(t *testing.T) {
	m := fixtureModel(t, 80, 24)
	m.applyEvents([]trace.Event{{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerReplayReset}}})
	m.analyzeNow(true)
	if len(m.st.runs) != 0 || len(m.st.logs) != 0 || m.st.resets != 1 {
		t.Errorf("after reset: %d runs, %d logs, %d resets", len(m.st.runs), len(m.st.logs), m.st.resets)
	}
}

func TestStateWords(t *testing.T) {
	s := loadFixture(t)
	m := NewModel(Options{Header: s.Header, NoColor: true})
	m.ctx.width, m.ctx.height = 100, 24
	steps := []struct {
		until time.Duration
		want  string
	}{{7 * time.Millisecond, "launching"}, {500 * time.Millisecond, "loading"}, {1840 * time.Millisecond, "healthy"}, {1900 * time.Millisecond, "probing"}}
	i := 0
	for _, st := range steps {
		for i < len(s.Events) && s.Events[i].At <= st.until {
			m.applyEvents(s.Events[i : i+1])
			i++
		}
		m.analyzeNow(true)
		if h := m.headerLines(100)[0]; !strings.Contains(h, "● "+st.want) {
			t.Errorf("at %v: header %q, want state %s", st.until, h, st.want)
		}
	}
	m.applyEvents([]trace.Event{{At: 6 * time.Second, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessExit, PID: 4242, ExitCode: 137}}})
	m.analyzeNow(true)
	if h := m.headerLines(100)[0]; !strings.Contains(h, "crashed (exit 137)") {
		t.Errorf("after an unexpected exit: %q", h)
	}
}

// TestEverySizeFits renders every pane, zoomed and not, at many sizes
// (including absurdly small ones) and checks the frame is exactly w×h.
func TestEverySizeFits(t *testing.T) {
	base := fixtureModel(t, 80, 24)
	for _, w := range []int{1, 20, 45, 79, 80, 119, 120, 160, 200, 251} {
		for _, h := range []int{1, 3, 8, 24, 35, 36, 48, 60, 71} {
			mm, _ := base.Update(tea.WindowSizeMsg{Width: w, Height: h})
			m := mm.(Model)
			for p := 0; p < numPanes; p++ {
				for _, zoom := range []bool{false, true} {
					m.focus, m.zoom = p, zoom
					lines := strings.Split(m.View(), "\n")
					if len(lines) != h {
						t.Fatalf("%dx%d pane %d zoom %v: %d lines", w, h, p, zoom, len(lines))
					}
					for i, l := range lines {
						if widthOf(l) != w {
							t.Fatalf("%dx%d pane %d zoom %v: line %d is %d wide: %q", w, h, p, zoom, i, widthOf(l), l)
						}
					}
				}
			}
		}
	}
}

// TestCaptures writes the README captures (text frames) under -update and
// checks they match the goldens they are copies of.
func TestCaptures(t *testing.T) {
	for name, m := range map[string]Model{
		"capture_80x24.txt":  fixtureModel(t, 80, 24),
		"capture_160x48.txt": fixtureModel(t, 160, 48),
	} {
		checkGolden(t, name, m.View(), m.ctx.width, m.ctx.height)
	}
}

// TestOpenStagesGrowLive feeds the fixture up to 500 ms (page_cache and
// cuda_init still open) with a live clock at 600 ms: the open bars must
// reach the clock and be marked as running.
func TestOpenStagesGrowLive(t *testing.T) {
	s := loadFixture(t)
	now := 600 * time.Millisecond
	m := NewModel(Options{Header: s.Header, NoColor: true, Clock: func() time.Duration { return now }})
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	m = mm.(Model)
	for _, e := range s.Events {
		if e.At > 500*time.Millisecond {
			break
		}
		m.applyEvents([]trace.Event{e})
	}
	m.analyzeNow(false)
	r, _ := m.st.run(-1)
	pc, ok := r.Attribution.Stage(trace.StagePageCache)
	if !ok || pc.End != now {
		t.Fatalf("page_cache should run to the clock (%v): %+v", now, pc)
	}
	v := m.View()
	if !strings.Contains(v, "● loading") || !strings.Contains(v, "534.0 ms…") {
		t.Errorf("live frame should show loading and a running page_cache (534.0 ms…):\n%s", v)
	}
	now = 700 * time.Millisecond
	mm, _ = m.Update(tickMsg{})
	m = mm.(Model)
	if v2 := m.View(); !strings.Contains(v2, "634.0 ms…") {
		t.Errorf("a tick should grow the open stage to 634.0 ms:\n%s", v2)
	}
}

// TestColorFramesFit checks that styled (true-color, light and dark)
// frames keep the geometry and that NO_COLOR removes every escape.
func TestColorFramesFit(t *testing.T) {
	for _, light := range []bool{false, true} {
		m := fixtureModel(t, 80, 24)
		th := newTheme(&bytes.Buffer{}, false, light)
		th.r.SetColorProfile(termenv.TrueColor)
		m.ctx.theme = th
		for _, sz := range [][2]int{{80, 24}, {160, 48}, {200, 60}} {
			mm, _ := m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
			v := mm.(Model).View()
			if !strings.Contains(v, "\x1b[") {
				t.Fatalf("light=%v %v: no styles in a color frame", light, sz)
			}
			lines := strings.Split(v, "\n")
			if len(lines) != sz[1] {
				t.Fatalf("light=%v %v: %d lines", light, sz, len(lines))
			}
			for i, l := range lines {
				if widthOf(l) != sz[0] {
					t.Fatalf("light=%v %v: line %d is %d wide", light, sz, i, widthOf(l))
				}
			}
		}
	}
	t.Setenv("NO_COLOR", "1")
	s := loadFixture(t)
	m := NewModel(Options{Header: s.Header}) // NoColor not set: the env var decides
	m.applyEvents(s.Events)
	m.analyzeNow(true)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
	if v := mm.(Model).View(); strings.Contains(v, "\x1b[") {
		t.Error("NO_COLOR=1 frame contains escape sequences")
	}
}

// TestEventFloodIsBatched emits a flood and checks one message carries
// many events (one render per batch, not per event).
func TestEventFloodIsBatched(t *testing.T) {
	bus := trace.NewBus()
	sub := bus.Subscribe()
	defer sub.Cancel()
	const n = 5000
	for i := 0; i < n; i++ {
		bus.Emit(trace.Event{At: time.Duration(i), Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: "x"}})
	}
	bus.Close()
	var msgs, total int
	for {
		msg := waitEvents(sub)().(eventsMsg)
		msgs++
		total += len(msg.evs)
		if msg.closed {
			break
		}
	}
	if total != n {
		t.Fatalf("got %d events, want %d", total, n)
	}
	if msgs > 10 {
		t.Errorf("%d messages for %d queued events: not batched", msgs, n)
	}
}

// twoRunModel is the fixture with a second cold run appended (as `r`
// would add one) ten seconds later: only its cold request, and its
// weights already in the page cache (no eviction, all resident), so its
// diagnosis differs from the first run's.
func twoRunModel(t testing.TB, w, h int) Model {
	t.Helper()
	s := loadFixture(t)
	m := fixtureModel(t, w, h)
	var second []trace.Event
	for _, e := range s.Events {
		switch {
		case e.Kind == trace.KindRequest && e.Request.Phase != trace.PhaseCold:
			continue // the second run has only its cold request
		case e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerEvicted:
			continue
		case e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerResidency:
			mk := *e.Marker
			mk.Attrs = trace.Attrs{"resident_bytes": mk.Attrs["total_bytes"], "total_bytes": mk.Attrs["total_bytes"], "when": "before_launch"}
			e.Marker = &mk
		case e.Kind == trace.KindSample && e.Sample.Source == trace.SourcePageCache:
			sm := *e.Sample
			sm.Values = map[string]float64{trace.MetricResidentBytes: sm.Values[trace.MetricWeightBytes], trace.MetricWeightBytes: sm.Values[trace.MetricWeightBytes]}
			e.Sample = &sm
		}
		e.Run = 1
		e.At += 10 * time.Second
		if e.Kind == trace.KindStage {
			sp := *e.Stage
			sp.Start += 10 * time.Second
			sp.End += 10 * time.Second
			e.Stage = &sp
		}
		if e.Kind == trace.KindRequest {
			q := *e.Request
			q.Sent += 10 * time.Second
			e.Request = &q
		}
		second = append(second, e)
	}
	m.applyEvents(second)
	m.analyzeNow(true)
	return m
}

// TestRunSelection checks the panes follow the latest run until [
// selects the first, and that every pane then shows that run under one
// 1-based numbering: the header, the waterfall, requests and diagnosis
// titles, the diagnosis itself and the session pane's mark.
func TestRunSelection(t *testing.T) {
	m := twoRunModel(t, 160, 48)
	latest := m.st.diagnosis(-1)
	first := sessions.DiagnoseRun(m.st.input.Events(), m.st.runs[0])
	if latest.Dominant == first.Dominant {
		t.Fatalf("the fixture's runs should be diagnosed differently, both %q", latest.Dominant)
	}
	diagTitle := func(d sessions.Diagnosis) string {
		hy, _ := d.Hypothesis(d.Dominant)
		return "diagnosis " + hy.Code + ": " + hy.Title
	}
	v := m.View()
	for _, want := range []string{"run 2/2 · cold", "1 Cold start · run 2/2", "3 Requests · run 2/2", "4 Diagnosis · run 2/2", "▶ 2 ", diagTitle(latest)} {
		if !strings.Contains(v, want) {
			t.Errorf("latest run: frame lacks %q:\n%s", want, v)
		}
	}
	m = press(m, "[")
	v = m.View()
	for _, want := range []string{"run 1/2 · cold", "1 Cold start · run 1/2", "3 Requests · run 1/2", "4 Diagnosis · run 1/2", "▶ 1 ", "warm_5", diagTitle(first), first.Summary[:40]} {
		if !strings.Contains(v, want) {
			t.Errorf("[ (run 1): frame lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, diagTitle(latest)) {
		t.Errorf("[ (run 1): the frame still shows the latest run's diagnosis:\n%s", v)
	}
	m = press(m, "]")
	if m.ctx.runSel != -1 {
		t.Errorf("] past the last run should follow the latest again, runSel=%d", m.ctx.runSel)
	}
}

// TestGoldenRunSelected renders the first of two runs selected with [ at
// the three sizes: one numbering, and that run's diagnosis everywhere.
func TestGoldenRunSelected(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {120, 36}, {160, 48}} {
		name := fmt.Sprintf("run_selected_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			m := press(twoRunModel(t, sz[0], sz[1]), "[")
			if sz[0] < gridMinW {
				m = press(m, "4") // one pane at a time: the diagnosis
			}
			checkGolden(t, name, m.View(), sz[0], sz[1])
		})
	}
}

func TestLogScrollAndFollow(t *testing.T) {
	m := press(fixtureModel(t, 80, 24), "5")
	_ = m.View() // the pane learns its height when drawn, as in the program
	m = press(m, "k", "k", "k")
	v := m.View()
	if !strings.Contains(v, "scrolled · G follows the tail") || strings.Contains(v, "warm_5 prompt") {
		t.Errorf("after scrolling up the tail should be off screen:\n%s", v)
	}
	// New output must not yank a scrolled view back to the tail.
	m.applyEvents([]trace.Event{{At: 6 * time.Second, Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: "late line"}}})
	if v := m.View(); strings.Contains(v, "late line") {
		t.Error("a scrolled log followed new output")
	}
	m = press(m, "G")
	if v := m.View(); !strings.Contains(v, "late line") || !strings.Contains(v, "following the tail") {
		t.Errorf("G should follow the tail again:\n%s", v)
	}
}

// TestRunQuitStopsTarget runs the real program on a pipe: q ends it and
// Run calls Controller.Quit exactly once and cancels the subscription.
func TestRunQuitStopsTarget(t *testing.T) {
	ctl := &fakeCtl{}
	bus := trace.NewBus()
	sub := bus.Subscribe()
	defer bus.Close()
	var out bytes.Buffer
	err := Run(context.Background(), Options{Sub: sub, Controller: ctl, NoColor: true,
		Input: strings.NewReader("q"), Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ctl.calls, ""); got != "q" {
		t.Errorf("controller calls %q, want one q", got)
	}
	if _, open := <-sub.Events(); open {
		t.Error("subscription still open after Run")
	}
}

// TestRunContextCancel ends the program through its context.
func TestRunContextCancel(t *testing.T) {
	ctl := &fakeCtl{}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe() // input that never sends a key
	defer pw.Close()
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := Run(ctx, Options{Controller: ctl, NoColor: true, Input: pr, Output: io.Discard}); err != nil {
		t.Fatalf("cancelled Run: %v", err)
	}
	if got := strings.Join(ctl.calls, ""); got != "q" {
		t.Errorf("controller calls %q, want one q", got)
	}
}

// TestHostileEvents feeds malformed and extreme events: nothing may panic
// and the frame keeps its geometry.
func TestHostileEvents(t *testing.T) {
	m := fixtureModel(t, 160, 48)
	inf := math.Inf(1)
	m.applyEvents([]trace.Event{
		{Kind: trace.KindStage}, // no payload
		{At: -5, Kind: trace.KindLog, Log: &trace.Log{Text: "negative"}}, // invalid offset
		{Kind: "bogus"},
		{At: time.Hour, Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu7", Values: map[string]float64{trace.MetricGPUMemUsed: inf, trace.MetricPCIeRX: math.NaN()}}},
		{At: time.Hour, Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourcePageCache, Values: map[string]float64{trace.MetricResidentBytes: 5, trace.MetricWeightBytes: 0}}},
		{At: time.Hour, Kind: trace.KindStage, Run: 3, Stage: &trace.Span{Name: "not_a_stage", Start: time.Hour, End: time.Hour, Open: true}},
		{At: time.Hour, Kind: trace.KindRequest, Run: 3, Request: &trace.Request{ID: "x", Done: true, Error: "boom", ErrorKind: "http_5xx"}},
		{At: time.Hour, Kind: trace.KindLog, Log: &trace.Log{Text: strings.Repeat("wide 表 ", 500)}},
	})
	m.analyzeNow(true)
	for _, sz := range [][2]int{{80, 24}, {160, 48}} {
		mm, _ := m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
		for p := 0; p < numPanes; p++ {
			m2 := mm.(Model)
			m2.focus = p
			lines := strings.Split(m2.View(), "\n")
			if len(lines) != sz[1] {
				t.Fatalf("%v pane %d: %d lines", sz, p, len(lines))
			}
			for i, l := range lines {
				if widthOf(l) != sz[0] {
					t.Fatalf("%v pane %d line %d: width %d", sz, p, i, widthOf(l))
				}
			}
		}
	}
}

// TestStreamingRequestShown checks a request in flight appears in the
// requests pane and turns the state to probing.
func TestStreamingRequestShown(t *testing.T) {
	m := press(fixtureModel(t, 80, 24), "3")
	m.applyEvents([]trace.Event{{At: 6 * time.Second, Kind: trace.KindRequest, Request: &trace.Request{
		ID: "r9", Label: "warm_6", Phase: trace.PhaseWarm, Sent: 6 * time.Second,
		FirstToken: 12 * time.Millisecond, Tokens: []time.Duration{12 * time.Millisecond, 18 * time.Millisecond}}}})
	m.analyzeNow(false)
	v := m.View()
	if !strings.Contains(v, "warm_6    streaming… TTFT 12.0 ms · 2 tokens so far") || !strings.Contains(v, "● probing") {
		t.Errorf("in-flight request not shown:\n%s", v)
	}
}
