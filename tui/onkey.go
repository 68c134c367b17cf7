package tui

// Key handling: the root keys (focus, zoom, runs, the controller, replay)
// and the dispatch of a focused pane's own keys.

import (
	"fmt"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/trace/stat"
)

func (m Model) notAvailable(what string) string {
	if m.opts.Replay != nil {
		return what + ": not available in replay"
	}
	return what + ": not available (no live target)"
}

func (m Model) onKey(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	k := m.ctx.keys
	// A pane that captures the keyboard (the log's search being typed)
	// gets every key it wants first.
	for _, p := range m.panes {
		if kp, ok := p.(keyedPane); ok && kp.capturing() && kp.onKey(m.ctx, m.st, msg) {
			return m, nil
		}
	}
	if m.showHelp && !key.Matches(msg, k.Quit) {
		// Any key closes the overlay; ? toggles it.
		m.showHelp = false
		return m, nil
	}
	switch {
	case key.Matches(msg, k.Quit):
		// Run stops the target (Controller.Quit) once the UI is gone.
		m.status = "quitting…"
		return m, tea.Quit
	case key.Matches(msg, k.Help):
		m.showHelp = true
	case key.Matches(msg, k.NextPane):
		m.focus = (m.focus + 1) % numPanes
	case key.Matches(msg, k.PrevPane):
		m.focus = (m.focus + numPanes - 1) % numPanes
	case key.Matches(msg, k.Pane):
		m.focus = int(msg.String()[0] - '1')
	case key.Matches(msg, k.Zoom):
		m.zoom = !m.zoom
	case key.Matches(msg, k.PrevRun):
		m.selectRun(-1)
	case key.Matches(msg, k.NextRun):
		m.selectRun(+1)
	case key.Matches(msg, k.Search):
		m.focus = paneLog
		m.log.startSearch()
		return m, nil
	case m.focusedKeys(msg):
		// The focused pane's own keys (the log's scroll and matches).
	case m.scrollKey(msg):
		// A text pane taller than its box (the Diagnosis pane at 80×24).
	case key.Matches(msg, k.ColdRun):
		m.control("new cold run", func(c Controller) string { c.NewColdRun(); return "new cold run started" })
	case key.Matches(msg, k.WarmProbe):
		m.control("warm probe", func(c Controller) string { c.WarmProbe(); return "warm probe sent" })
	case key.Matches(msg, k.Evict):
		m.control("evict and restart", func(c Controller) string {
			c.EvictAndRestart()
			return "evicting the weights and restarting cold"
		})
	case key.Matches(msg, k.SleepWake):
		m.control("sleep and wake", func(c Controller) string {
			sw, ok := c.(SleepWaker)
			if !ok {
				return m.notAvailable("sleep and wake")
			}
			sw.SleepWake()
			return "putting the target to sleep; its wake will be a run of its own"
		})
	case key.Matches(msg, k.Save):
		m.control("save", func(c Controller) string {
			p, err := c.Save()
			if err != nil {
				return "save failed: " + err.Error()
			}
			return "saved " + p
		})
	case key.Matches(msg, k.PauseView):
		m.paused = !m.paused
		if m.paused {
			m.status = "display paused (events are kept) · p resumes"
		} else {
			m.applyEvents(m.pending)
			m.pending = nil
			m.analyzeNow(m.closed)
			m.status = ""
		}
	case key.Matches(msg, k.ReplayPause, k.Faster, k.Slower, k.Back, k.Fwd, k.BackLong, k.FwdLong):
		m.replayKey(msg)
	}
	return m, nil
}

func (m *Model) control(what string, f func(Controller) string) {
	if m.opts.Controller == nil {
		m.status = m.notAvailable(what)
		return
	}
	m.status = f(m.opts.Controller)
}

func (m *Model) selectRun(d int) {
	n := len(m.st.runs)
	if n == 0 {
		return
	}
	cur := m.ctx.runSel
	if cur < 0 || cur >= n {
		cur = n - 1
	}
	cur += d
	switch {
	case cur < 0:
		cur = 0
	case cur >= n-1:
		cur = -1 // back to following the latest run
	}
	m.ctx.runSel = cur
}

// focusedKeys gives msg to the focused pane when it has keys of its own;
// it reports whether the pane took it.
func (m *Model) focusedKeys(msg tea.KeyMsg) bool {
	kp, ok := m.panes[m.focus].(keyedPane)
	return ok && kp.onKey(m.ctx, m.st, msg)
}

func (m *Model) replayKey(msg tea.KeyMsg) {
	r, k := m.opts.Replay, m.ctx.keys
	if r == nil {
		m.status = "replay keys: only in replay"
		return
	}
	seek := func(d time.Duration) {
		to := min(max(r.Position()+d, 0), r.Duration())
		r.Seek(to)
		m.status = "seek to " + stat.FormatDuration(to)
		m.replayDone = false // reaching the end again says so again
	}
	switch {
	case key.Matches(msg, k.ReplayPause):
		r.SetPaused(!r.Paused())
		switch {
		case r.Paused():
			m.status = "replay paused · space resumes"
		case r.Done():
			m.status = replayDoneStatus // nothing left to play
		default:
			m.status = "replay resumed"
		}
	case key.Matches(msg, k.Faster, k.Slower):
		s := r.Speed()
		if s == 0 {
			m.status = "replay runs as fast as possible (--fast)"
			return
		}
		if key.Matches(msg, k.Faster) {
			s *= 2
		} else {
			s /= 2
		}
		r.SetSpeed(s)
		m.status = fmt.Sprintf("speed %g×", r.Speed())
	case key.Matches(msg, k.Back):
		seek(-5 * time.Second)
	case key.Matches(msg, k.Fwd):
		seek(5 * time.Second)
	case key.Matches(msg, k.BackLong):
		seek(-30 * time.Second)
	case key.Matches(msg, k.FwdLong):
		seek(30 * time.Second)
	}
}

// scrollKey moves the focused text pane's scroll offset for ↑/↓, page
// up/down, g and G, and reports whether msg was one of them.
func (m *Model) scrollKey(msg tea.KeyMsg) bool {
	i, k := m.focus, m.ctx.keys
	if !scrollable(i) {
		return false
	}
	page := max(m.ctx.height/3, 1)
	off := m.ctx.scroll[i]
	switch {
	case key.Matches(msg, k.Up):
		off--
	case key.Matches(msg, k.Down):
		off++
	case key.Matches(msg, k.PageUp):
		off -= page
	case key.Matches(msg, k.PageDown):
		off += page
	case key.Matches(msg, k.Top):
		off = 0
	case key.Matches(msg, k.Bottom):
		off = m.ctx.scrollMax[i]
	default:
		return false
	}
	m.ctx.scroll[i] = min(max(off, 0), m.ctx.scrollMax[i])
	return true
}
