package tui

// Test helpers: ways into the model that only the tests need.

import (
	tea "github.com/charmbracelet/bubbletea"

	"github.com/treni-top/treni-top/trace"
)

// NewModel returns the program's model without running it, for tests
// (teatest or View at fixed sizes). Colors follow Options.NoColor and
// NO_COLOR; the theme is dark unless Options.Light.
func NewModel(opts Options) Model {
	if noColorEnv() {
		opts.NoColor = true
	}
	return newModel(opts, false)
}

// dropMemos forgets every memoized pane and plot.
func (c *programContext) dropMemos() {
	clear(c.boxes)
	clear(c.charts)
}

// waitEvents blocks until the subscription has an event, then gathers what
// else arrives within batchWindow into one message.
func waitEvents(sub *trace.Subscription) tea.Cmd { return waitEventsTick(sub, 0) }
