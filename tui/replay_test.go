package tui

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestReplayFast drives the real program (teatest) from a sessions.Replayer
// with --fast over a bus, as `treni-top replay --fast` does, and checks the
// final frame shows the stages and the TTFTs.
func TestReplayFast(t *testing.T) {
	s := loadFixture(t)
	bus := trace.NewBus()
	sub := bus.Subscribe()
	defer sub.Cancel()
	rp := sessions.NewReplayer(s.Events, sessions.ReplayOptions{Fast: true})
	m := NewModel(Options{Header: s.Header, Sub: sub, Replay: rp, NoColor: true})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(160, 48))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := rp.Run(ctx, bus)
		bus.Close()
		done <- err
	}()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		return bytes.Contains(b, []byte("replay finished"))
	}, teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	fm := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(Model)
	if err := <-done; err != nil {
		t.Fatalf("replayer: %v", err)
	}
	v := fm.View()
	for _, want := range []string{"cuda_init", "page_cache", "decoder_tensor_upload", "graph_capture", "unattributed",
		"cold_1        96.4", "warm_5        12.1", "cold TTFT 96.4 ms", "replay ▶ fast 5.60 s / 5.60 s"} {
		if !strings.Contains(v, want) {
			t.Errorf("final replay frame lacks %q:\n%s", want, v)
		}
	}
	// The replayed session must analyze exactly like the file.
	if got, want := len(fm.st.runs), len(sessions.Analyze(s.Events)); got != want {
		t.Errorf("replayed runs %d, file runs %d", got, want)
	}
	if fm.st.version > 40 {
		t.Errorf("%d analyses for one fast replay: the throttle is not working", fm.st.version)
	}
}

// TestReplaySeekBackResets replays, seeks back, and checks the model
// forgot and re-applied the session (MarkerReplayReset).
func TestReplaySeekBackResets(t *testing.T) {
	s := loadFixture(t)
	bus := trace.NewBus()
	sub := bus.Subscribe()
	defer sub.Cancel()
	rp := sessions.NewReplayer(s.Events, sessions.ReplayOptions{Speed: 1})
	rp.SetPaused(true)
	rp.Seek(3 * time.Second)
	m := NewModel(Options{Header: s.Header, Sub: sub, Replay: rp, NoColor: true})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(160, 48))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = rp.Run(ctx, bus) }()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("cold_1")) },
		teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	tm.Send(tea.KeyMsg{Type: tea.KeyLeft}) // back 5 s: a reset, then replay to 0
	// After the reset only the events at offset 0 are replayed: no run yet.
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("● waiting")) },
		teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	fm := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(Model)
	cancel()
	bus.Close()
	if !rp.Paused() {
		t.Error("replay should still be paused")
	}
	if fm.st.resets != 1 || len(fm.st.runs) != 0 {
		t.Errorf("after seeking back: %d resets, %d runs; want 1 reset and no run", fm.st.resets, len(fm.st.runs))
	}
}

func benchModel(b *testing.B, color bool) Model {
	m := fixtureModel(b, 160, 48)
	if color {
		th := newTheme(&bytes.Buffer{}, false, false)
		th.r.SetColorProfile(termenv.TrueColor)
		m.ctx.theme = th
	}
	return m
}

// BenchmarkRender160x48 renders a full 160×48 frame (the grid of every
// pane) from the fixture, colorless as in the goldens, with nothing
// memoized from the frame before.
func BenchmarkRender160x48(b *testing.B) {
	m := benchModel(b, false)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.ctx.dropMemos()
		_ = m.View()
	}
}

// BenchmarkRender160x48Unchanged redraws a frame whose state did not
// change (a clock tick or a batch of flat samples on an idle target).
func BenchmarkRender160x48Unchanged(b *testing.B) {
	m := benchModel(b, false)
	_ = m.View()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = m.View()
	}
}

// BenchmarkRender160x48Color is the same frame with true-color styles.
func BenchmarkRender160x48Color(b *testing.B) {
	m := benchModel(b, true)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.ctx.dropMemos()
		_ = m.View()
	}
}

// BenchmarkLogTail20k is a frame with the log pane zoomed over a 20,000-line
// buffer while 100 new lines arrive per frame: the cost must not grow with
// the buffer.
func BenchmarkLogTail20k(b *testing.B) {
	m := press(benchModel(b, false), "5", "z")
	line := trace.Event{Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: "INFO 11-22 03:00:01 engine.py:412 Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 812.3 tokens/s"}}
	batch := make([]trace.Event, 100)
	for i := range batch {
		batch[i] = line
	}
	for i := 0; i < 200; i++ {
		m.applyEvents(batch)
	}
	_ = m.View()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.applyEvents(batch)
		_ = m.View()
	}
}
