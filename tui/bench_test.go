package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// benchHeader is a bench session's header, fixed for byte-stable goldens.
func benchHeader() sessions.Header {
	return sessions.Header{
		Format: sessions.FormatName, Version: sessions.FormatVersion, ToolVersion: "0.1.0-dev",
		Created: fixtureCreated,
		Target:  sessions.Target{Kind: sessions.TargetBench, URL: "http://127.0.0.1:8000", Model: "demo/qwen3-0.6b", Device: "cpu"},
	}
}

// benchEvents is a recorded bench: run 1 of continuous_batching finished
// (10 requests, sent one after the other), run 2 under way (6 done, one of
// them failed, one streaming).
func benchEvents() []trace.Event {
	var evs []trace.Event
	start := func(at time.Duration, run int) {
		evs = append(evs, trace.Event{At: at, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchStart, Attrs: trace.Attrs{
			"workload": "continuous_batching", "run": float64(run), "warmup": false, "repeats": float64(2), "requests": float64(10),
		}}})
	}
	req := func(run, i int, sent time.Duration, fail, done bool) {
		// Labels as probe/load writes them: workload/run tag/index.
		q := &trace.Request{ID: fmt.Sprintf("r%d-%d", run, i), Label: fmt.Sprintf("continuous_batching/r%d/%d", run, i), Phase: trace.PhaseBench,
			Endpoint: "chat", Sent: sent, Status: 200, PromptTokens: 256}
		if fail {
			q.Status, q.Error, q.ErrorKind, q.End, q.Done = 500, "HTTP 500", "http_5xx", 30*time.Millisecond, true
			evs = append(evs, trace.Event{At: sent + q.End, Kind: trace.KindRequest, Request: q})
			return
		}
		q.FirstByte = time.Duration(70+3*i) * time.Millisecond
		q.FirstToken = time.Duration(80+3*i) * time.Millisecond
		n := 64
		if !done {
			n = 20
		}
		for k := 0; k < n; k++ {
			q.Tokens = append(q.Tokens, q.FirstToken+time.Duration(k*15+k%3)*time.Millisecond)
		}
		at := sent + q.Tokens[n-1]
		if done {
			q.End, q.CompletionTokens, q.Done = q.Tokens[n-1]+2*time.Millisecond, n, true
			at = sent + q.End
		}
		evs = append(evs, trace.Event{At: at, Kind: trace.KindRequest, Request: q})
	}
	start(500*time.Millisecond, 1)
	t := 500 * time.Millisecond
	for i := 0; i < 10; i++ {
		req(1, i, t+time.Millisecond, false, true)
		t += 1100 * time.Millisecond
	}
	evs = append(evs, trace.Event{At: t, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchEnd, Attrs: trace.Attrs{"workload": "continuous_batching", "run": float64(1)}}})
	t += 200 * time.Millisecond
	start(t, 2)
	for i := 0; i < 7; i++ {
		req(2, i, t+time.Millisecond, i == 3, i < 6)
		t += 1100 * time.Millisecond
	}
	return evs
}

func benchSessionModel(t testing.TB, w, h int) Model {
	t.Helper()
	m := NewModel(Options{Header: benchHeader(), NoColor: true})
	m.applyEvents(benchEvents())
	m.analyzeNow(true)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return mm.(Model)
}

// TestGoldenBenchPane renders the bench pane of a recorded bench session:
// focused at 80×24, zoomed at 160×48.
func TestGoldenBenchPane(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {160, 48}} {
		name := fmt.Sprintf("bench_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			m := press(benchSessionModel(t, sz[0], sz[1]), "1")
			if sz[0] >= gridMinW {
				m = press(m, "z")
			}
			checkGolden(t, name, m.View(), sz[0], sz[1])
		})
	}
}

