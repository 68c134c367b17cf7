package cuda

import (
	"errors"
	"testing"
	"time"
)

// The page-cache read floor reads the file it wrote (every piece, from
// several threads), runs the copy beside the readers until they stop, and
// passes a failing copy's error on. Rates are reported, never asserted.
func TestPageCacheReadFloor(t *testing.T) {
	const size = 3*stagingSlotBytes/2 + 4096 // two pieces, the second short
	p, err := newPageCacheFile(t.TempDir(), size)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, took, err := p.read(3, 20*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	// At least one whole pass: each of the 3 readers reads a piece of the
	// 2 before it looks at the clock.
	if got < size || took <= 0 {
		t.Fatalf("read %d bytes in %v, want at least the file's %d", got, took, size)
	}
	copies := 0
	r, err := p.readFloor(2, 1000, 20*time.Millisecond, func() error { copies++; time.Sleep(time.Millisecond); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if r.Threads != 2 || r.GBps <= 0 || r.BesideH2DGBps <= 0 || copies == 0 || r.H2DBesideGBps <= 0 {
		t.Errorf("floor %+v after %d copies", r, copies)
	}
	boom := errors.New("copy failed")
	if _, err := p.readFloor(2, 1000, 20*time.Millisecond, func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("a failing copy: %v, want %v", err, boom)
	}
	if _, _, err := p.read(0, time.Millisecond, nil); err == nil {
		t.Error("zero threads: no error")
	}
}
