package probe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// recorder is a concurrency-safe sink for tests.
type recorder struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (r *recorder) Emit(e trace.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) events() []trace.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]trace.Event(nil), r.evs...)
}

func (r *recorder) count(kind trace.Kind, name string) int {
	n := 0
	for _, e := range r.events() {
		if e.Kind != kind {
			continue
		}
		if kind == trace.KindMarker && e.Marker.Name != name {
			continue
		}
		if kind == trace.KindSample && e.Sample.Source != name {
			continue
		}
		n++
	}
	return n
}

// fake is a sampler whose failures are switched on and off by the test.
type fake struct {
	calls atomic.Int64
	fail  atomic.Bool
}

func (f *fake) Name() string { return "fake" }

func (f *fake) Sample(ctx context.Context) ([]trace.Sample, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return nil, errors.New("device went away")
	}
	return []trace.Sample{{Source: "fake", Values: map[string]float64{"x": 1}}}, nil
}

// waitFor polls cond for up to 10 s (a generous bound for a loaded CI box).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestRunnerEmitsSamplesAndStops(t *testing.T) {
	rec := &recorder{}
	f := &fake{}
	r := NewRunner(rec, trace.NewClock(), 5*time.Millisecond, f)
	r.SetRun(2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, "3 samples", func() bool { return rec.count(trace.KindSample, "fake") >= 3 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	n := f.calls.Load()
	time.Sleep(20 * time.Millisecond)
	if f.calls.Load() != n {
		t.Fatal("sampler still called after Run returned")
	}
	for _, e := range rec.events() {
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		if e.Run != 2 {
			t.Fatalf("event Run = %d, want 2", e.Run)
		}
	}
}

func TestSetIntervalWakesSampler(t *testing.T) {
	rec := &recorder{}
	f := &fake{}
	r := NewRunner(rec, trace.NewClock(), time.Hour, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	waitFor(t, "first sample", func() bool { return f.calls.Load() >= 1 })
	// With an hour-long interval nothing more would come; the switch to
	// the cold interval must take effect without waiting the hour out.
	r.SetInterval(ColdInterval)
	if r.Interval() != ColdInterval {
		t.Fatalf("Interval = %v", r.Interval())
	}
	waitFor(t, "samples at the cold interval", func() bool { return f.calls.Load() >= 5 })
	cancel()
	<-done
}

func TestFailingSamplerReportsOnceAndRecovers(t *testing.T) {
	rec := &recorder{}
	f := &fake{}
	f.fail.Store(true)
	r := NewRunner(rec, trace.NewClock(), time.Millisecond, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	waitFor(t, "several failures", func() bool { return f.calls.Load() >= FailuresBeforeReport+3 })
	if n := rec.count(trace.KindMarker, trace.MarkerSamplerFailing); n != 1 {
		t.Fatalf("%d failing markers, want exactly 1", n)
	}
	f.fail.Store(false)
	waitFor(t, "recovery", func() bool { return rec.count(trace.KindMarker, trace.MarkerSamplerRecovered) == 1 })
	waitFor(t, "samples after recovery", func() bool { return rec.count(trace.KindSample, "fake") >= 1 })
	cancel()
	<-done
	if n := rec.count(trace.KindMarker, trace.MarkerSamplerFailing); n != 1 {
		t.Fatalf("%d failing markers, want exactly 1", n)
	}
}

func TestBackoff(t *testing.T) {
	r := NewRunner(&recorder{}, trace.NewClock(), 100*time.Millisecond)
	if d := r.period(time.Millisecond, 0); d != 100*time.Millisecond {
		t.Fatalf("healthy period = %v", d)
	}
	if d := r.period(80*time.Millisecond, 0); d != 80*time.Millisecond*(maxDutyInverse+1) {
		t.Fatalf("slow sampler period = %v, want %d times its cost", d, maxDutyInverse+1)
	}
	prev := time.Duration(0)
	for f := FailuresBeforeReport; f < FailuresBeforeReport+10; f++ {
		d := r.period(0, f)
		if d < prev || d > maxBackoff {
			t.Fatalf("backoff after %d failures = %v (previous %v)", f, d, prev)
		}
		prev = d
	}
	if prev != maxBackoff {
		t.Fatalf("backoff tops out at %v, want %v", prev, maxBackoff)
	}
}

// waiter is a fake Waiter that blocks like NVML's PCIe counter.
type waiter struct{ fake }

func (w *waiter) MostlyWaits() bool { return true }
func (w *waiter) Sample(ctx context.Context) ([]trace.Sample, error) {
	time.Sleep(30 * time.Millisecond)
	return w.fake.Sample(ctx)
}

func TestGroupsShareTicksAndWaitersDoNotDelay(t *testing.T) {
	rec := &recorder{}
	a, b, w := &fake{}, &fake{}, &waiter{}
	r := NewRunner(rec, trace.NewClock(), 5*time.Millisecond, a, b, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	// The computing samplers keep their 5 ms pace although the waiter
	// takes 30 ms per reading.
	waitFor(t, "readings of the shared group", func() bool { return a.calls.Load() >= 20 })
	cancel()
	<-done
	if w.calls.Load() >= a.calls.Load() {
		t.Fatalf("waiter %d readings, computing sampler %d: the waiter held the others back", w.calls.Load(), a.calls.Load())
	}
	// Samplers of one group are read on the same wake-up.
	if d := a.calls.Load() - b.calls.Load(); d < -1 || d > 1 {
		t.Fatalf("grouped samplers drifted apart: %d vs %d readings", a.calls.Load(), b.calls.Load())
	}
}

func TestRunWithoutSamplers(t *testing.T) {
	if err := RunSamplers(context.Background(), &recorder{}, trace.NewClock(), 0); err != nil {
		t.Fatal(err)
	}
}
