// Package kvcache is the built-in engine's paged KV block manager: it hands
// out fixed-size blocks of KV positions to sequences, grows a sequence's block
// table as it decodes, and takes blocks back when a sequence ends. It tracks
// ownership only; the storage itself lives in the backend (host memory for
// the CPU backend, device memory for CUDA), which is why both share it.
//
// It is also the prefix cache. A full block whose positions are all
// computed can be registered under a content hash: a chain of the block's
// tokens and its parent block's hash, so a block names its whole prefix,
// not just its own tokens. A later sequence whose tokens start with the same
// blocks attaches them read-only (a reference count per block) and skips
// their prefill. When the last sequence lets go of a cached block it stays
// cached but evictable, on an LRU list; allocation takes free blocks first
// and evicts the least recently released cached block only when none is
// left. A sequence never writes into a block it shares: it only writes at
// positions past its computed prefix, and only full blocks are shared.
package kvcache

import (
	"container/list"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// ErrNoBlocks is returned (wrapped) when a request for blocks cannot be met
// from the free pool. Callers queue or preempt; it is never fatal.
var ErrNoBlocks = errors.New("kvcache: not enough free KV blocks")

// Manager owns the free list, the prefix cache and every sequence's block
// table. It is safe for concurrent use: the scheduler goroutine allocates,
// while HTTP handlers and /metrics read the counts.
type Manager struct {
	blockSize int
	total     int

	mu        sync.Mutex
	free      []int32           // stack of free, uncached block ids
	seqs      map[uint64]*table // block table per sequence
	refs      []int32           // sequences holding each block
	cached    []*entry          // per block: its cache entry, or nil
	byHash    map[uint64]*entry
	lru       *list.List // cached blocks no sequence holds, oldest first
	evictions uint64
}

// table is one sequence's blocks and the hash chain of its full blocks.
type table struct {
	blocks []int32
	// hashes[i] is the chain hash of blocks[i] once that block is full
	// and known (attached from the cache or registered by Commit).
	hashes []uint64
}

// entry is one cached block: its chain hash, its parent's, and its tokens
// (compared on a match, so a 64-bit hash collision costs a miss, never a
// wrong KV).
type entry struct {
	hash, parent uint64
	tokens       []int32
	block        int32
	elem         *list.Element // in lru while no sequence holds the block
}

// rootHash is the parent hash of a sequence's first block.
const rootHash uint64 = 0x7472656e692d6b76 // "treni-kv"

// chain is the hash of a block with these tokens after parent.
func chain(parent uint64, tokens []int32) uint64 {
	h := parent
	for _, t := range tokens {
		h = mix(h ^ uint64(uint32(t)))
	}
	return mix(h ^ uint64(len(tokens)))
}

// mix is the SplitMix64 finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// New creates a manager of numBlocks blocks of blockSize positions each.
func New(numBlocks, blockSize int) (*Manager, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kvcache: need a positive block count and block size, got %d blocks of %d positions", numBlocks, blockSize)
	}
	if numBlocks > 1<<31-1 {
		return nil, fmt.Errorf("kvcache: %d blocks exceed the int32 block id range; use larger blocks", numBlocks)
	}
	m := &Manager{
		blockSize: blockSize, total: numBlocks, free: make([]int32, numBlocks), seqs: map[uint64]*table{},
		refs: make([]int32, numBlocks), cached: make([]*entry, numBlocks), byHash: map[uint64]*entry{}, lru: list.New(),
	}
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

// Free is the number of blocks no sequence holds: unallocated ones plus
// cached ones that allocation may evict.
func (m *Manager) Free() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.avail()
}

func (m *Manager) avail() int { return len(m.free) + m.lru.Len() }

// Used is the number of blocks held by at least one sequence.
func (m *Manager) Used() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total - m.avail()
}

// Cached is the number of blocks in the prefix cache, held or not.
func (m *Manager) Cached() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byHash)
}

// Evictions counts cached blocks evicted to make room since New.
func (m *Manager) Evictions() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.evictions
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
	have := 0
	if t := m.seqs[seq]; t != nil {
		have = len(t.blocks)
	}
	return max(m.BlocksFor(n)-have, 0)
}

