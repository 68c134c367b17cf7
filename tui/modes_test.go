package tui

// What the screen offers in each mode (live run, attach, bench, replay),
// the replay's controls and end, the log's wrapping and the Session
// pane's file: frames checked by content and recorded as goldens at
// 80×24, 120×36 and 160×48.

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// goldenSizes are the three sizes every fix of issue 45 is recorded at.
var goldenSizes = [][2]int{{80, 24}, {120, 36}, {160, 48}}

// sized returns m at w×h.
func sized(m Model, w, h int) Model {
	mm, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return mm.(Model)
}

// modeModel is the fixture under each mode's options.
func modeModel(t testing.TB, md mode, w, h int) Model {
	t.Helper()
	s := loadFixture(t)
	o := Options{Header: s.Header, NoColor: true, File: fixtureFile}
	switch md {
	case modeLive:
		o.Controller = &fakeCtl{}
	case modeAttach:
		o.Controller = &fakeCtl{}
		o.Header.Target = sessions.Target{Kind: sessions.TargetAttach, URL: "http://127.0.0.1:8000", Model: "demo/qwen3-0.6b"}
	case modeBench:
		o.Bench = &fakeBench{}
		o.Header = benchHeader()
	case modeReplay:
		o.Replay = sessions.NewReplayer(s.Events, sessions.ReplayOptions{Speed: 1})
	}
	m := NewModel(o)
	if md != modeBench {
		m.applyEvents(s.Events)
	} else {
		m.applyEvents(benchEvents())
	}
	m.analyzeNow(true)
	return sized(m, w, h)
}

var modeNames = map[mode]string{modeView: "view", modeLive: "live", modeAttach: "attach", modeBench: "bench", modeReplay: "replay"}

// TestFooterAndHelpByMode: the footer and the help overlay list what the
// mode offers and nothing it refuses; the tab bar names every pane at
// 80×24.
func TestFooterAndHelpByMode(t *testing.T) {
	for md, name := range modeNames {
		for _, sz := range goldenSizes {
			m := modeModel(t, md, sz[0], sz[1])
			lines := strings.Split(m.View(), "\n")
			footer := lines[len(lines)-1]
			if strings.Contains(footer, "stops target") != (md == modeLive) {
				t.Errorf("%s %v: footer %q (only a live run stops its target on q)", name, sz, footer)
			}
			for i := 0; i < numPanes; i++ {
				full := fmt.Sprintf("%d %s", i+1, m.pane(i).title())
				short := fmt.Sprintf("%d %s", i+1, shortTitle(m.pane(i).title()))
				if !strings.Contains(footer, full) && !strings.Contains(footer, short) {
					t.Errorf("%s %v: the tab bar lacks %q: %q", name, sz, short, footer)
				}
			}
			help := press(m, "?").View()
			offered := map[string]bool{
				"new cold run": md == modeLive, "evict weights, restart cold": md == modeLive,
				"one warm probe": md == modeLive || md == modeAttach, "save session now": md == modeLive || md == modeAttach,
				"sleep, wake": md == modeLive || md == modeAttach,
				"seek −30 s":  md == modeReplay, "replay faster": md == modeReplay, "pause/resume": md == modeReplay,
				"previous run": true, "search the log": true,
			}
			for desc, want := range offered {
				if strings.Contains(help, desc) != want {
					t.Errorf("%s %v: help lists %q = %v, want %v:\n%s", name, sz, desc, !want, want, help)
				}
			}
		}
	}
}

// TestGoldenHelpByMode records the help overlay of a replay at the three
// sizes and of a live run at 120×36.
func TestGoldenHelpByMode(t *testing.T) {
	for _, sz := range goldenSizes {
		name := fmt.Sprintf("help_replay_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			checkGolden(t, name, press(modeModel(t, modeReplay, sz[0], sz[1]), "?").View(), sz[0], sz[1])
		})
	}
	checkGolden(t, "help_live_120x36", press(modeModel(t, modeLive, 120, 36), "?").View(), 120, 36)
}

// collect is a trace.Sink that keeps what a replayer emits.
type collect struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (c *collect) Emit(e trace.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, e)
}

