package runner

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// SetRun moves the fake target on to a wake run, as launch.Process does.
func (t *fakeTarget) SetRun(run int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.run = run
}

// recordingSleeper records the calls; failAt fails the call with that
// 1-based number.
type recordingSleeper struct {
	mu     sync.Mutex
	calls  []string
	failAt int
}

func (s *recordingSleeper) call(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, what)
	if len(s.calls) == s.failAt {
		return errors.New("refused")
	}
	return nil
}

func (s *recordingSleeper) Sleep(_ context.Context, _ Target, level int) error {
	return s.call("sleep " + string(rune('0'+level)))
}

func (s *recordingSleeper) Wake(context.Context, Target) error { return s.call("wake") }

// TestSleepCycles: after the cold run, each sleep cycle puts the target to
// sleep (a sleep marker in the run it ends), waits, and wakes it as a run of
// its own: a run_start naming the wake, its place and the level, the
// target's own events moved on to it, and the cold and warm requests of a
// cold start.
func TestSleepCycles(t *testing.T) {
	sl := &recordingSleeper{}
	r, s, l, p := newTest(t, func(c *Config) {
		c.SleepCycles, c.SleepLevel, c.SleepFor, c.Sleeper = 2, 2, time.Millisecond, sl
		c.Warmup, c.Repeat = 0, 1
	})
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sl.calls, ", "); got != "sleep 2, wake, sleep 2, wake" {
		t.Fatalf("calls %q", got)
	}
	if len(l.all()) != 1 {
		t.Fatalf("%d launches, want 1: a wake is the same process", len(l.all()))
	}
	starts := s.markers(trace.MarkerRunStart)
	if len(starts) != 3 {
		t.Fatalf("%d run_start markers, want the cold start and 2 wakes", len(starts))
	}
	for i, e := range starts[1:] {
		a := e.Marker.Attrs
		if e.Run != i+1 || a[trace.AttrWake] != i+1 || a[trace.AttrWakes] != 2 || a[trace.AttrSleepLevel] != 2 {
			t.Errorf("wake run_start %d: run %d, attrs %v", i+1, e.Run, a)
		}
	}
	sleeps := s.markers(trace.MarkerSleep)
	if len(sleeps) != 2 || sleeps[0].Run != 0 || sleeps[1].Run != 1 || sleeps[0].Marker.Attrs["error"] != nil {
		t.Fatalf("sleep markers %+v, want one in each run a sleep ended", sleeps)
	}
	want := []string{"cold_1", "warm_1", "cold_1", "warm_1", "cold_1", "warm_1"}
	if got := p.labels(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("probes %v, want %v", got, want)
	}
	p.mu.Lock()
	for i, pr := range p.probes {
		if pr.Run != i/2 {
			t.Errorf("probe %d (%s) in run %d, want %d", i, pr.Label, pr.Run, i/2)
		}
	}
	p.mu.Unlock()
	if n := len(s.markers(trace.MarkerSequenceDone)); n != 3 {
		t.Errorf("%d sequences done, want 3", n)
	}
}

// TestSleepCycleFailures: a sleep the target refuses ends the cycles with
// an error naming the cycle (the sleep marker says why, no wake run
// starts); a wake that fails marks its run failed.
func TestSleepCycleFailures(t *testing.T) {
	for _, c := range []struct {
		failAt   int
		want     string
		runStart int
	}{
		{1, "sleep cycle 1 of 3 failed", 1},
		{4, "sleep cycle 2 of 3 failed, so the cycles after it were not run: wake the target: refused", 3},
	} {
		sl := &recordingSleeper{failAt: c.failAt}
		r, s, _, _ := newTest(t, func(cfg *Config) {
			cfg.SleepCycles, cfg.SleepFor, cfg.Sleeper, cfg.Warmup, cfg.Repeat = 3, time.Millisecond, sl, 0, 0
		})
		err := r.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("failing call %d: Run returned %v, want %q", c.failAt, err, c.want)
		}
		if n := len(s.markers(trace.MarkerRunStart)); n != c.runStart {
			t.Errorf("failing call %d: %d run_start markers, want %d", c.failAt, n, c.runStart)
		}
		if c.failAt == 1 {
			if m := s.markers(trace.MarkerSleep); len(m) != 1 || m[0].Marker.Attrs["error"] != "refused" {
				t.Errorf("the refused sleep's marker: %+v", m)
			}
		} else if m := s.markers(trace.MarkerRunFailed); len(m) != 1 || m[0].Run != 2 {
			t.Errorf("the failed wake's run_failed: %+v", m)
		}
	}
}

// TestSleepWakeKey: the z key runs one more cycle after the planned ones,
// numbered after them.
func TestSleepWakeKey(t *testing.T) {
	sl := &recordingSleeper{}
	r, s, _, _ := newTest(t, func(c *Config) {
		c.ExitAfterSequence, c.SleepCycles, c.SleepFor, c.Sleeper, c.Warmup, c.Repeat = false, 1, time.Millisecond, sl, 0, 0
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	waitFor(t, func() bool { return len(s.markers(trace.MarkerSequenceDone)) == 2 })
	r.SleepWake()
	waitFor(t, func() bool { return len(s.markers(trace.MarkerSequenceDone)) == 3 })
	r.Quit()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	last := s.markers(trace.MarkerRunStart)[2]
	if a := last.Marker.Attrs; last.Run != 2 || a[trace.AttrWake] != 2 || a[trace.AttrWakes] != 2 {
		t.Fatalf("the z key's wake: run %d attrs %v", last.Run, a)
	}
}

// TestHTTPSleep: the endpoints and the API key are vLLM's, and a target
// without sleep mode gets an error that says how to start it with one.
func TestHTTPSleep(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		if r.URL.Path == "/nosleep/sleep" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	h := HTTPSleep{APIKey: "k"}
	tg := &urlTarget{fakeTarget: fakeTarget{exited: make(chan struct{})}, url: srv.URL + "/"}
	if err := h.Sleep(context.Background(), tg, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Wake(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	if want := "POST /sleep?level=2 Bearer k|POST /wake_up Bearer k"; strings.Join(got, "|") != want {
		t.Fatalf("requests %q, want %q", strings.Join(got, "|"), want)
	}
	tg.url = srv.URL + "/nosleep"
	if err := h.Sleep(context.Background(), tg, 1); err == nil || !strings.Contains(err.Error(), "--enable-sleep-mode") {
		t.Fatalf("a target without sleep mode: %v", err)
	}
}
