package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

type sink struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (s *sink) Emit(e trace.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

func (s *sink) markers(name string) []trace.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []trace.Event
	for _, e := range s.evs {
		if e.Kind == trace.KindMarker && e.Marker.Name == name {
			out = append(out, e)
		}
	}
	return out
}

type fakeTarget struct {
	run       int
	healthErr error
	exited    chan struct{}
	mu        sync.Mutex
	stopped   bool
}

func (t *fakeTarget) PID() int        { return 0 }
func (t *fakeTarget) PIDs() []int     { return nil }
func (t *fakeTarget) BaseURL() string { return "http://127.0.0.1:1" }
func (t *fakeTarget) Kind() string    { return "fake" }
func (t *fakeTarget) WaitHealthy(ctx context.Context) error {
	return t.healthErr
}
func (t *fakeTarget) Exited() <-chan struct{} { return t.exited }
func (t *fakeTarget) Stop(time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		close(t.exited)
	}
}
func (t *fakeTarget) isStopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

type fakeLauncher struct {
	mu        sync.Mutex
	targets   []*fakeTarget
	healthErr error
	// failRun, when set, is the one run whose target never becomes
	// healthy (with healthErr).
	failRun *int
}

func (l *fakeLauncher) Launch(_ context.Context, run int) (Target, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.targets {
		if !t.isStopped() {
			return nil, errors.New("launched while the previous target still runs")
		}
	}
	t := &fakeTarget{run: run, healthErr: l.healthErr, exited: make(chan struct{})}
	if l.failRun != nil && *l.failRun != run {
		t.healthErr = nil
	}
	l.targets = append(l.targets, t)
	return t, nil
}

func (l *fakeLauncher) all() []*fakeTarget {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*fakeTarget(nil), l.targets...)
}

type fakeProber struct {
	mu     sync.Mutex
	probes []Probe
	sink   trace.Sink
}

func (p *fakeProber) Probe(_ context.Context, t Target, pr Probe) (trace.Request, error) {
	if ft := t.(*fakeTarget); ft.run != pr.Run {
		return trace.Request{}, errors.New("probe run does not match the target's")
	}
	p.mu.Lock()
	p.probes = append(p.probes, pr)
	p.mu.Unlock()
	q := trace.Request{ID: pr.Label, Label: pr.Label, Phase: pr.Phase, Done: true, FirstToken: time.Millisecond, End: 2 * time.Millisecond}
	p.sink.Emit(trace.Event{Kind: trace.KindRequest, Run: pr.Run, Request: &q})
	return q, nil
}

func (p *fakeProber) labels() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, q := range p.probes {
		out = append(out, q.Label)
	}
	return out
}

type fakeCache struct {
	resident, total int64
	leave           int64 // resident bytes left after an eviction
	evictions       int
}

func (c *fakeCache) Residency([]string) (int64, int64, error) { return c.resident, c.total, nil }
func (c *fakeCache) Evict([]string) error {
	c.evictions++
	c.resident = c.leave
	return nil
}

func newTest(t *testing.T, mod func(*Config)) (*Runner, *sink, *fakeLauncher, *fakeProber) {
	t.Helper()
	s := &sink{}
	l := &fakeLauncher{}
	p := &fakeProber{sink: s}
	cfg := Config{Sink: s, Clock: trace.NewClock(), Launcher: l, Prober: p, Warmup: 1, Repeat: 3, ExitAfterSequence: true}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, s, l, p
}

