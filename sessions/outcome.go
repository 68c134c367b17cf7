package sessions

import (
	"fmt"

	"github.com/treni-top/treni-top/trace"
)

// Failure says why a live session failed, for the exit status of the
// command that recorded it (README: 2 is a failure): the first run that
// could not complete (Run.Failed, from its run_failed marker) or whose
// target exited without treni-top stopping it. Nil when every run ended as
// asked — a session the user quit or interrupted is not a failure of the
// target. Runs are named as the TUI numbers them, "run 2 of 3".
func Failure(events []trace.Event) error {
	runs := Analyze(events)
	name := func(i int) string {
		if len(runs) <= 1 {
			return "the cold run"
		}
		return fmt.Sprintf("run %d of %d", i+1, len(runs))
	}
	for _, r := range runs {
		if r.Failed != "" {
			return fmt.Errorf("%s failed: %s", name(r.Index), r.Failed)
		}
		if r.Crashed && r.Exit != nil {
			how := fmt.Sprintf("exit code %d", r.Exit.ExitCode)
			if r.Exit.Signal != "" {
				how = "signal " + r.Exit.Signal
			}
			return fmt.Errorf("the target crashed in %s (%s)", name(r.Index), how)
		}
	}
	return nil
}