// pausedReplay is a replay of the fixture at 2× paused at 3 s: a real
// Replayer, running, that has emitted what precedes 3 s.
func pausedReplay(t *testing.T, w, h int) Model {
	t.Helper()
	s := loadFixture(t)
	rp := sessions.NewReplayer(s.Events, sessions.ReplayOptions{Speed: 2, WaitAtEnd: true})
	rp.SetPaused(true)
	sink := &collect{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rp.Run(ctx, sink)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	rp.Seek(3 * time.Second)
	for deadline := time.Now().Add(10 * time.Second); rp.Position() != 3*time.Second; {
		if time.Now().After(deadline) {
			t.Fatalf("the replayer did not seek to 3 s (at %v)", rp.Position())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := NewModel(Options{Header: s.Header, NoColor: true, Replay: rp, File: fixtureFile})
	sink.mu.Lock()
	m.applyEvents(sink.evs)
	sink.mu.Unlock()
	m.analyzeNow(true)
	return sized(m, w, h)
}

// TestGoldenReplayPaused: the replay's state (paused, speed, position of
// the session's length) is in the header at every size, 80×24 included.
func TestGoldenReplayPaused(t *testing.T) {
	for _, sz := range goldenSizes {
		name := fmt.Sprintf("replay_paused_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			m := pausedReplay(t, sz[0], sz[1])
			v := m.View()
			if !strings.Contains(strings.Split(v, "\n")[0], "replay ⏸ paused 2× 3.00 s / 5.60 s") {
				t.Errorf("header lacks the replay state:\n%s", v)
			}
			checkGolden(t, name, v, sz[0], sz[1])
		})
	}
}

// TestReplaySpaceFeedback: space pauses and resumes with a word in the
// status line and a changed indicator, at 80×24.
func TestReplaySpaceFeedback(t *testing.T) {
	m := pausedReplay(t, 80, 24)
	m = press(m, " ")
	v := m.View()
	if !strings.Contains(v, "replay resumed") || !strings.Contains(v, "replay ▶ 2×") {
		t.Errorf("space on a paused replay:\n%s", v)
	}
	m = press(m, " ")
	if v := m.View(); !strings.Contains(v, "replay paused · space resumes") || !strings.Contains(v, "replay ⏸ paused 2×") {
		t.Errorf("space on a playing replay:\n%s", v)
	}
}

// finishedReplay is a replay of the fixture that has played to its end
// and waits there (WaitAtEnd), as the TUI sees it after a tick.
func finishedReplay(t *testing.T, w, h int) Model {
	t.Helper()
	s := loadFixture(t)
	rp := sessions.NewReplayer(s.Events, sessions.ReplayOptions{Fast: true, WaitAtEnd: true})
	sink := &collect{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rp.Run(ctx, sink)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	for deadline := time.Now().Add(10 * time.Second); !rp.Done(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replay did not reach its end")
		}
	}
	m := NewModel(Options{Header: s.Header, NoColor: true, Replay: rp, File: "session.jsonl"})
	sink.mu.Lock()
	m.applyEvents(sink.evs)
	sink.mu.Unlock()
	mm, _ := sized(m, w, h).Update(tickMsg{})
	return mm.(Model)
}

// TestGoldenReplayFinished: a replay at its end says so, with how to
// rewind it, at every size.
func TestGoldenReplayFinished(t *testing.T) {
	for _, sz := range goldenSizes {
		name := fmt.Sprintf("replay_finished_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			v := finishedReplay(t, sz[0], sz[1]).View()
			if !strings.Contains(v, replayDoneStatus) || !strings.Contains(v, "5.60 s / 5.60 s") {
				t.Errorf("finished replay:\n%s", v)
			}
			checkGolden(t, name, v, sz[0], sz[1])
		})
	}
}

// TestReplaySpaceAtEnd: pausing and resuming a replay that is at its end
// says it is finished again, not "resumed" with nothing left to play.
func TestReplaySpaceAtEnd(t *testing.T) {
	m := press(finishedReplay(t, 80, 24), " ")
	if m.status != "replay paused · space resumes" {
		t.Errorf("space at the end: status %q", m.status)
	}
	if m = press(m, " "); m.status != replayDoneStatus {
		t.Errorf("space again at the end: status %q, want %q", m.status, replayDoneStatus)
	}
}

// TestReplayRewindAfterEnd plays a replay to its end in the real program:
// the clock stops at the session's length, the status says it is over,
// and shift+← still rewinds (the replayer waits at the end for a seek).
func TestReplayRewindAfterEnd(t *testing.T) {
	s := loadFixture(t)
	rp := sessions.NewReplayer(s.Events, sessions.ReplayOptions{Speed: 64, WaitAtEnd: true})
	sub, stop := rp.Play(context.Background())
	defer stop()
	m := NewModel(Options{Header: s.Header, Sub: sub, Replay: rp, NoColor: true})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(120, 36))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("replay finished · ← or shift+← rewinds")) },
		teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	time.Sleep(200 * time.Millisecond) // at 64×, well past the end on the wall clock
	if p := rp.Position(); p != rp.Duration() {
		t.Errorf("position %v after the end, want the session's length %v", p, rp.Duration())
	}
	tm.Send(tea.KeyMsg{Type: tea.KeyShiftLeft})
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("seek to 0")) },
		teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	// The rewound replay plays to the end again.
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("replay finished · ← or shift+← rewinds")) },
		teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	fm := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(Model)
	if fm.st.resets != 1 || len(fm.st.runs) != 1 || len(fm.st.runs[0].Requests) != 7 {
		t.Errorf("after the rewind: %d resets, %d runs; want 1 reset and the whole session again", fm.st.resets, len(fm.st.runs))
	}
	if v := fm.View(); !strings.Contains(v, "5.60 s / 5.60 s") {
		t.Errorf("the header should stop at the session's length:\n%s", v)
	}
}

