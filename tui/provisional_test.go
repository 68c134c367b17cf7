package tui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestDiagnosisProvisionalWhileColdWindowOpen: while the latest run has
// its stages but not its cold request's first token, the header and the
// Diagnosis pane say the ranking is of the window so far instead of
// calling a cause dominant; once the first token arrives, or once no more
// events can come (the stream ended), the verdict is shown as one.
func TestDiagnosisProvisionalWhileColdWindowOpen(t *testing.T) {
	all := loadFixture(t).Events
	var early []trace.Event
	for _, e := range all {
		if e.Kind == trace.KindRequest && e.Request.Phase == trace.PhaseCold && e.Request.FirstToken > 0 {
			break
		}
		early = append(early, e)
	}
	if len(early) == len(all) {
		t.Fatal("the fixture has no cold request with a first token")
	}
	open := func(evs []trace.Event) Model {
		m := NewModel(Options{Header: loadFixture(t).Header, NoColor: true})
		m.applyEvents(evs)
		m.analyzeNow(true)
		mm, _ := m.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
		return mm.(Model)
	}
	m := open(early)
	if r, ok := m.st.run(-1); !ok || r.ColdEndKind == sessions.ColdEndFirstToken || r.ColdEndKind == sessions.ColdEndNone {
		t.Fatalf("the fixture's prefix has cold window %q, want one begun but not at its first token", r.ColdEndKind)
	}
	if m.st.diagnosis(-1).Dominant == "" {
		t.Fatal("the prefix ranks no cause: nothing for the header to hold back")
	}
	head := m.frame(160, 48)[1]
	if strings.Contains(head, "diagnosis ") || !strings.Contains(head, "leading so far ") {
		t.Errorf("header while the cold window is open: %q, want \"leading so far\" and no \"diagnosis\"", head)
	}
	m.focus = paneDiagnosis
	m = press(m, "z")
	if screen := strings.Join(m.frame(160, 48), "\n"); !strings.Contains(screen, "cold start in progress") {
		t.Errorf("Diagnosis pane while the cold window is open does not say so:\n%s", screen)
	}

	for name, m := range map[string]Model{"first token": open(all), "stream ended": func() Model {
		m := open(early)
		m.closed = true
		return m
	}()} {
		head := m.frame(160, 48)[1]
		if !strings.Contains(head, "diagnosis ") || strings.Contains(head, "so far") {
			t.Errorf("%s: header %q, want the diagnosis as a verdict", name, head)
		}
		m.focus = paneDiagnosis
		m = press(m, "z")
		if screen := strings.Join(m.frame(160, 48), "\n"); strings.Contains(screen, "cold start in progress") {
			t.Errorf("%s: the Diagnosis pane still says the cold start is in progress", name)
		}
	}
}

// TestDiagnosisPaneScrolls: at 80×24 the Diagnosis pane holds more lines
// than its box; it says how many are below, ↓/j and G reach them, and g
// returns to the top. A pane that fits (zoomed on a tall terminal) shows
// no scroll line.
func TestDiagnosisPaneScrolls(t *testing.T) {
	m := NewModel(Options{Header: loadFixture(t).Header, NoColor: true})
	m.applyEvents(loadFixture(t).Events)
	m.analyzeNow(true)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	m = press(mm.(Model), "4")
	pane := func(m Model) []string {
		f := m.frame(80, 24)
		return f[3 : len(f)-2] // inside the focused pane's box, below the header
	}
	top := pane(m)
	if !strings.Contains(top[len(top)-1], "more lines (") || strings.Contains(top[0], "above") {
		t.Fatalf("top of the pane: first %q, last %q; want a 'more' line last and none above", top[0], top[len(top)-1])
	}
	m = press(m, "j")
	if one := pane(m); !strings.Contains(one[0], "↑ 1 line above") || one[1] != top[2] {
		t.Errorf("after j: first rows %q, %q; want '↑ 1 line above' then the third line of the top view %q", one[0], one[1], top[2])
	}
	m = press(m, "G")
	bottom := pane(m)
	if strings.Contains(bottom[len(bottom)-1], "more (") || !strings.Contains(bottom[0], "above") {
		t.Errorf("after G: first %q, last %q; want the end shown", bottom[0], bottom[len(bottom)-1])
	}
	m = press(m, "j") // past the end stays at the end
	if got := pane(m); strings.Join(got, "\n") != strings.Join(bottom, "\n") {
		t.Error("j at the bottom moved the pane")
	}
	m = press(m, "g")
	if got := pane(m); strings.Join(got, "\n") != strings.Join(top, "\n") {
		t.Error("g did not return to the top")
	}
	mm, _ = m.Update(tea.WindowSizeMsg{Width: 200, Height: 120})
	for _, l := range press(mm.(Model), "z").frame(200, 120) {
		if strings.Contains(l, "more (") && strings.Contains(l, "↓/j") {
			t.Errorf("a pane that fits its box shows %q", l)
		}
	}
}
