package launch

import "time"

// A process that sleeps and wakes (a server in sleep mode) serves several
// runs: its cold start, then each wake (docs/ARCHITECTURE.md, "Sleep and
// wake"). SetRun moves the events it produces on to the next run.

// runFrom is a run of the process and when it began (session offset).
type runFrom struct {
	run  int
	from time.Duration
}

// SetRun makes the events the target produces from now on carry run. A
// stage span belongs to the run its start falls in: a sleep's stage line
// that is read after the wake's run began (the launcher reads the target's
// output behind the runner's requests) stays with the run it ended.
func (p *Process) SetRun(run int) {
	at := p.clock.Now()
	p.runMu.Lock()
	defer p.runMu.Unlock()
	p.runs = append(p.runs, runFrom{run: run, from: at})
}

// runAt is the run an event at offset at belongs to.
func (p *Process) runAt(at time.Duration) int {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	run := p.run
	for _, r := range p.runs {
		if r.from > at {
			break
		}
		run = r.run
	}
	return run
}
