package cuda

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unsafe"
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

// The registered-file floor maps the file, registers and unregisters the
// whole mapping once, and copies from it the file's own bytes, piece by
// piece, alone and beside the readers.
func TestRegisteredCopyFloor(t *testing.T) {
	const size = 3*stagingSlotBytes/2 + 4096
	p, err := newPageCacheFile(t.TempDir(), size)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := make([]byte, size)
	if _, err := p.f.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	var registered, unregistered, copies int
	var base uintptr
	register := func(src unsafe.Pointer, n int) error {
		registered++
		base = uintptr(src)
		if n != size {
			t.Errorf("registered %d bytes, want the file's %d", n, size)
		}
		return nil
	}
	unregister := func(src unsafe.Pointer) error { unregistered++; return nil }
	copyFrom := func(src unsafe.Pointer, n int) error {
		off := int(uintptr(src) - base)
		if off < 0 || off+n > size || !bytes.Equal(unsafe.Slice((*byte)(src), n), want[off:off+n]) {
			t.Errorf("a copy of %d bytes at offset %d is not the file's", n, off)
		}
		copies++
		return nil
	}
	r, err := p.registeredCopyFloor(register, unregister, 2, 20*time.Millisecond, copyFrom)
	if err != nil {
		t.Fatal(err)
	}
	// Two mappings registered whole and unregistered: the populated
	// one first, then the one copied from.
	if registered != 2 || unregistered != 2 || copies < 2 || r.GBps <= 0 || r.BesideReadGBps <= 0 || r.ReadsBesideGBps <= 0 || r.Threads != 2 || r.Bytes != size {
		t.Errorf("floor %+v: %d registrations, %d unregistrations, %d copies", r, registered, unregistered, copies)
	}
	boom := errors.New("registration refused")
	if _, err := p.registeredCopyFloor(func(unsafe.Pointer, int) error { return boom }, unregister, 2, time.Millisecond, copyFrom); !errors.Is(err, boom) {
		t.Errorf("a refused registration: %v, want %v", err, boom)
	}
}
