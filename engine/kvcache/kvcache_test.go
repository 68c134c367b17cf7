package kvcache

import (
	"errors"
	"sync"
	"testing"
)

func TestEnsureGrowReleaseAndLeaks(t *testing.T) {
	m, err := New(4, 16)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := m.Ensure(1, 17) // 2 blocks
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) != 2 || m.Used() != 2 || m.Free() != 2 {
		t.Fatalf("table %v used %d free %d, want 2 blocks used", tab, m.Used(), m.Free())
	}
	// Growth within the last block allocates nothing.
	if tab2, _ := m.Ensure(1, 32); len(tab2) != 2 || tab2[0] != tab[0] {
		t.Fatalf("growth inside a block changed the table: %v -> %v", tab, tab2)
	}
	if n := m.Needed(1, 33); n != 1 {
		t.Fatalf("Needed(33) = %d, want 1", n)
	}
	if _, err := m.Ensure(2, 48); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("over-allocation: err = %v, want ErrNoBlocks", err)
	}
	if m.Used() != 2 {
		t.Fatalf("failed Ensure allocated blocks: used %d", m.Used())
	}
	if err := m.CheckLeaks(); err == nil {
		t.Fatal("CheckLeaks passed while sequence 1 holds blocks")
	}
	if n := m.Release(1); n != 2 {
		t.Fatalf("Release freed %d, want 2", n)
	}
	if n := m.Release(1); n != 0 {
		t.Fatalf("second Release freed %d, want 0", n)
	}
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(3, 64); err != nil {
		t.Fatalf("whole pool after release: %v", err)
	}
	if m.Free() != 0 {
		t.Fatalf("free %d, want 0", m.Free())
	}
	m.Release(3)
}

func TestNewRejectsBadSizes(t *testing.T) {
	for _, c := range [][2]int{{0, 16}, {4, 0}, {-1, 16}} {
		if _, err := New(c[0], c[1]); err == nil {
			t.Errorf("New(%d, %d) accepted", c[0], c[1])
		}
	}
	m, _ := New(1, 1)
	if _, err := m.Ensure(1, -1); err == nil {
		t.Error("Ensure with negative positions accepted")
	}
	if _, err := m.Ensure(1, 0); err != nil || m.Sequences() != 0 {
		t.Errorf("Ensure(0) err %v, sequences %d; want no-op", err, m.Sequences())
	}
}

func TestConcurrentUse(t *testing.T) {
	m, _ := New(64, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := uint64(g*1000 + i)
				for n := 1; n <= 40; n += 7 {
					if _, err := m.Ensure(id, n); err != nil && !errors.Is(err, ErrNoBlocks) {
						t.Error(err)
					}
				}
				_ = m.Used()
				m.Release(id)
			}
		}()
	}
	wg.Wait()
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}