func TestSequence(t *testing.T) {
	r, s, l, p := newTest(t, nil)
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"cold_1", "warmup_1", "warm_1", "warm_2", "warm_3"}
	got := p.labels()
	if len(got) != len(want) {
		t.Fatalf("probes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("probes %v, want %v", got, want)
		}
	}
	// The phases of the cold sequence (they used to be asserted on the
	// removed prober.ColdSequence, a second cold sequence only tests used).
	p.mu.Lock()
	for _, pr := range p.probes {
		want := trace.PhaseWarm
		switch {
		case pr.Label == "cold_1":
			want = trace.PhaseCold
		case strings.HasPrefix(pr.Label, "warmup_"):
			want = trace.PhaseWarmup
		}
		if pr.Phase != want {
			t.Errorf("%s phase %q, want %q", pr.Label, pr.Phase, want)
		}
	}
	p.mu.Unlock()
	ts := l.all()
	if len(ts) != 1 || !ts[0].isStopped() {
		t.Errorf("target not launched once and stopped: %d targets", len(ts))
	}
	if len(s.markers(trace.MarkerRunStart)) != 1 || len(s.markers(trace.MarkerSequenceDone)) != 1 {
		t.Error("run_start or sequence_done missing")
	}
}

func TestNewColdRunAndQuit(t *testing.T) {
	r, s, l, p := newTest(t, func(c *Config) { c.ExitAfterSequence = false; c.Repeat = 1; c.Warmup = 0 })
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	waitFor(t, func() bool { return len(s.markers(trace.MarkerSequenceDone)) == 1 })
	r.NewColdRun()
	waitFor(t, func() bool { return len(s.markers(trace.MarkerSequenceDone)) == 2 })
	r.WarmProbe()
	waitFor(t, func() bool { return len(p.labels()) == 5 })
	if got := p.labels()[4]; got != "warm_2" {
		t.Errorf("the extra warm probe is %q, want warm_2 (after warm_1)", got)
	}
	r.Quit()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Quit")
	}
	ts := l.all()
	if len(ts) != 2 || ts[1].run != 1 || !ts[0].isStopped() || !ts[1].isStopped() {
		t.Fatalf("targets: %d, second run %d", len(ts), ts[len(ts)-1].run)
	}
	starts := s.markers(trace.MarkerRunStart)
	if len(starts) != 2 || starts[1].Run != 1 {
		t.Errorf("run_start markers %+v", starts)
	}
	if r.RunIndex() != 1 {
		t.Errorf("run index %d", r.RunIndex())
	}
}

func TestEvictionEvidence(t *testing.T) {
	files := func() []string { return []string{"model.safetensors"} }
	pc := &fakeCache{resident: 100, total: 100, leave: 0}
	r, s, _, _ := newTest(t, func(c *Config) { c.PageCache = pc; c.WeightFiles = files; c.EvictPageCache = true })
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := s.markers(trace.MarkerResidency)
	if len(res) != 2 {
		t.Fatalf("residency markers %d, want before and after", len(res))
	}
	if b, _ := res[0].Marker.Attrs.Float("resident_bytes"); b != 100 {
		t.Errorf("before: %v", res[0].Marker.Attrs)
	}
	if b, _ := res[1].Marker.Attrs.Float("resident_bytes"); b != 0 {
		t.Errorf("after: %v", res[1].Marker.Attrs)
	}
	ev := s.markers(trace.MarkerEvicted)
	if len(ev) != 1 || ev[0].Marker.Attrs["ok"] != true {
		t.Fatalf("evicted markers %+v", ev)
	}
	st := s.markers(trace.MarkerRunStart)
	if st[0].Marker.Attrs["page_cache_evicted"] != true || st[0].At < ev[0].At {
		t.Errorf("run_start %+v must follow a verified eviction", st[0].Marker.Attrs)
	}
}