// take allocates one block: a free one, else the least recently released
// cached one, which leaves the cache. The caller checked avail() > 0.
func (m *Manager) take() int32 {
	if last := len(m.free) - 1; last >= 0 {
		b := m.free[last]
		m.free = m.free[:last]
		return b
	}
	e := m.lru.Remove(m.lru.Front()).(*entry)
	m.uncache(e)
	m.evictions++
	return e.block
}

func (m *Manager) uncache(e *entry) {
	delete(m.byHash, e.hash)
	m.cached[e.block] = nil
	e.elem = nil
}

// hold adds a reference to block b, taking it off the LRU list.
func (m *Manager) hold(b int32) {
	if m.refs[b] == 0 {
		if e := m.cached[b]; e != nil && e.elem != nil {
			m.lru.Remove(e.elem)
			e.elem = nil
		}
	}
	m.refs[b]++
}

// drop removes a reference to block b; at zero a cached block goes to the
// back of the LRU list and an uncached one to the free list.
func (m *Manager) drop(b int32) {
	m.refs[b]--
	if m.refs[b] > 0 {
		return
	}
	if e := m.cached[b]; e != nil {
		e.elem = m.lru.PushBack(e)
		return
	}
	m.free = append(m.free, b)
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
	if need > m.avail() {
		return nil, fmt.Errorf("sequence %d needs %d more blocks for %d positions, %d free of %d: %w",
			seq, need, n, m.avail(), m.total, ErrNoBlocks)
	}
	t := m.seqs[seq]
	if t == nil {
		if need == 0 {
			return nil, nil
		}
		t = &table{}
		m.seqs[seq] = t
	}
	for range need {
		b := m.take()
		m.refs[b]++
		t.blocks = append(t.blocks, b)
	}
	return slices.Clone(t.blocks), nil
}

// Match returns the cached blocks that hold the longest prefix of tokens
// made of whole blocks, in order, without taking them: block i is a hit
// only if blocks 0..i-1 were, since its hash names everything before it.
func (m *Manager) Match(tokens []int32) []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int32
	parent := rootHash
	for i := 0; (i+1)*m.blockSize <= len(tokens); i++ {
		blk := tokens[i*m.blockSize : (i+1)*m.blockSize]
		h := chain(parent, blk)
		e := m.byHash[h]
		if e == nil || e.parent != parent || !slices.Equal(e.tokens, blk) {
			break
		}
		out = append(out, e.block)
		parent = h
	}
	return out
}

// Attach starts seq's block table with cached blocks (as Match returned
// them, for the same tokens), holding each read-only. seq must hold no
// blocks yet; a block that is no longer cached ends the attachment there,
// and Attach returns how many blocks it took.
func (m *Manager) Attach(seq uint64, blocks []int32) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.seqs[seq]; t != nil && len(t.blocks) > 0 {
		return 0, fmt.Errorf("kvcache: sequence %d already holds %d blocks; attach a cached prefix before allocating", seq, len(t.blocks))
	}
	t := &table{}
	parent := rootHash
	for _, b := range blocks {
		if b < 0 || int(b) >= m.total {
			break
		}
		e := m.cached[b]
		if e == nil || e.parent != parent {
			break
		}
		m.hold(b)
		t.blocks = append(t.blocks, b)
		t.hashes = append(t.hashes, e.hash)
		parent = e.hash
	}
	if len(t.blocks) > 0 {
		m.seqs[seq] = t
	}
	return len(t.blocks), nil
}

// Fork gives seq a private copy of its block i: a newly allocated block
// takes its place in the table, and the shared one is let go (it stays
// cached). The caller copies src's contents into dst (or recomputes them)
// before anything else allocates, since src may be evicted from then on.
func (m *Manager) Fork(seq uint64, i int) (src, dst int32, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.seqs[seq]
	if t == nil || i < 0 || i >= len(t.blocks) {
		return 0, 0, fmt.Errorf("kvcache: sequence %d has no block %d to fork", seq, i)
	}
	if m.avail() == 0 {
		return 0, 0, fmt.Errorf("sequence %d needs a block to copy block %d into: %w", seq, i, ErrNoBlocks)
	}
	src = t.blocks[i]
	// Take before letting go of src, so src cannot be the block taken.
	dst = m.take()
	m.refs[dst]++
	t.blocks[i] = dst
	t.hashes = t.hashes[:min(len(t.hashes), i)]
	m.drop(src)
	return src, dst, nil
}

