package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestNoDriverIsAClearError(t *testing.T) {
	_, err := LoadDriver("/nonexistent/libcuda.so.1")
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), DriverEnv) {
		t.Fatalf("error %v", err)
	}
	// A library that loads but lacks the symbols is refused by name.
	_, err = LoadDriver("libc.so.6")
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "symbol cuInit not found") {
		t.Fatalf("libc as driver: %v", err)
	}
}

func TestDoctorWithoutGPU(t *testing.T) {
	if _, err := LoadDriver(); err == nil {
		t.Skip("a CUDA driver is installed here; this test covers machines without one")
	}
	r := Doctor()
	if r.Usable || r.Driver.Found || r.Driver.Fix == "" {
		t.Fatalf("report %+v", r)
	}
	txt := r.Text()
	for _, want := range []string{"MISSING", "fix:", "CPU backend"} {
		if !strings.Contains(txt, want) {
			t.Fatalf("doctor text lacks %q:\n%s", want, txt)
		}
	}
}

func TestFindLibraryHonoursOverride(t *testing.T) {
	dir := t.TempDir()
	// libc is loadable; present it under a CUDA-like name in an override
	// folder to check the search order without a CUDA install.
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		t.Skip("no", libc)
	}
	if err := os.Symlink(libc, dir+"/libfake.so.1"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(LibDirEnv, dir)
	l := FindLibrary("fake", []string{"libfake.so.1"})
	if !l.Found || !strings.Contains(l.Tried[0], dir) {
		t.Fatalf("%+v", l)
	}
	if l := FindLibrary("absent", []string{"libdefinitely-absent.so.9"}); l.Found || l.Error == "" {
		t.Fatalf("%+v", l)
	}
}

// TestRunnerRunsOnOneThread: every call runs on the runner's one locked
// thread and returns its error, blocking or polling; after Close, Do
// refuses.
func TestRunnerRunsOnOneThread(t *testing.T) {
	// Blocking, polling, and blocking turned polling (as a backend turns
	// it on after its load).
	turned := NewRunner()
	turned.SetSpin(time.Millisecond, time.Millisecond)
	for _, r := range []*Runner{NewRunner(), NewSpinningRunner(time.Millisecond, time.Millisecond), turned} {
		var n atomic.Int32
		tid := -1
		for i := 0; i < 100; i++ {
			if err := r.Do(context.Background(), func() error {
				if id := syscall.Gettid(); tid < 0 {
					tid = id
				} else if id != tid {
					return fmt.Errorf("call %d ran on thread %d, the first on %d", i, id, tid)
				}
				n.Add(1)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		want := errors.New("boom")
		if err := r.Do(context.Background(), func() error { return want }); err != want {
			t.Fatalf("error not returned: %v", err)
		}
		r.Close()
		r.Close()
		if err := r.Do(context.Background(), func() error { return nil }); !errors.Is(err, ErrRunnerClosed) {
			t.Fatalf("after close: %v", err)
		}
		if n.Load() != 100 {
			t.Fatal(n.Load())
		}
	}
}

// TestRunnerCancelAndClose: a call whose context is cancelled while it
// waits behind another does not run and returns the context's error; a
// call still queued when the runner closes returns ErrRunnerClosed and
// does not hang.
func TestRunnerCancelAndClose(t *testing.T) {
	for _, spin := range []time.Duration{0, time.Millisecond} {
		r := NewSpinningRunner(spin, spin)
		started, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() { first <- r.Do(context.Background(), func() error { close(started); <-release; return nil }) }()
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		var ran atomic.Bool
		second := make(chan error, 1)
		go func() { second <- r.Do(ctx, func() error { ran.Store(true); return nil }) }()
		cancel()
		close(release)
		if err := <-first; err != nil {
			t.Fatalf("spin %v: first call: %v", spin, err)
		}
		if err := <-second; !errors.Is(err, context.Canceled) || ran.Load() {
			t.Fatalf("spin %v: cancelled call: %v, ran %v", spin, err, ran.Load())
		}

		// Close while a call waits behind a running one.
		started, release = make(chan struct{}), make(chan struct{})
		go func() { first <- r.Do(context.Background(), func() error { close(started); <-release; return nil }) }()
		<-started
		queued := make(chan error, 1)
		go func() { queued <- r.Do(context.Background(), func() error { return nil }) }()
		closed := make(chan struct{})
		go func() { r.Close(); close(closed) }()
		close(release)
		<-closed
		<-first
		if err := <-queued; err != nil && !errors.Is(err, ErrRunnerClosed) {
			t.Fatalf("spin %v: queued call at close: %v", spin, err)
		}
	}
}

// BenchmarkRunnerDo is the round trip of an empty call, blocking and
// polling.
func BenchmarkRunnerDo(b *testing.B) {
	for _, c := range []struct {
		name string
		new  func() *Runner
	}{{"blocking", NewRunner}, {"spinning", func() *Runner { return NewSpinningRunner(runnerNextSpin, runnerResultSpin) }}} {
		b.Run(c.name, func(b *testing.B) {
			r := c.new()
			defer r.Close()
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if err := r.Do(ctx, func() error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