func TestEvictionNotVerifiedIsNotCold(t *testing.T) {
	files := func() []string { return []string{"model.safetensors"} }
	pc := &fakeCache{resident: 100, total: 100, leave: 60}
	r, s, l, _ := newTest(t, func(c *Config) { c.PageCache = pc; c.WeightFiles = files; c.EvictPageCache = true })
	err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not page-cache cold") {
		t.Fatalf("Run after an eviction that left 60%% resident: %v, want the run failed as not page-cache cold", err)
	}
	ev := s.markers(trace.MarkerEvicted)
	if len(ev) != 1 || ev[0].Marker.Attrs["ok"] != false {
		t.Fatalf("evicted markers %+v", ev)
	}
	// The run was asked to be page-cache cold and is not: it is not
	// launched at all, rather than recorded as something it is not.
	if len(l.all()) != 0 || len(s.markers(trace.MarkerRunStart)) != 0 {
		t.Errorf("launched after an unverified eviction: %d targets", len(l.all()))
	}
	if f := s.markers(trace.MarkerRunFailed); len(f) != 1 {
		t.Errorf("run_failed markers %d, want 1", len(f))
	}
	// Without weight files, --evict-page-cache must say so, not pretend.
	r2, s2, _, _ := newTest(t, func(c *Config) { c.PageCache = pc; c.EvictPageCache = true })
	if err := r2.Run(context.Background()); err == nil {
		t.Error("eviction without weight files: Run succeeded")
	}
	if ev := s2.markers(trace.MarkerEvicted); len(ev) != 1 || ev[0].Marker.Attrs["ok"] != false {
		t.Errorf("eviction without files: %+v", ev)
	}
}

// TestColdRuns: ColdRuns 3 is three launches one after the other (each
// after the previous target stopped), each evicted first and with its own
// cold sequence, each run_start saying its place in the series.
func TestColdRuns(t *testing.T) {
	files := func() []string { return []string{"model.safetensors"} }
	pc := &fakeCache{resident: 100, total: 100, leave: 0}
	r, s, l, p := newTest(t, func(c *Config) {
		c.ColdRuns = 3
		c.Repeat = 1
		c.PageCache, c.WeightFiles, c.EvictPageCache = pc, files, true
	})
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := l.all()
	if len(ts) != 3 {
		t.Fatalf("%d launches, want 3", len(ts))
	}
	for i, tg := range ts {
		if tg.run != i || !tg.isStopped() {
			t.Errorf("launch %d: run %d, stopped %v", i, tg.run, tg.isStopped())
		}
	}
	if pc.evictions != 3 {
		t.Errorf("%d evictions, want one before each of the 3 launches", pc.evictions)
	}
	starts := s.markers(trace.MarkerRunStart)
	if len(starts) != 3 {
		t.Fatalf("%d run_start markers, want 3", len(starts))
	}
	for i, st := range starts {
		n, _ := st.Marker.Attrs.Float("cold_runs")
		if st.Run != i || n != 3 || st.Marker.Attrs["page_cache_evicted"] != true {
			t.Errorf("run_start %d: run %d attrs %v", i, st.Run, st.Marker.Attrs)
		}
	}
	want := []string{"cold_1", "warmup_1", "warm_1", "cold_1", "warmup_1", "warm_1", "cold_1", "warmup_1", "warm_1"}
	if got := p.labels(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("probes %v, want %v", got, want)
	}
	if r.RunIndex() != 2 {
		t.Errorf("run index %d after three runs, want 2", r.RunIndex())
	}
}

// TestColdRunsStopAtFailure: the series ends at the first failed run, and
// Run's error names it and what completed.
func TestColdRunsStopAtFailure(t *testing.T) {
	fail := 1
	r, s, l, _ := newTest(t, func(c *Config) { c.ColdRuns = 3 })
	l.healthErr = errors.New("target exited before it became healthy (exit status 1)")
	l.failRun = &fail
	err := r.Run(context.Background())
	if err == nil {
		t.Fatal("Run succeeded although cold run 2 never became healthy")
	}
	for _, want := range []string{"cold run 2 of 3 failed", "the run after it was not started", "holds 1 complete cold run)", "exit status 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := len(l.all()); n != 2 {
		t.Errorf("%d launches, want 2 (none after the failed run)", n)
	}
	if f := s.markers(trace.MarkerRunFailed); len(f) != 1 || f[0].Run != 1 {
		t.Errorf("run_failed markers %+v, want one on run 1", f)
	}
}

