package tokenizer

import (
	"fmt"
	"math/bits"
)

// mergeTable maps a pair of token ids to (rank, merged id) with open
// addressing over one flat array, so that it can be stored in and used
// straight from the binary cache without rebuilding a Go map. A slot packs
// the pair and the rank into one uint64, (a<<idBits | b)<<rankBits | rank,
// and the merged id is ids[rank]: for Qwen's 151k merges that is 2 MB of
// slots and 0.6 MB of ids, where a slot of pair and a slot of (rank, id)
// took 4 MB.
type mergeTable struct {
	slots    []uint64 // packed pair and rank, emptyKey where free
	ids      []uint32 // merged id per rank
	mask     uint64
	idBits   uint // bits of a token id: ids are below 1<<idBits
	rankBits uint // bits of a rank: ranks are below 1<<rankBits - 1
}

// emptyKey marks a free slot: a rank never has all its bits set (see
// mergeBits), so no packed slot equals it.
const emptyKey = ^uint64(0)

// mergeBits returns the widths of the packed fields for numIDs token ids
// and numMerges merges, or false when they do not fit one uint64 (beyond
// 2^21 ids with 2^22 merges, far above any real vocabulary). rankBits is
// the length of numMerges itself, so the largest rank, numMerges-1, never
// fills its field.
func mergeBits(numIDs, numMerges int) (idBits, rankBits uint, ok bool) {
	idBits = uint(bits.Len(uint(max(numIDs-1, 0))))
	rankBits = uint(bits.Len(uint(numMerges)))
	return idBits, rankBits, 2*idBits+rankBits <= 64
}

// pairKey is a pair of ids as one map key (the trainer's).
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func hashPair(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> 20 }

// newMergeTable sizes a table for n merges of ids below numIDs at a load
// factor of at most 2/3 (linear probing stays short).
func newMergeTable(n, numIDs int) (mergeTable, error) {
	idBits, rankBits, ok := mergeBits(numIDs, n)
	if !ok {
		return mergeTable{}, fmt.Errorf("%d token ids with %d merges do not fit the merge table (at most 2^21 ids with 2^22 merges)", numIDs, n)
	}
	size := 1 << max(4, bits.Len(uint(n+n/2)))
	t := mergeTable{slots: make([]uint64, size), ids: make([]uint32, n), mask: uint64(size - 1), idBits: idBits, rankBits: rankBits}
	for i := range t.slots {
		t.slots[i] = emptyKey
	}
	return t, nil
}

// pair is the packed key of (a, b); both are below 1<<idBits.
func (t *mergeTable) pair(a, b int32) uint64 {
	return uint64(uint32(a))<<t.idBits | uint64(uint32(b))
}

// put inserts or replaces (a later duplicate merge wins, as when HF collects
// its merges into a HashMap).
func (t *mergeTable) put(a, b int32, rank uint32, id int32) {
	k := t.pair(a, b)
	t.ids[rank] = uint32(id)
	i := hashPair(k) & t.mask
	for {
		if s := t.slots[i]; s == emptyKey || s>>t.rankBits == k {
			t.slots[i] = k<<t.rankBits | uint64(rank)
			return
		}
		i = (i + 1) & t.mask
	}
}

// get returns the rank and merged id of (a, b).
func (t *mergeTable) get(a, b int32) (rank uint32, id int32, ok bool) {
	if len(t.slots) == 0 {
		return 0, 0, false
	}
	k := t.pair(a, b)
	i := hashPair(k) & t.mask
	for {
		s := t.slots[i]
		if s == emptyKey {
			return 0, 0, false
		}
		if s>>t.rankBits == k {
			rank = uint32(s & (1<<t.rankBits - 1))
			return rank, int32(t.ids[rank]), true
		}
		i = (i + 1) & t.mask
	}
}

// symbol is one symbol of a word being merged (HF's Symbol).
type symbol struct {
	c          int32
	prev, next int32
	n          int32 // byte length; 0 once merged into its left neighbour
}

// pending is a candidate merge in the priority queue.
type pending struct {
	pos  int32
	rank uint32
	id   int32
}

