// Package probe runs samplers: small readers of the outside world (GPU
// through NVML, the target's process tree, page-cache residency of weight
// files) that put their readings on the event stream at a steady interval.
//
// The samplers themselves live in sub-packages (probe/gpu, probe/proc,
// probe/pagecache), each with one purpose; this package only schedules them,
// stamps their readings with the session clock and keeps failing samplers
// quiet. The request prober is probe/prober.
package probe

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Default sampling intervals (DESIGN.md issue 5: 100 ms normally, 10 ms
// while a cold start is being traced so short stages still get readings).
const (
	DefaultInterval = 100 * time.Millisecond
	ColdInterval    = 10 * time.Millisecond
)

// Marker names the runner emits about its samplers. They are not in trace's
// list because only the probe produces them; consumers show them as plain
// markers.
const (
	// MarkerSamplerFailing is emitted once when a sampler has failed
	// FailuresBeforeReport times in a row; attrs: sampler, error, failures.
	MarkerSamplerFailing = "sampler_failing"
	// MarkerSamplerRecovered is emitted once when a sampler reported as
	// failing produces a reading again; attrs: sampler, failures.
	MarkerSamplerRecovered = "sampler_recovered"
)

// FailuresBeforeReport is how many consecutive failures make a sampler
// "failing". A single failure is usually a race with a process exiting
// between listing and reading it, which is not worth a marker.
const FailuresBeforeReport = 3

// maxBackoff bounds how rarely a failing sampler is retried, so that a
// sampler that recovers (a target restarted with a new PID, a driver that
// came up) is noticed within a few seconds.
const maxBackoff = 5 * time.Second

// Sampler is one source of readings. Sample is called from a single
// goroutine at a time, so implementations may keep state between calls
// (previous CPU times for a rate). It returns one trace.Sample per source it
// reads (a GPU sampler returns one per device), with metric names from
// trace's Metric* constants.
type Sampler interface {
	// Name identifies the sampler in markers and errors ("gpu", "proc",
	// "pagecache").
	Name() string
	// Sample takes one reading. It must return promptly when ctx is done.
	Sample(ctx context.Context) ([]trace.Sample, error)
}

// Runner calls its samplers at an interval that can be changed while it
// runs, and emits each reading as a KindSample event. Each sampler has its
// own goroutine, so a slow one (NVML's PCIe counter blocks for ~20 ms) does
// not delay the others.
type Runner struct {
	sink     trace.Sink
	clock    trace.Clock
	samplers []Sampler

	interval atomic.Int64 // nanoseconds
	run      atomic.Int64 // Event.Run stamped on every event

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when the interval changes
}

// NewRunner returns a runner that emits to sink with offsets from clock.
// An interval of zero or less means DefaultInterval.
func NewRunner(sink trace.Sink, clock trace.Clock, interval time.Duration, samplers ...Sampler) *Runner {
	r := &Runner{sink: sink, clock: clock, samplers: samplers, changed: make(chan struct{})}
	r.SetInterval(interval)
	return r
}

// SetInterval changes the sampling interval; samplers waiting for their next
// tick are woken so that a switch to ColdInterval takes effect at once. Zero
// or less means DefaultInterval. Safe to call from any goroutine.
func (r *Runner) SetInterval(d time.Duration) {
	if d <= 0 {
		d = DefaultInterval
	}
	if time.Duration(r.interval.Swap(int64(d))) == d {
		return
	}
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Interval is the current sampling interval.
func (r *Runner) Interval() time.Duration { return time.Duration(r.interval.Load()) }

// SetRun sets the Event.Run stamped on the events emitted from now on (the
// cold run they belong to).
func (r *Runner) SetRun(run int) { r.run.Store(int64(run)) }

func (r *Runner) changedCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Run samples until ctx is cancelled, then waits for every sampler goroutine
// to return. It returns ctx's error, or nil when there are no samplers.
func (r *Runner) Run(ctx context.Context) error {
	if len(r.samplers) == 0 {
		return nil
	}
	var wg sync.WaitGroup
	for _, s := range r.samplers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, s)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// RunSamplers is NewRunner(…).Run(ctx) for callers that never change the
// interval.
func RunSamplers(ctx context.Context, sink trace.Sink, clock trace.Clock, interval time.Duration, samplers ...Sampler) error {
	return NewRunner(sink, clock, interval, samplers...).Run(ctx)
}

// loop is one sampler's goroutine.
func (r *Runner) loop(ctx context.Context, s Sampler) {
	failures := 0
	reported := false
	// Go ≥ 1.23 timers: Stop and Reset need no draining.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var wait time.Duration
	for {
		if ctx.Err() != nil {
			return
		}
		if wait > 0 {
			changed := r.changedCh()
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-changed:
				// The interval changed (say to ColdInterval for a cold
				// start): wait the new interval from now instead of
				// finishing the old, longer wait.
				timer.Stop()
				wait = r.wait(0, failures)
				continue
			}
		}

		began := time.Now()
		samples, err := s.Sample(ctx)
		cost := time.Since(began)
		if ctx.Err() != nil {
			return
		}
		at := r.clock.Now()
		run := int(r.run.Load())
		if err != nil {
			failures++
			if failures == FailuresBeforeReport && !reported {
				reported = true
				r.sink.Emit(trace.Event{At: at, Kind: trace.KindMarker, Run: run, Marker: &trace.Marker{
					Name:  MarkerSamplerFailing,
					Attrs: trace.Attrs{"sampler": s.Name(), "error": err.Error(), "failures": failures},
				}})
			}
		} else {
			if reported {
				r.sink.Emit(trace.Event{At: at, Kind: trace.KindMarker, Run: run, Marker: &trace.Marker{
					Name:  MarkerSamplerRecovered,
					Attrs: trace.Attrs{"sampler": s.Name(), "failures": failures},
				}})
			}
			failures, reported = 0, false
			for i := range samples {
				sm := samples[i]
				r.sink.Emit(trace.Event{At: at, Kind: trace.KindSample, Run: run, Sample: &sm})
			}
		}
		wait = r.wait(cost, failures)
	}
}

// wait is how long to sleep before the next reading. Readings are spaced by
// the interval; a sampler that costs more than half its interval is spaced
// by its own cost instead, so one slow sampler never takes more than half a
// core. A failing sampler backs off exponentially up to maxBackoff.
func (r *Runner) wait(cost time.Duration, failures int) time.Duration {
	iv := r.Interval()
	d := iv - cost
	if d < cost {
		d = cost
	}
	if failures >= FailuresBeforeReport {
		b := iv
		for i := FailuresBeforeReport; i <= failures && b < maxBackoff; i++ {
			b *= 2
		}
		if b > maxBackoff {
			b = maxBackoff
		}
		if b > d {
			d = b
		}
	}
	return d
}

// String describes the runner for logs.
func (r *Runner) String() string {
	return fmt.Sprintf("probe.Runner{%d samplers, every %v}", len(r.samplers), r.Interval())
}
