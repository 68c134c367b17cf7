package kvcache

import "testing"

// TestResetPrefix: every cached block leaves the cache; unheld ones are
// free at once, held ones once their sequence lets go, and nothing leaks.
func TestResetPrefix(t *testing.T) {
	m, err := New(8, 4)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, seq := range []uint64{1, 2} {
		if _, err := m.Ensure(seq, len(toks)); err != nil {
			t.Fatal(err)
		}
		m.Commit(seq, toks, len(toks))
	}
	m.Release(1) // its two full blocks stay cached, evictable
	if m.Cached() != 2 || len(m.Match(toks)) != 2 {
		t.Fatalf("%d cached, %d matched before the reset, want 2 and 2", m.Cached(), len(m.Match(toks)))
	}
	if n, err := m.Attach(3, m.Match(toks)[:1]); err != nil || n != 1 { // one cached block held
		t.Fatalf("attach: %d, %v", n, err)
	}
	if n := m.ResetPrefix(); n != 2 {
		t.Fatalf("ResetPrefix uncached %d blocks, want 2", n)
	}
	if m.Cached() != 0 || len(m.Match(toks)) != 0 {
		t.Fatalf("%d cached, %d matched after the reset", m.Cached(), len(m.Match(toks)))
	}
	if free, held := m.Free(), len(m.Table(2))+len(m.Table(3)); free != 8-held {
		t.Fatalf("%d free with %d held by sequences 2 and 3, want %d", free, held, 8-held)
	}
	m.Release(2)
	m.Release(3)
	if m.Free() != 8 {
		t.Fatalf("%d free after the last release, want 8", m.Free())
	}
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}