// TestBenchFromEvents checks the figures the pane computes from recorded
// events, independently of the goldens.
func TestBenchFromEvents(t *testing.T) {
	m := benchSessionModel(t, 160, 48)
	if !m.benchActive() {
		t.Fatal("bench_start markers should select the bench pane")
	}
	s, _, _, _, hist, ok := m.benchView()
	if !ok {
		t.Fatal("no bench status")
	}
	if s.Workload != "continuous_batching" || s.Repeat != 2 || s.Repeats != 2 || s.Total != 10 {
		t.Errorf("run: %+v", s)
	}
	if s.Sent != 7 || s.Done != 6 || s.Failed != 1 || s.InFlight != 1 || s.OutputTokens != 5*64 {
		t.Errorf("counts: sent %d done %d failed %d in flight %d tokens %d", s.Sent, s.Done, s.Failed, s.InFlight, s.OutputTokens)
	}
	if s.TTFT.N != 5 || s.TTFT.P50 != 86*time.Millisecond || s.ITL.N != 5*63 {
		t.Errorf("quantiles: ttft %+v itl %+v", s.TTFT, s.ITL)
	}
	if len(hist) == 0 {
		t.Error("no tok/s history")
	}
	grid := m.View()
	for _, want := range []string{"1 Bench", "continuous_batching · repeat 2/2", "6/10", "failed 1", "TTFT", "ITL", "output (tok/s)", "in flight 1"} {
		if !strings.Contains(grid, want) {
			t.Errorf("160×48 grid lacks %q:\n%s", want, grid)
		}
	}
	// A session without bench markers keeps the waterfall.
	if fixtureModel(t, 80, 24).benchActive() {
		t.Error("a cold-start session must not show the bench pane")
	}
}

type fakeBench struct{ s BenchStatus }

func (f *fakeBench) BenchSnapshot() BenchStatus { return f.s }

// TestBenchLive drives the pane from a live BenchProgress: the current
// rate is the difference between two snapshots.
func TestBenchLive(t *testing.T) {
	fb := &fakeBench{}
	m := NewModel(Options{Header: benchHeader(), NoColor: true, Bench: fb})
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	m = mm.(Model)
	if !strings.Contains(m.View(), "waiting for the first bench run") {
		t.Errorf("before the first snapshot:\n%s", m.View())
	}
	fb.s = BenchStatus{Workload: "chunked_prefill", Repeat: 1, Repeats: 3, Total: 48, Sent: 20, Done: 12, InFlight: 8,
		Elapsed: 4 * time.Second, OutputTokens: 2000, OutputTokPerSec: 500, ReqPerSec: 3,
		TTFT: BenchQuantiles{N: 12, P50: 150 * time.Millisecond, P90: 300 * time.Millisecond, P99: 420 * time.Millisecond},
		ITL:  BenchQuantiles{N: 1900, P50: 12 * time.Millisecond, P90: 20 * time.Millisecond, P99: 41 * time.Millisecond}}
	mm, cmd := m.Update(benchTickMsg{})
	m = mm.(Model)
	if cmd == nil {
		t.Error("the bench tick must re-arm")
	}
	fb.s.Elapsed, fb.s.OutputTokens, fb.s.Done, fb.s.Sent = 6*time.Second, 3600, 16, 24
	mm, _ = m.Update(benchTickMsg{})
	m = mm.(Model)
	v := m.View()
	for _, want := range []string{"chunked_prefill · repeat 1/3", "16/48", "800.0 tok/s · 2.00 req/s", "150", "420", "41.0", "1900"} {
		if !strings.Contains(v, want) {
			t.Errorf("live frame lacks %q:\n%s", want, v)
		}
	}
}

// TestBenchPaneEverySizeFits draws the bench pane at many sizes: every
// frame has exactly the terminal's lines and columns.
func TestBenchPaneEverySizeFits(t *testing.T) {
	base := benchSessionModel(t, 80, 24)
	for _, w := range []int{20, 41, 60, 80, 119, 120, 160, 200} {
		for _, h := range []int{5, 10, 24, 36, 48, 60} {
			for _, zoom := range []bool{false, true} {
				mm, _ := base.Update(tea.WindowSizeMsg{Width: w, Height: h})
				m := mm.(Model)
				m.zoom = zoom
				lines := strings.Split(m.View(), "\n")
				if len(lines) != h {
					t.Fatalf("%d×%d zoom %v: %d lines", w, h, zoom, len(lines))
				}
				for i, l := range lines {
					if widthOf(l) != w {
						t.Fatalf("%d×%d zoom %v line %d: %d cells", w, h, zoom, i, widthOf(l))
					}
				}
			}
		}
	}
}
