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

// Default sampling intervals: 100 ms normally, 10 ms while a cold start is
// being traced so short stages still get readings.
const (
	DefaultInterval = 100 * time.Millisecond
	ColdInterval    = 10 * time.Millisecond
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

// Waiter is implemented by samplers whose readings mostly wait rather than
// compute (NVML samples each PCIe counter over a ~20 ms window inside the
// call). Their wall-clock cost says nothing about CPU, so the duty-cycle
// limit (maxDutyInverse) does not apply to them: they are spaced by the
// interval alone, each in its own goroutine so its waiting delays no other
// sampler.
type Waiter interface {
	Sampler
	// MostlyWaits reports whether the reading's time is mostly spent
	// waiting.
	MostlyWaits() bool
}

// Runner calls its samplers at an interval that can be changed while it
// runs, and emits each reading as a KindSample event. A Waiter (NVML's PCIe
// counter blocks for ~20 ms) has its own goroutine so it does not delay the
// others.
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
//
// Samplers that compute (process tree, page cache) share one goroutine and
// are read on the same wake-up: on a VM, waking a thread costs about as
// much CPU as a cheap reading, so one wake per tick instead of one per
// sampler is most of the saving. Each Waiter gets its own goroutine so that
// its waiting does not delay the others.
func (r *Runner) Run(ctx context.Context) error {
	if len(r.samplers) == 0 {
		return nil
	}
	var groups [][]*slot
	var shared []*slot
	for _, s := range r.samplers {
		sl := &slot{s: s}
		if w, ok := s.(Waiter); ok && w.MostlyWaits() {
			sl.waits = true
			groups = append(groups, []*slot{sl})
			continue
		}
		shared = append(shared, sl)
	}
	if len(shared) > 0 {
		groups = append(groups, shared)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, g)
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

// slot is one sampler's scheduling and failure state.
type slot struct {
	s        Sampler
	waits    bool // a Waiter: its cost is not CPU
	failures int  // consecutive
	reported bool // trace.MarkerSamplerFailing emitted for this streak
	next     time.Time
}

// coalesce is how early a sampler may be read to share a wake-up with
// another that is due.
const coalesce = time.Millisecond

// loop is the goroutine of one group of samplers.
func (r *Runner) loop(ctx context.Context, slots []*slot) {
	// Go ≥ 1.23 timers: Stop and Reset need no draining.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		wake := time.Now()
		for _, sl := range slots {
			if sl.next.Sub(wake) > coalesce {
				continue
			}
			cost := r.sampleOnce(ctx, sl)
			if ctx.Err() != nil {
				return
			}
			if sl.waits {
				cost = 0
			}
			// Scheduled from the wake-up, not from the reading's end, so
			// samplers of one group stay on the same tick.
			sl.next = wake.Add(r.period(cost, sl.failures))
		}
		earliest := slots[0].next
		for _, sl := range slots[1:] {
			if sl.next.Before(earliest) {
				earliest = sl.next
			}
		}
		d := time.Until(earliest)
		if d <= 0 {
			continue
		}
		changed := r.changedCh()
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-changed:
			// The interval changed (say to ColdInterval for a cold
			// start): a reading due later than one new interval from now
			// comes sooner.
			timer.Stop()
			now := time.Now()
			for _, sl := range slots {
				if n := now.Add(r.period(0, sl.failures)); n.Before(sl.next) {
					sl.next = n
				}
			}
		}
	}
}

// sampleOnce takes one reading, emits it or handles the failure, and
// returns its wall-clock cost.
func (r *Runner) sampleOnce(ctx context.Context, sl *slot) time.Duration {
	began := time.Now()
	samples, err := sl.s.Sample(ctx)
	cost := time.Since(began)
	if ctx.Err() != nil {
		return cost
	}
	at := r.clock.Now()
	run := int(r.run.Load())
	if err != nil {
		sl.failures++
		if sl.failures == FailuresBeforeReport && !sl.reported {
			sl.reported = true
			r.sink.Emit(trace.Event{At: at, Kind: trace.KindMarker, Run: run, Marker: &trace.Marker{
				Name:  trace.MarkerSamplerFailing,
				Attrs: trace.Attrs{"sampler": sl.s.Name(), "error": err.Error(), "failures": sl.failures},
			}})
		}
		return cost
	}
	if sl.reported {
		r.sink.Emit(trace.Event{At: at, Kind: trace.KindMarker, Run: run, Marker: &trace.Marker{
			Name:  trace.MarkerSamplerRecovered,
			Attrs: trace.Attrs{"sampler": sl.s.Name(), "failures": sl.failures},
		}})
	}
	sl.failures, sl.reported = 0, false
	for i := range samples {
		sm := samples[i]
		r.sink.Emit(trace.Event{At: at, Kind: trace.KindSample, Run: run, Sample: &sm})
	}
	return cost
}

// maxDutyInverse bounds each sampler's share of a core: its readings start
// at least maxDutyInverse+1 times its cost apart (≤ 5 %). Readings are cheap
// when it matters most (a cold page cache makes residency cheap to read),
// and a sampler that gets expensive (residency of a fully cached 70 GB
// checkpoint) slows down instead of eating the profiled machine's CPU.
const maxDutyInverse = 19

// period is the time from one reading's start to the next: the interval,
// but at least (maxDutyInverse+1) times the reading's cost, and backing off
// exponentially up to maxBackoff while the sampler fails.
func (r *Runner) period(cost time.Duration, failures int) time.Duration {
	d := r.Interval()
	if m := cost * (maxDutyInverse + 1); d < m {
		d = m
	}
	if failures >= FailuresBeforeReport {
		b := r.Interval()
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
