package sessions

import (
	"fmt"

	"github.com/treni-top/treni-top/trace"
)

// Wake says a run is a wake of a sleeping target (docs/ARCHITECTURE.md,
// "Sleep and wake"), not a fresh process: its cold window runs from the
// wake's request to the first token after it.
type Wake struct {
	// Cycle is the wake's number from 1, Of how many were planned.
	Cycle int `json:"cycle"`
	Of    int `json:"of"`
	// Level is the sleep level the target woke from.
	Level int `json:"level"`
}

// String is the wake's label: "wake 2/5 (level 1)", or as much of it as
// is known ("wake 2" for a wake read from a log).
func (w Wake) String() string {
	s := fmt.Sprintf("wake %d", w.Cycle)
	if w.Of > 0 {
		s += fmt.Sprintf("/%d", max(w.Of, w.Cycle))
	}
	if w.Level > 0 {
		s += fmt.Sprintf(" (level %d)", w.Level)
	}
	return s
}

// wakeOf reads a run_start marker's wake attributes (trace.AttrWake,
// trace.AttrWakes, trace.AttrSleepLevel); nil for a cold start.
func wakeOf(a trace.Attrs) *Wake {
	n, ok := a.Float(trace.AttrWake)
	if !ok || n < 1 {
		return nil
	}
	of, _ := a.Float(trace.AttrWakes)
	lvl, _ := a.Float(trace.AttrSleepLevel)
	return &Wake{Cycle: int(n), Of: int(of), Level: int(lvl)}
}

// metricPrefix keeps a wake's cold metrics apart from a cold start's in a
// diff ("wake_l1/cold_total/first_token"): a wake and a cold start are
// different things to compare.
func (w *Wake) metricPrefix() string {
	if w == nil {
		return ""
	}
	return fmt.Sprintf("wake_l%d/", w.Level)
}
