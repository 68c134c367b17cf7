package trace

// Sleep mode (docs/ARCHITECTURE.md, "Sleep and wake"): a server that gives
// its device memory back and takes it again while its process stays up.
// The runner's sleep cycles put a target to sleep (MarkerSleep, in the run
// the sleep ends) and wake it; each wake is a run of its own, whose
// run_start marker carries the wake's place (AttrWake, AttrWakes) and the
// sleep level (AttrSleepLevel).

// MarkerSleep: the runner put the target to sleep (attrs: level, wake, the
// cycle this sleep belongs to, wakes, http_ms, and error when it failed).
const MarkerSleep = "sleep"

// The run_start attributes of a wake run.
const (
	// AttrWake is the wake's number, from 1.
	AttrWake = "wake"
	// AttrWakes is how many wakes the run planned (--sleep-cycles), or as
	// many as there were when more were asked for from the TUI.
	AttrWakes = "wakes"
	// AttrSleepLevel is the sleep level the target woke from (1 or 2).
	AttrSleepLevel = "level"
)
