package cuda

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
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

func TestRunnerRunsOnOneThread(t *testing.T) {
	r := NewRunner()
	var n atomic.Int32
	for i := 0; i < 100; i++ {
		if err := r.Do(context.Background(), func() error { n.Add(1); return nil }); err != nil {
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