// Commit registers seq's full blocks among the first computed positions of
// tokens (the sequence's prompt and generated tokens) in the prefix cache,
// so that later sequences can attach them. A block whose content is already
// cached under another block id stays private to seq.
func (m *Manager) Commit(seq uint64, tokens []int32, computed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.seqs[seq]
	if t == nil {
		return
	}
	full := min(computed, len(tokens)) / m.blockSize
	full = min(full, len(t.blocks))
	for i := len(t.hashes); i < full; i++ {
		parent := rootHash
		if i > 0 {
			parent = t.hashes[i-1]
		}
		blk := tokens[i*m.blockSize : (i+1)*m.blockSize]
		h := chain(parent, blk)
		t.hashes = append(t.hashes, h)
		b := t.blocks[i]
		if m.byHash[h] != nil || m.cached[b] != nil {
			continue
		}
		e := &entry{hash: h, parent: parent, tokens: slices.Clone(blk), block: b}
		m.byHash[h] = e
		m.cached[b] = e
	}
}

// Table returns a copy of seq's block table (nil for an unknown sequence).
func (m *Manager) Table(seq uint64) []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.seqs[seq]; t != nil {
		return slices.Clone(t.blocks)
	}
	return nil
}

// Release lets go of all of seq's blocks and forgets the sequence. Blocks
// no other sequence holds become free, or evictable if cached. It returns
// how many blocks seq held; releasing an unknown sequence is a no-op, so
// cancellation paths may call it more than once.
func (m *Manager) Release(seq uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.seqs[seq]
	if !ok {
		return 0
	}
	delete(m.seqs, seq)
	// Last block first: the tail of a sequence is the least likely to be
	// shared, so it should be the first evicted.
	for i := len(t.blocks) - 1; i >= 0; i-- {
		m.drop(t.blocks[i])
	}
	return len(t.blocks)
}

// CheckLeaks reports an error naming every sequence that still holds blocks,
// and any block that is neither free, cached nor held (or is counted in two
// places). Tests call it after all requests have ended.
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
			errs = append(errs, fmt.Errorf("sequence %d still holds %d blocks", id, len(m.seqs[id].blocks)))
		}
	}
	if err := m.checkConsistent(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kvcache: leaked blocks (%d used of %d): %w", m.total-m.avail(), m.total, errors.Join(errs...))
	}
	return nil
}

// checkConsistent verifies that every block is in exactly one of the free
// list, the LRU list or some sequence's table (possibly several: shared),
// that reference counts match the tables, and that the cache index agrees
// with the per-block entries.
func (m *Manager) checkConsistent() error {
	where := make([]byte, m.total) // 0 nowhere, 1 free, 2 lru
	refs := make([]int32, m.total)
	for _, b := range m.free {
		if b < 0 || int(b) >= m.total {
			return fmt.Errorf("block id %d out of range in the free list", b)
		}
		if where[b] != 0 {
			return fmt.Errorf("block %d is on the free list twice", b)
		}
		if m.cached[b] != nil {
			return fmt.Errorf("block %d is free but still cached", b)
		}
		where[b] = 1
	}
	for el := m.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		if where[e.block] != 0 {
			return fmt.Errorf("block %d is both on the LRU list and elsewhere", e.block)
		}
		if m.cached[e.block] != e || m.byHash[e.hash] != e {
			return fmt.Errorf("block %d is on the LRU list without a matching cache entry", e.block)
		}
		where[e.block] = 2
	}
	for id, t := range m.seqs {
		for _, b := range t.blocks {
			if b < 0 || int(b) >= m.total {
				return fmt.Errorf("block id %d out of range in sequence %d", b, id)
			}
			if where[b] != 0 {
				return fmt.Errorf("block %d is held by sequence %d but also free or evictable", b, id)
			}
			refs[b]++
		}
	}
	for b := range m.total {
		if refs[b] != m.refs[b] {
			return fmt.Errorf("block %d has reference count %d, held by %d sequences", b, m.refs[b], refs[b])
		}
		if where[b] == 0 && refs[b] == 0 {
			return fmt.Errorf("block %d is neither free, cached nor held", b)
		}
	}
	for h, e := range m.byHash {
		if e.hash != h || m.cached[e.block] != e {
			return fmt.Errorf("cache entry %#x points at block %d, which does not point back", h, e.block)
		}
	}
	return nil
}
