package tui

import (
	"github.com/charmbracelet/bubbles/key"

	"github.com/treni-top/treni-top/sessions"
)

// mode is what the program is attached to; it decides which keys the
// footer and the help offer (a key the mode refuses is not listed) and
// what quitting does.
type mode int

const (
	modeView   mode = iota // a session with nothing behind it (tests, a file)
	modeLive               // run: treni-top started the target
	modeAttach             // attach: a server treni-top did not start
	modeBench              // bench --tui
	modeReplay             // replay
)

// modeOf reads the mode from the options.
func modeOf(o Options) mode {
	switch {
	case o.Replay != nil:
		return modeReplay
	case o.Bench != nil:
		return modeBench
	case o.Controller != nil && o.Header.Target.Kind == sessions.TargetAttach:
		return modeAttach
	case o.Controller != nil:
		return modeLive
	}
	return modeView
}

// keyMap is every key of the program. The help overlay (?) and the footer
// are generated from it, so a key cannot exist without being documented,
// and list only what the mode offers.
type keyMap struct {
	mode                                            mode
	NextPane, PrevPane, Pane, Zoom                  key.Binding
	Up, Down, PageUp, PageDown, Top, Bottom         key.Binding
	Search, NextMatch, PrevMatch                    key.Binding
	ColdRun, WarmProbe, Evict, Save, PauseView      key.Binding
	SleepWake                                       key.Binding
	ReplayPause, Faster, Slower, Back, Fwd          key.Binding
	BackLong, FwdLong, PrevRun, NextRun, Help, Quit key.Binding
}

func newKeyMap(md mode) keyMap {
	quit := "quit"
	switch md {
	case modeLive:
		quit = "quit (stops target)"
	case modeAttach:
		quit = "quit, detach"
	case modeBench:
		quit = "quit, print the report"
	}
	return keyMap{
		mode:        md,
		NextPane:    key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next pane")),
		PrevPane:    key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous pane")),
		Pane:        key.NewBinding(key.WithKeys("1", "2", "3", "4", "5", "6"), key.WithHelp("1–6", "go to pane")),
		Zoom:        key.NewBinding(key.WithKeys("z", "enter"), key.WithHelp("z/enter", "zoom focused pane")),
		Up:          key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "scroll up")),
		Down:        key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "scroll down")),
		PageUp:      key.NewBinding(key.WithKeys("pgup", "ctrl+u"), key.WithHelp("pgup", "page up")),
		PageDown:    key.NewBinding(key.WithKeys("pgdown", "ctrl+d"), key.WithHelp("pgdn", "page down")),
		Top:         key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g/home", "top")),
		Bottom:      key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G/end", "bottom (follow)")),
		Search:      key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "search the log")),
		NextMatch:   key.NewBinding(key.WithKeys("n"), key.WithHelp("n", "next match")),
		PrevMatch:   key.NewBinding(key.WithKeys("N"), key.WithHelp("N", "previous match")),
		ColdRun:     key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "new cold run")),
		WarmProbe:   key.NewBinding(key.WithKeys("w"), key.WithHelp("w", "one warm probe")),
		Evict:       key.NewBinding(key.WithKeys("e"), key.WithHelp("e", "evict weights, restart cold")),
		Save:        key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "save session now")),
		SleepWake:   key.NewBinding(key.WithKeys("Z"), key.WithHelp("Z", "sleep, wake")),
		PauseView:   key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause the display")),
		ReplayPause: key.NewBinding(key.WithKeys(" "), key.WithHelp("space", "pause/resume")),
		Faster:      key.NewBinding(key.WithKeys("+", "="), key.WithHelp("+", "replay faster")),
		Slower:      key.NewBinding(key.WithKeys("-", "_"), key.WithHelp("-", "replay slower")),
		Back:        key.NewBinding(key.WithKeys("left"), key.WithHelp("←", "seek −5 s")),
		Fwd:         key.NewBinding(key.WithKeys("right"), key.WithHelp("→", "seek +5 s")),
		BackLong:    key.NewBinding(key.WithKeys("shift+left"), key.WithHelp("shift+←", "seek −30 s")),
		FwdLong:     key.NewBinding(key.WithKeys("shift+right"), key.WithHelp("shift+→", "seek +30 s")),
		PrevRun:     key.NewBinding(key.WithKeys("["), key.WithHelp("[", "previous run")),
		NextRun:     key.NewBinding(key.WithKeys("]"), key.WithHelp("]", "next run")),
		Help:        key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:        key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", quit)),
	}
}

// ShortHelp is the footer's key list (help.KeyMap), most dispensable
// first: the footer drops from the front when the line is short.
func (k keyMap) ShortHelp() []key.Binding {
	if k.mode == modeReplay {
		return []key.Binding{k.NextPane, k.ReplayPause, k.Help, k.Quit}
	}
	return []key.Binding{k.NextPane, k.Help, k.Quit}
}

// FullHelp is the help overlay, one column per group (help.KeyMap): the
// mode's own keys only (no r/w/e/s in a replay, no seeking in a live run).
func (k keyMap) FullHelp() [][]key.Binding {
	groups := [][]key.Binding{
		{k.NextPane, k.PrevPane, k.Pane, k.Zoom, k.PrevRun, k.NextRun, k.Help, k.Quit},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, k.Search, k.NextMatch, k.PrevMatch},
	}
	var acts []key.Binding
	switch k.mode {
	case modeLive:
		acts = []key.Binding{k.ColdRun, k.WarmProbe, k.Evict, k.SleepWake, k.Save}
	case modeAttach:
		acts = []key.Binding{k.WarmProbe, k.SleepWake, k.Save}
	}
	groups = append(groups, append(acts, k.PauseView))
	if k.mode == modeReplay {
		groups = append(groups, []key.Binding{k.ReplayPause, k.Faster, k.Slower, k.Back, k.Fwd, k.BackLong, k.FwdLong})
	}
	return groups
}
