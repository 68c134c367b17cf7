package tui

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/trace"
)

// fixtureRunCopy is the fixture's cold run as run index run, shifted by
// off: another cold start of the same target with its cold request only.
func fixtureRunCopy(t *testing.T, run int, off time.Duration) []trace.Event {
	t.Helper()
	var out []trace.Event
	for _, e := range loadFixture(t).Events {
		if e.Kind == trace.KindRequest && e.Request.Phase != trace.PhaseCold {
			continue
		}
		e.Run = run
		e.At += off
		switch e.Kind {
		case trace.KindStage:
			sp := *e.Stage
			sp.Start += off
			sp.End += off
			e.Stage = &sp
		case trace.KindRequest:
			q := *e.Request
			q.Sent += off
			e.Request = &q
		}
		out = append(out, e)
	}
	return out
}

// TestHeaderColdRunSeries: a session of `run --cold-runs 3` says which of
// the three cold runs the panes show, "cold run 2/3" while the second is
// the latest, and counts on past the series when r adds a run.
func TestHeaderColdRunSeries(t *testing.T) {
	h := loadFixture(t).Header
	h.ColdRuns = 3
	m := NewModel(Options{Header: h, NoColor: true})
	m.applyEvents(loadFixture(t).Events)
	m.applyEvents(fixtureRunCopy(t, 1, 10*time.Second))
	m.analyzeNow(true)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
	m = mm.(Model)
	checkGolden(t, "header_cold_runs_160x2", strings.Join(m.frame(160, 48)[:2], "\n"), 160, 2)

	if l := m.frame(160, 48)[1]; !strings.HasPrefix(l, "cold run 2/3 · ") {
		t.Errorf("header line %q, want it to start with cold run 2/3", l)
	}
	m = press(m, "[")
	if l := m.frame(160, 48)[1]; !strings.HasPrefix(l, "cold run 1/3 · ") {
		t.Errorf("after [: header line %q, want cold run 1/3", l)
	}
	m = press(m, "]")
	m.applyEvents(fixtureRunCopy(t, 2, 20*time.Second))
	m.applyEvents(fixtureRunCopy(t, 3, 30*time.Second))
	m.analyzeNow(true)
	if l := m.frame(160, 48)[1]; !strings.HasPrefix(l, "cold run 4/4 · ") {
		t.Errorf("a run added after the series: header line %q, want cold run 4/4", l)
	}

	// Without a series the header keeps counting the runs seen.
	if l := fixtureModel(t, 160, 48).frame(160, 48)[1]; !strings.HasPrefix(l, "run 1/1 · ") {
		t.Errorf("a single run: header line %q, want run 1/1", l)
	}
}
