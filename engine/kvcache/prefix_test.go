package kvcache

import (
	"errors"
	"slices"
	"testing"
)

func seqTokens(blocks ...int32) []int32 {
	var out []int32
	for _, b := range blocks {
		out = append(out, b*10, b*10+1, b*10+2, b*10+3)
	}
	return out
}

// fill allocates and commits a sequence of the given tokens, as if its
// prefill had run, and returns its table.
func fill(t *testing.T, m *Manager, seq uint64, toks []int32) []int32 {
	t.Helper()
	tab, err := m.Ensure(seq, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	m.Commit(seq, toks, len(toks))
	return tab
}

func TestPrefixMatchAttachRelease(t *testing.T) {
	m, _ := New(8, 4)
	a := seqTokens(1, 2, 3)
	tabA := fill(t, m, 1, append(slices.Clone(a), 99)) // 3 full blocks + 1 partial
	if m.Cached() != 3 {
		t.Fatalf("cached %d blocks, want the 3 full ones", m.Cached())
	}
	// A longer sequence with the same first two blocks hits them, in order.
	b := append(seqTokens(1, 2, 7), 5)
	hit := m.Match(b)
	if !slices.Equal(hit, tabA[:2]) {
		t.Fatalf("match %v, want %v", hit, tabA[:2])
	}
	if n, err := m.Attach(2, hit); err != nil || n != 2 {
		t.Fatalf("attach: %d %v", n, err)
	}
	if m.Used() != 4 {
		t.Fatalf("used %d, want 4 (shared blocks count once)", m.Used())
	}
	tabB, err := m.Ensure(2, len(b))
	if err != nil || !slices.Equal(tabB[:2], tabA[:2]) || slices.Contains(tabA, tabB[2]) {
		t.Fatalf("table after attach %v (a: %v), %v", tabB, tabA, err)
	}
	m.Release(1)
	// Sequence 1's third block is cached and unheld: evictable, so free.
	if m.Used() != 4 || m.Free() != 4 {
		t.Fatalf("after releasing 1: used %d free %d, want 4/4", m.Used(), m.Free())
	}
	m.Release(2)
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	if m.Used() != 0 || m.Cached() != 3 {
		t.Fatalf("after all: used %d cached %d", m.Used(), m.Cached())
	}
	// The whole chain is still there for a third sequence.
	if hit := m.Match(a); len(hit) != 3 {
		t.Fatalf("cached chain lost: match %v", hit)
	}
}

// A block is named by its whole prefix: the same tokens after a different
// prefix, or at another position, are not a hit.
func TestPrefixHashChain(t *testing.T) {
	m, _ := New(8, 4)
	fill(t, m, 1, seqTokens(1, 2))
	m.Release(1)
	if hit := m.Match(seqTokens(3, 2)); len(hit) != 0 {
		t.Fatalf("block 2 after a different first block matched: %v", hit)
	}
	if hit := m.Match(seqTokens(2)); len(hit) != 0 {
		t.Fatalf("block 2 at position 0 matched: %v", hit)
	}
	if hit := m.Match(seqTokens(1, 3)); len(hit) != 1 {
		t.Fatalf("shared first block: match %v, want 1 block", hit)
	}
	// A partial trailing block never matches.
	if hit := m.Match(seqTokens(1)[:3]); len(hit) != 0 {
		t.Fatalf("3 of 4 tokens matched a block: %v", hit)
	}
	// Attach refuses a chain that does not start at the root.
	tab := m.Match(seqTokens(1, 2))
	if n, _ := m.Attach(2, tab[1:]); n != 0 {
		t.Fatalf("attached %d blocks of a chain without its first block", n)
	}
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

// Under pressure allocation evicts unheld cached blocks, least recently
// released first (a sequence's tail before its head), and never a held one.
func TestPrefixEvictionUnderPressure(t *testing.T) {
	m, _ := New(6, 4)
	tabA := fill(t, m, 1, seqTokens(1, 2, 3))
	m.Release(1)
	tabB := fill(t, m, 2, seqTokens(4, 5))
	if m.Evictions() != 0 || m.Cached() != 5 {
		t.Fatalf("evictions %d cached %d before pressure", m.Evictions(), m.Cached())
	}
	// Hold sequence 2's blocks; take 2 more than the free list has.
	tabC, err := m.Ensure(3, 12) // 3 blocks: 1 free + 2 evicted
	if err != nil {
		t.Fatal(err)
	}
	if m.Evictions() != 2 {
		t.Fatalf("evictions %d, want 2", m.Evictions())
	}
	for _, b := range tabB {
		if slices.Contains(tabC, b) {
			t.Fatalf("a held block %d was handed out again: %v", b, tabC)
		}
	}
	// Sequence 1 was released last block first, so its blocks 3 and 2
	// went first and its head is still cached.
	if hit := m.Match(seqTokens(1, 2, 3)); !slices.Equal(hit, tabA[:1]) {
		t.Fatalf("after eviction: match %v, want the head %v", hit, tabA[:1])
	}
	if _, err := m.Ensure(4, 8); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("over-allocation: %v", err)
	}
	m.Release(2)
	m.Release(3)
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	// Everything is reclaimable: the whole pool can be taken.
	if _, err := m.Ensure(5, 24); err != nil {
		t.Fatalf("pool not reclaimable after release: %v (free %d)", err, m.Free())
	}
	if m.Cached() != 0 {
		t.Fatalf("taking the whole pool left %d cached blocks", m.Cached())
	}
	m.Release(5)
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

// Fork replaces a shared block with a private one and keeps the shared one
// cached for others.
func TestPrefixFork(t *testing.T) {
	m, _ := New(4, 4)
	toks := seqTokens(1, 2)
	tabA := fill(t, m, 1, toks)
	m.Release(1)
	if n, _ := m.Attach(2, m.Match(toks)); n != 2 {
		t.Fatal("attach failed")
	}
	src, dst, err := m.Fork(2, 1)
	if err != nil || src != tabA[1] || dst == src {
		t.Fatalf("fork: %d -> %d, %v", src, dst, err)
	}
	if tab := m.Table(2); tab[0] != tabA[0] || tab[1] != dst {
		t.Fatalf("table after fork %v", tab)
	}
	if hit := m.Match(toks); !slices.Equal(hit, tabA) {
		t.Fatalf("forked-from block left the cache: %v", hit)
	}
	// Committing the forked copy does not displace the cached original.
	m.Commit(2, toks, len(toks))
	if hit := m.Match(toks); !slices.Equal(hit, tabA) {
		t.Fatalf("commit of a duplicate replaced the cached block: %v", hit)
	}
	if _, _, err := m.Fork(2, 5); err == nil {
		t.Fatal("fork of a block past the table accepted")
	}
	m.Release(2)
	if err := m.CheckLeaks(); err != nil {
		t.Fatal(err)
	}
	if m.Used() != 0 || m.Free() != 4 {
		t.Fatalf("used %d free %d", m.Used(), m.Free())
	}
}