func (p pending) less(q pending) bool {
	if p.rank != q.rank {
		return p.rank < q.rank
	}
	return p.pos < q.pos
}

// bpeScratch holds the buffers of one word merge, reused across words.
type bpeScratch struct {
	syms []symbol
	heap []pending
}

func (s *bpeScratch) push(p pending) {
	h := append(s.heap, p)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].less(h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	s.heap = h
}

func (s *bpeScratch) pop() pending {
	h := s.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	s.heap = h
	return top
}

// mergeWord runs HF's BPE merge loop (models/bpe/word.rs merge_all) over
// the symbols in s.syms and appends the resulting ids to out. Merges are
// applied lowest rank first, leftmost first among equal ranks, with stale
// queue entries skipped exactly as HF does.
func (t *Tokenizer) mergeWord(s *bpeScratch, out []int32) []int32 {
	syms := s.syms
	s.heap = s.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if rank, id, ok := t.merges.get(syms[i].c, syms[i+1].c); ok {
			s.push(pending{pos: int32(i), rank: rank, id: id})
		}
	}
	for len(s.heap) > 0 {
		top := s.pop()
		cur := &syms[top.pos]
		if cur.n == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		if _, id, ok := t.merges.get(cur.c, right.c); !ok || id != top.id {
			continue
		}
		cur.c = top.id
		cur.n += right.n
		cur.next = right.next
		syms[nextPos].n = 0
		if right.next > -1 && int(right.next) < len(syms) {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if rank, id, ok := t.merges.get(syms[cur.prev].c, cur.c); ok {
				s.push(pending{pos: cur.prev, rank: rank, id: id})
			}
		}
		if cur.next >= 0 && int(cur.next) < len(syms) {
			if rank, id, ok := t.merges.get(cur.c, syms[cur.next].c); ok {
				s.push(pending{pos: top.pos, rank: rank, id: id})
			}
		}
	}
	for _, sy := range syms {
		if sy.n != 0 {
			out = append(out, sy.c)
		}
	}
	return out
}

// addSymbol appends a symbol as HF's Word::add does.
func (s *bpeScratch) addSymbol(c int32, n int32) {
	l := int32(len(s.syms))
	prev := int32(-1)
	if l > 0 {
		s.syms[l-1].next = l
		prev = l - 1
	}
	s.syms = append(s.syms, symbol{c: c, prev: prev, next: -1, n: n})
}

// bpe encodes one pre-tokenized word (raw bytes) and appends its ids.
func (t *Tokenizer) bpe(word string, out []int32) []int32 {
	if word == "" {
		return out
	}
	if len(word) == 1 && t.byteID[word[0]] >= 0 {
		return append(out, t.byteID[word[0]])
	}
	if t.ignoreMerges {
		if id, ok := t.pieceID(byteLevelEncode(word)); ok {
			return append(out, id)
		}
	}
	cacheable := len(word) < maxCachedWord
	if cacheable {
		if ids, ok := t.words.get(word); ok {
			return append(out, ids...)
		}
	}
	s := t.scratch.Get().(*bpeScratch)
	s.syms = s.syms[:0]
	// Unknown bytes (a vocabulary without the full byte alphabet) become
	// the unk token if there is one, fused when fuse_unk is set, and are
	// dropped otherwise, as HF's merge_word does.
	unkLen := int32(0)
	for i := 0; i < len(word); i++ {
		id := t.byteID[word[i]]
		if id >= 0 {
			if unkLen > 0 {
				s.addSymbol(t.unkID, unkLen)
				unkLen = 0
			}
			s.addSymbol(id, 1)
			continue
		}
		if t.unkID < 0 {
			continue
		}
		if unkLen > 0 && !t.fuseUnk {
			s.addSymbol(t.unkID, unkLen)
			unkLen = 0
		}
		unkLen++
	}
	if unkLen > 0 {
		s.addSymbol(t.unkID, unkLen)
	}
	start := len(out)
	out = t.mergeWord(s, out)
	t.scratch.Put(s)
	if cacheable {
		t.words.put(word, out[start:])
	}
	return out
}