// longLine is a server log line wider than any pane.
const longLine = "INFO 11-22 03:00:01 [gpu_model_runner.py:1412] Model loading took 1.1201 GiB and 0.612 seconds; " +
	"KV cache blocks: 4096 (65536 tokens), maximum concurrency for 4096 tokens per request: 16.00x, cuda graph sizes [1, 2, 4, 8, 16, 32, 64, 128]"

// TestGoldenLogWrap: a line longer than the log pane wraps under its text
// instead of being cut, focused and zoomed at every size.
func TestGoldenLogWrap(t *testing.T) {
	for _, sz := range goldenSizes {
		name := fmt.Sprintf("log_wrap_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			m := fixtureModel(t, sz[0], sz[1])
			m.applyEvents([]trace.Event{{At: 5700 * time.Millisecond, Kind: trace.KindLog, Log: &trace.Log{Stream: "stderr", Text: longLine}}})
			m = press(m, "5")
			if sz[0] >= gridMinW {
				m = press(m, "z")
			}
			v := m.View()
			var text []string
			for _, l := range strings.Split(v, "\n") {
				if !strings.HasPrefix(l, "║") {
					continue // not the log pane
				}
				l = strings.Trim(l, "║ ")
				if strings.Contains(l, "…") {
					t.Errorf("a log row is cut: %q", l)
				}
				text = append(text, l)
			}
			if flat := strings.Join(strings.Fields(strings.Join(text, " ")), " "); !strings.Contains(flat, longLine) {
				t.Errorf("the long line is not all on screen:\n%s", v)
			}
			checkGolden(t, name, v, sz[0], sz[1])
		})
	}
}

// TestSessionPaneFile: the Session pane says which file the session is
// recorded to (or replayed from), and when it is not recorded.
func TestSessionPaneFile(t *testing.T) {
	s := loadFixture(t)
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Controller: &fakeCtl{}, File: fixtureFile}, "recording " + fixtureFile},
		{Options{Controller: &fakeCtl{}}, "not recorded (--no-record)"},
		{Options{Replay: sessions.NewReplayer(s.Events, sessions.ReplayOptions{}), File: "s.jsonl"}, "replaying s.jsonl"},
	} {
		c.o.Header, c.o.NoColor = s.Header, true
		m := press(sized(NewModel(c.o), 160, 48), "6", "z")
		if v := m.View(); !strings.Contains(v, c.want) {
			t.Errorf("session pane lacks %q:\n%s", c.want, v)
		}
	}
	// Narrow: the directory is cut from the left, the file's name stays.
	m := press(sized(NewModel(Options{Header: s.Header, NoColor: true, Controller: &fakeCtl{}, File: fixtureFile}), 60, 24), "6")
	if v := m.View(); !strings.Contains(v, "recording …") || !strings.Contains(v, "20261122-030000-treni.jsonl") {
		t.Errorf("narrow session pane:\n%s", v)
	}
}

// TestGoldenLiveSession records a live run's screen at the three sizes:
// the Session pane names the file being recorded, the footer says q stops
// the target.
func TestGoldenLiveSession(t *testing.T) {
	for _, sz := range goldenSizes {
		name := fmt.Sprintf("live_%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			m := modeModel(t, modeLive, sz[0], sz[1])
			if sz[0] < gridMinW {
				m = press(m, "6")
			}
			checkGolden(t, name, m.View(), sz[0], sz[1])
		})
	}
}

// TestGoldenBenchSession records a bench session's requests and diagnosis:
// the requests are named readably (continuous_batching…/6, not
// continuou…), and F says the requests were sent alone.
func TestGoldenBenchSession(t *testing.T) {
	for _, sz := range goldenSizes {
		for _, p := range []struct {
			key, name string
		}{{"3", "requests"}, {"4", "diagnosis"}} {
			name := fmt.Sprintf("bench_%s_%dx%d", p.name, sz[0], sz[1])
			t.Run(name, func(t *testing.T) {
				m := press(benchSessionModel(t, sz[0], sz[1]), p.key)
				if sz[0] >= gridMinW {
					m = press(m, "z")
				}
				v := m.View()
				switch p.name {
				case "requests":
					if !strings.Contains(v, "continuous_batc") || !strings.Contains(v, "…/5 ") && !strings.Contains(v, "continuous_batching/r2/5 ") {
						t.Errorf("bench request names unreadable:\n%s", v)
					}
				case "diagnosis":
					// At 80×24 F's row is below the pane.
					if strings.Contains(v, "≤0") || sz[0] >= gridMinW && !strings.Contains(v, "every one sent alone") {
						t.Errorf("bench diagnosis:\n%s", v)
					}
				}
				checkGolden(t, name, v, sz[0], sz[1])
			})
		}
	}
}
