// Package kvcache is the built-in engine's paged KV block manager: it hands
// out fixed-size blocks of KV positions to sequences, grows a sequence's block
// table as it decodes, and takes blocks back when a sequence ends. It tracks
// ownership only; the storage itself lives in the backend (host memory for
// the CPU backend, device memory for CUDA), which is why both share it.
package kvcache

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// ErrNoBlocks is returned (wrapped) when a request for blocks cannot be met
// from the free pool. Callers queue or preempt; it is never fatal.
var ErrNoBlocks = errors.New("kvcache: not enough free KV blocks")

// Manager owns the free list and every sequence's block table. It is safe for
// concurrent use: the scheduler goroutine allocates, while HTTP handlers and
// /metrics read the counts.
type Manager struct {
	blockSize int
	total     int

	mu   sync.Mutex
	free []int32            // stack of free block ids
	seqs map[uint64][]int32 // block table per sequence
}

// New creates a manager of numBlocks blocks of blockSize positions each.
func New(numBlocks, blockSize int) (*Manager, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kvcache: need a positive block count and block size, got %d blocks of %d positions", numBlocks, blockSize)
	}
	if numBlocks > 1<<31-1 {
		return nil, fmt.Errorf("kvcache: %d blocks exceed the int32 block id range; use larger blocks", numBlocks)
	}
	m := &Manager{blockSize: blockSize, total: numBlocks, free: make([]int32, numBlocks), seqs: map[uint64][]int32{}}
	// Low ids on top of the stack, so a fresh manager hands out 0, 1, 2, …
	// (easier to read in logs and tests).
	for i := range m.free {
		m.free[i] = int32(numBlocks - 1 - i)
	}
	return m, nil
}

// BlockSize is the number of positions per block.
func (m *Manager) BlockSize() int { return m.blockSize }

// Total is the number of blocks in the pool.
func (m *Manager) Total() int { return m.total }

// BlocksFor is how many blocks hold n positions.
func (m *Manager) BlocksFor(n int) int {
	if n <= 0 {
		return 0
	}
	return (n + m.blockSize - 1) / m.blockSize
}

// Free is the number of unallocated blocks.
func (m *Manager) Free() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.free)
}

// Used is the number of allocated blocks.
func (m *Manager) Used() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total - len(m.free)
}

// Sequences is the number of sequences holding blocks.
func (m *Manager) Sequences() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seqs)
}

// Needed is how many more blocks seq needs to hold n positions (0 when its
// table already covers them).
func (m *Manager) Needed(seq uint64, n int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.needed(seq, n)
}

func (m *Manager) needed(seq uint64, n int) int {
	need := m.BlocksFor(n) - len(m.seqs[seq])
	if need < 0 {
		return 0
	}
	return need
}

// Ensure grows seq's block table until it covers n positions (allocating the
// table on first use) and returns it. The returned slice is a copy the caller
// may keep. When the pool cannot cover the growth nothing is allocated and
// the error wraps ErrNoBlocks, so a caller can queue or preempt and retry.
func (m *Manager) Ensure(seq uint64, n int) ([]int32, error) {
	if n < 0 {
		return nil, fmt.Errorf("kvcache: negative position count %d for sequence %d", n, seq)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	need := m.needed(seq, n)
	if need > len(m.free) {
		return nil, fmt.Errorf("sequence %d needs %d more blocks for %d positions, %d free of %d: %w",
			seq, need, n, len(m.free), m.total, ErrNoBlocks)
	}
	table := m.seqs[seq]
	for range need {
		last := len(m.free) - 1
		table = append(table, m.free[last])
		m.free = m.free[:last]
	}
	if len(table) > 0 {
		m.seqs[seq] = table
	}
	return append([]int32(nil), table...), nil
}

// Table returns a copy of seq's block table (nil for an unknown sequence).
func (m *Manager) Table(seq uint64) []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int32(nil), m.seqs[seq]...)
}

// Release returns all of seq's blocks to the pool and forgets the sequence.
// It returns how many blocks were freed; releasing an unknown sequence is a
// no-op, so cancellation paths may call it more than once.
func (m *Manager) Release(seq uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	table, ok := m.seqs[seq]
	if !ok {
		return 0
	}
	delete(m.seqs, seq)
	m.free = append(m.free, table...)
	return len(table)
}

// CheckLeaks reports an error naming every sequence that still holds blocks,
// and any block that is neither free nor owned (or owned twice). Tests call
// it after all requests have ended.
func (m *Manager) CheckLeaks() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if len(m.seqs) > 0 {
		ids := make([]uint64, 0, len(m.seqs))
		for id := range m.seqs {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			errs = append(errs, fmt.Errorf("sequence %d still holds %d blocks", id, len(m.seqs[id])))
		}
	}
	if err := m.checkConsistent(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kvcache: leaked blocks (%d used of %d): %w", m.total-len(m.free), m.total, errors.Join(errs...))
	}
	return nil
}

// checkConsistent verifies every block id is in exactly one place.
func (m *Manager) checkConsistent() error {
	seen := make([]byte, m.total)
	mark := func(b int32, where string) error {
		if b < 0 || int(b) >= m.total {
			return fmt.Errorf("block id %d out of range in %s", b, where)
		}
		if seen[b] != 0 {
			return fmt.Errorf("block %d owned twice (%s)", b, where)
		}
		seen[b] = 1
		return nil
	}
	for _, b := range m.free {
		if err := mark(b, "free list"); err != nil {
			return err
		}
	}
	for id, t := range m.seqs {
		for _, b := range t {
			if err := mark(b, fmt.Sprintf("sequence %d", id)); err != nil {
				return err
			}
		}
	}
	for b, s := range seen {
		if s == 0 {
			return fmt.Errorf("block %d is neither free nor owned", b)
		}
	}
	return nil
}
