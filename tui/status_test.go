package tui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestStatusFromMarkers: the status line says at once why the target is
// not healthy yet, clears it when it is, and says when a run failed.
func TestStatusFromMarkers(t *testing.T) {
	m := NewModel(Options{Header: sessions.Header{Target: sessions.Target{Kind: sessions.TargetAttach, URL: "http://127.0.0.1:1"}}, NoColor: true})
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 200, Height: 40})
	m = mm.(Model)
	marker := func(name string, attrs trace.Attrs) trace.Event {
		return trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: name, Attrs: attrs}}
	}
	feed := func(evs ...trace.Event) {
		mm, _ := m.onEvents(eventsMsg{evs: evs})
		m = mm.(Model)
	}
	feed(marker(trace.MarkerAttached, nil), marker(trace.MarkerHealthWait, trace.Attrs{"url": "http://127.0.0.1:1/health", "reason": "connection refused", "timeout_s": 600.0}))
	want := "no healthy answer at http://127.0.0.1:1/health yet: connection refused; waiting for a server to come up (until --timeout 10m0s)"
	if l := m.frame(200, 40)[1]; !strings.Contains(l, want) {
		t.Errorf("status line %q, want %q", l, want)
	}
	feed(marker(trace.MarkerHealthy, trace.Attrs{"url": "http://127.0.0.1:1", "path": "/health"}))
	if m.status != "" {
		t.Errorf("status %q after healthy, want it cleared", m.status)
	}
	// A status of the user's own (a key's answer) is not cleared by it.
	m.status = "saved to x.jsonl"
	feed(marker(trace.MarkerHealthy, nil))
	if m.status != "saved to x.jsonl" {
		t.Errorf("status %q: healthy cleared a key's answer", m.status)
	}
	fail := marker(trace.MarkerRunFailed, trace.Attrs{"error": "launch run 0: http://127.0.0.1:18181 is taken before the launch: port 18181 is held by pid 4242 (vllm serve)"})
	feed(fail)
	if l := m.frame(200, 40)[1]; !strings.Contains(l, "run 0 failed: launch run 0: http://127.0.0.1:18181 is taken before the launch") {
		t.Errorf("status line %q does not say the run failed", l)
	}
}