// TestColdRunsThenKeys: without ExitAfterSequence (the TUI) the series
// runs first and a new cold run from the r key follows it.
func TestColdRunsThenKeys(t *testing.T) {
	r, s, l, _ := newTest(t, func(c *Config) { c.ExitAfterSequence = false; c.ColdRuns = 2; c.Warmup = 0; c.Repeat = 0 })
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	waitFor(t, func() bool { return len(s.markers(trace.MarkerSequenceDone)) == 2 })
	r.NewColdRun()
	waitFor(t, func() bool { return len(s.markers(trace.MarkerSequenceDone)) == 3 })
	r.Quit()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ts := l.all(); len(ts) != 3 || ts[2].run != 2 {
		t.Fatalf("targets %d, want 3 with the r key's as run 2", len(ts))
	}
	if st := s.markers(trace.MarkerRunStart); st[2].Marker.Attrs["cold_runs"] != nil {
		t.Errorf("the r key's run claims a place in the series: %v", st[2].Marker.Attrs)
	}
}

func TestCrashBeforeHealthy(t *testing.T) {
	r, s, l, p := newTest(t, nil)
	l.healthErr = errors.New("target exited before it became healthy (exit status 3)")
	err := r.Run(context.Background())
	if err == nil {
		t.Fatal("Run succeeded although the target never became healthy")
	}
	if len(p.labels()) != 0 {
		t.Error("requests sent to a dead target")
	}
	if len(s.markers(trace.MarkerRunFailed)) != 1 {
		t.Error("no run_failed marker")
	}
}

// TestBeforeLaunch: the check runs before each run_start (outside the
// cold window), and a refusal fails the run without a launch.
func TestBeforeLaunch(t *testing.T) {
	var starts int
	var s *sink
	r, s, l, _ := newTest(t, func(c *Config) {
		c.ColdRuns = 2
		c.BeforeLaunch = func(context.Context) error {
			starts = len(s.markers(trace.MarkerRunStart))
			return nil
		}
	})
	if err := r.Run(context.Background()); err != nil || len(l.all()) != 2 {
		t.Fatalf("Run: %v, %d launches", err, len(l.all()))
	}
	if starts != 1 {
		t.Errorf("the second check saw %d run_start markers, want 1 (it comes before its own)", starts)
	}
	r, s, l, _ = newTest(t, func(c *Config) {
		c.BeforeLaunch = func(context.Context) error { return errors.New("http://127.0.0.1:8000 is taken before the launch") }
	})
	err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "taken before the launch") {
		t.Errorf("Run after a refused check: %v", err)
	}
	if len(l.all()) != 0 || len(s.markers(trace.MarkerRunStart)) != 0 || len(s.markers(trace.MarkerRunFailed)) != 1 {
		t.Errorf("refused check: %d launches, %d run_start, %d run_failed; want 0, 0, 1", len(l.all()), len(s.markers(trace.MarkerRunStart)), len(s.markers(trace.MarkerRunFailed)))
	}
}

func TestAttachedHasNoColdRuns(t *testing.T) {
	if _, err := New(Config{Sink: &sink{}, Launcher: &fakeLauncher{}, Attached: true, ColdRuns: 2}); err == nil {
		t.Error("an attached runner accepted ColdRuns 2")
	}
}

func TestAttachedRefusesRestart(t *testing.T) {
	r, s, _, p := newTest(t, func(c *Config) { c.Attached = true })
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.labels(); len(got) != 4 || got[0] != "warmup_1" {
		t.Errorf("attached sequence %v: no cold request expected", got)
	}
	if len(s.markers(trace.MarkerRunStart)) != 0 || len(s.markers(trace.MarkerAttached)) != 1 {
		t.Error("an attach must not claim a run start")
	}
	r.NewColdRun()
	r.EvictAndRestart()
	if n := len(s.markers(trace.MarkerActionRefused)); n != 2 {
		t.Errorf("restart of an attached server: %d refusals, want 2", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
