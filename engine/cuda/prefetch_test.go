package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// writeSized writes n bytes to dir/name and returns the path.
func writeSized(t *testing.T, dir, name string, n int) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, bytes.Repeat([]byte{7}, n), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The prefetch cuts the files into chunk-sized reads in planChunks' order
// (by name, each from its start), leaves out what cannot be opened, reads
// every chunk when let run to the end, and closes the files when waited
// for.
func TestColdPrefetchReadsEveryChunk(t *testing.T) {
	dir := t.TempDir()
	const mib = 1 << 20
	b := writeSized(t, dir, "b.safetensors", 3*mib)
	a := writeSized(t, dir, "a.safetensors", 5*mib+123)
	p := newColdPrefetch([]string{b, filepath.Join(dir, "missing.safetensors"), a}, mib)
	if len(p.spans) != 9 || len(p.files) != 2 {
		t.Fatalf("%d spans over %d files, want 9 over 2", len(p.spans), len(p.files))
	}
	for i, want := range []struct {
		file string
		off  int64
		n    int
	}{{a, 0, mib}, {a, 5 * mib, 123}, {b, 0, mib}, {b, 2 * mib, mib}} {
		s := p.spans[[]int{0, 5, 6, 8}[i]]
		if s.f.Name() != want.file || s.off != want.off || s.n != want.n {
			t.Fatalf("span %d: %s at %d, %d bytes; want %s at %d, %d", i, s.f.Name(), s.off, s.n, want.file, want.off, want.n)
		}
	}
	p.run(3)
	p.wg.Wait() // every thread ran out of spans: no stop was asked
	if got, _ := p.wait(); got != 8*mib+123 {
		t.Fatalf("read %d bytes, want %d", got, 8*mib+123)
	}
	if _, err := p.spans[0].f.Stat(); err == nil {
		t.Fatal("wait left the files open")
	}
	if got, _ := p.wait(); got != 8*mib+123 { // a second wait (Load's deferred one) is harmless
		t.Fatal("a second wait changed the count")
	}
}

// Threads told to stop take no further chunk; a file whose reads fail
// stops its thread rather than hanging the wait; a nil prefetch (a warm
// page cache) is safe to stop and wait for.
func TestColdPrefetchStops(t *testing.T) {
	dir := t.TempDir()
	p := newColdPrefetch([]string{writeSized(t, dir, "a.safetensors", 4<<20)}, 1<<20)
	p.stop()
	if n := p.bytes.Load(); n != 0 {
		t.Fatalf("stopped before running, yet %d bytes read", n)
	}
	p.run(4)
	if n, _ := p.wait(); n != 0 {
		t.Fatalf("threads started after stop read %d bytes", n)
	}

	sub := filepath.Join(dir, "a-directory")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	q := newColdPrefetch([]string{sub}, 1<<20)
	q.run(2)
	q.wg.Wait()
	if n, _ := q.wait(); n != 0 {
		t.Fatalf("read %d bytes of a directory", n)
	}

	var none *coldPrefetch
	none.stop()
	if n, ms := none.wait(); n != 0 || ms != 0 {
		t.Fatal("a nil prefetch reported work")
	}
}
