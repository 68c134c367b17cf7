package tui

import "github.com/charmbracelet/bubbles/key"

// keyMap is every key of the program. The help overlay (?) and the footer
// are generated from it, so a key cannot exist without being documented.
type keyMap struct {
	NextPane, PrevPane, Pane, Zoom                  key.Binding
	Up, Down, PageUp, PageDown, Top, Bottom         key.Binding
	Search, NextMatch, PrevMatch                    key.Binding
	ColdRun, WarmProbe, Evict, Save, PauseView      key.Binding
	SleepWake                                       key.Binding
	ReplayPause, Faster, Slower, Back, Fwd          key.Binding
	BackLong, FwdLong, PrevRun, NextRun, Help, Quit key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
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
		ReplayPause: key.NewBinding(key.WithKeys(" "), key.WithHelp("space", "pause replay")),
		Faster:      key.NewBinding(key.WithKeys("+", "="), key.WithHelp("+", "replay faster")),
		Slower:      key.NewBinding(key.WithKeys("-", "_"), key.WithHelp("-", "replay slower")),
		Back:        key.NewBinding(key.WithKeys("left"), key.WithHelp("←", "seek −5 s")),
		Fwd:         key.NewBinding(key.WithKeys("right"), key.WithHelp("→", "seek +5 s")),
		BackLong:    key.NewBinding(key.WithKeys("shift+left"), key.WithHelp("shift+←", "seek −30 s")),
		FwdLong:     key.NewBinding(key.WithKeys("shift+right"), key.WithHelp("shift+→", "seek +30 s")),
		PrevRun:     key.NewBinding(key.WithKeys("["), key.WithHelp("[", "previous run")),
		NextRun:     key.NewBinding(key.WithKeys("]"), key.WithHelp("]", "next run")),
		Help:        key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:        key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit (stops target)")),
	}
}

// ShortHelp is the footer's key list (help.KeyMap).
func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.NextPane, k.Help, k.Quit}
}

// FullHelp is the help overlay, one column per group (help.KeyMap).
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.NextPane, k.PrevPane, k.Pane, k.Zoom, k.PrevRun, k.NextRun, k.Help, k.Quit},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, k.Search, k.NextMatch, k.PrevMatch},
		{k.ColdRun, k.WarmProbe, k.Evict, k.SleepWake, k.Save, k.PauseView},
		{k.ReplayPause, k.Faster, k.Slower, k.Back, k.Fwd, k.BackLong, k.FwdLong},
	}
}
