package tokenizer

import (
	"hash/maphash"
	"math/bits"
	"regexp"
	"slices"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent
// use; its word cache is internally synchronised.
type Tokenizer struct {
	// Per id: the piece as stored in the vocabulary (byte-level form for
	// model tokens, content for added tokens); the bytes it decodes to are
	// computed from it (appendByteLevelDecode) when decoding.
	pieces   string
	pieceOff []uint32
	present  []byte // 1 where the id has a piece (ids may have gaps)

	byteID       [256]int32
	merges       mergeTable
	ignoreMerges bool
	unkID        int32
	fuseUnk      bool
	mergeCount   int
	rawPre       []byte // pre_tokenizer JSON, kept for the cache

	added     []addedToken
	special   map[int32]bool
	rawMatch  *addedMatcher // added tokens with normalized=false
	normMatch *addedMatcher // added tokens with normalized=true
	nfc       bool
	pre       []preStep
	fastPath  int // 0: generic; 1: Qwen2 split; 3: Llama 3 split

	// From tokenizer_config.json.
	bosToken, eosToken, padToken string
	addBOS                       bool
	chatTemplate                 string

	pieceIdxOnce sync.Once
	pieceIdx     pieceIndex

	stopOnce sync.Once
	stopIDs  []int32 // StopTokenIDs

	words   wordCache
	scratch sync.Pool
}

// preStep is one pre-tokenizer of tokenizer.json's (possibly Sequence)
// pre_tokenizer.
type preStep struct {
	byteLevel      bool // a ByteLevel step, else a Split step
	addPrefixSpace bool // ByteLevel
	useRegex       bool // ByteLevel: split with the GPT-2 pattern

	pattern  int            // Split: patQwen2, patLlama3, patGPT2, patLiteral, patRegexp
	literal  string         // Split with a String pattern
	re       *regexp.Regexp // Split with another regex (no lookaround)
	behavior string         // Split: "Isolated" or "Removed"
}

// Split pattern kinds.
const (
	patQwen2 = iota
	patLlama3
	patGPT2
	patLiteral
	patRegexp
)

// nfcString normalises s to NFC, without allocating when it already is.
func nfcString(s string) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	return norm.NFC.String(s)
}

// maxCachedWord bounds the words kept in the cache (HF uses 256 too).
const maxCachedWord = 256

// wordCacheCap bounds the number of cached words. At the bound the cache is
// emptied, which keeps memory fixed while following the text's vocabulary.
const wordCacheCap = 1 << 15

// wordCache caches BPE results per pre-tokenized word.
type wordCache struct {
	mu sync.Mutex
	m  map[string][]int32
}

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.Lock()
	ids, ok := c.m[w]
	c.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	cp := slices.Clone(ids)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= wordCacheCap {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[strings.Clone(w)] = cp
	c.mu.Unlock()
}

// VocabSize is one more than the largest token id, added tokens included:
// the number of rows an embedding matrix needs at least.
func (t *Tokenizer) VocabSize() int { return len(t.pieceOff) - 1 }

// Piece returns the token's string as stored in the vocabulary (byte-level
// form, so " the" is "Ġthe"; added tokens verbatim), or "" for an unknown id.
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.present) || t.present[id] == 0 {
		return ""
	}
	return t.pieces[t.pieceOff[id]:t.pieceOff[id+1]]
}

// TokenID returns the id of a piece (vocabulary form, as Piece returns it)
// or of an added token's content.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	for _, a := range t.added {
		if a.Content == s {
			return a.ID, true
		}
	}
	return t.pieceID(s)
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int32) bool { return t.special[id] }

// pieceIndex finds the id of a piece: open addressing over the pieces
// blob, one uint32 per slot (id+1, 0 where free). For Qwen's 151k pieces
// it is 1 MB, where a map[string]int32 took 7 MB of heap.
type pieceIndex struct {
	slots []uint32
	mask  uint64
	seed  maphash.Seed
}

// pieceID returns the id of a piece (the highest id where two ids share
// one). The index is built on first use: encoding needs it only for
// ignore_merges vocabularies, so ordinary loads skip its cost.
func (t *Tokenizer) pieceID(s string) (int32, bool) {
	t.pieceIdxOnce.Do(t.buildPieceIndex)
	x := &t.pieceIdx
	for i := maphash.String(x.seed, s) & x.mask; ; i = (i + 1) & x.mask {
		v := x.slots[i]
		if v == 0 {
			return 0, false
		}
		if id := v - 1; t.pieces[t.pieceOff[id]:t.pieceOff[id+1]] == s {
			return int32(id), true
		}
	}
}

func (t *Tokenizer) buildPieceIndex() {
	n := 0
	for _, p := range t.present {
		if p != 0 {
			n++
		}
	}
	size := 1 << max(4, bits.Len(uint(n+n/2))) // load factor at most 2/3
	x := pieceIndex{slots: make([]uint32, size), mask: uint64(size - 1), seed: maphash.MakeSeed()}
	for id, p := range t.present {
		if p == 0 {
			continue
		}
		s := t.pieces[t.pieceOff[id]:t.pieceOff[id+1]]
		i := maphash.String(x.seed, s) & x.mask
		for {
			v := x.slots[i]
			if v == 0 || t.pieces[t.pieceOff[v-1]:t.pieceOff[v]] == s {
				x.slots[i] = uint32(id) + 1 // a later id wins, as map assignment did
				break
			}
			i = (i + 1) & x.mask
		}
	}
	t.pieceIdx = x
}

// Encode tokenizes text like HF tokenizers' encode(text,
// add_special_tokens=False): added and special tokens in the text are
// recognised, the rest is normalised, pre-tokenized and BPE-encoded. Invalid
// UTF-8 bytes are encoded as their byte tokens, so Decode gives them back.
func (t *Tokenizer) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text)/3+4)
	var spansBuf [16]span
	spans := t.rawMatch.split(text, spansBuf[:0])
	var inner [16]span
	for _, sp := range spans {
		if sp.id >= 0 {
			ids = append(ids, sp.id)
			continue
		}
		seg := text[sp.start:sp.end]
		if seg == "" {
			continue
		}
		if t.nfc {
			seg = nfcString(seg)
		}
		for _, sub := range t.normMatch.split(seg, inner[:0]) {
			if sub.id >= 0 {
				ids = append(ids, sub.id)
				continue
			}
			ids = t.encodeText(seg[sub.start:sub.end], ids)
		}
	}
	return ids
}

// encodeText pre-tokenizes and BPE-encodes normalised text.
func (t *Tokenizer) encodeText(s string, ids []int32) []int32 {
	if s == "" {
		return ids
	}
	if t.fastPath != 0 {
		for i := 0; i < len(s); {
			e := scanQwen(s, i, t.fastPath)
			ids = t.bpe(s[i:e], ids)
			i = e
		}
		return ids
	}
	words := []string{s}
	for _, st := range t.pre {
		words = st.apply(words)
	}
	for _, w := range words {
		ids = t.bpe(w, ids)
	}
	return ids
}

// apply runs one pre-tokenizer step over the current pieces; empty pieces
// are dropped as HF's PreTokenizedString::split does.
func (st *preStep) apply(in []string) []string {
	out := make([]string, 0, len(in)*2)
	for _, s := range in {
		if s == "" {
			continue
		}
		if st.byteLevel {
			if st.addPrefixSpace && !strings.HasPrefix(s, " ") {
				s = " " + s
			}
			if !st.useRegex {
				out = append(out, s)
				continue
			}
			for i := 0; i < len(s); {
				e := scanGPT2(s, i)
				out = append(out, s[i:e])
				i = e
			}
			continue
		}
		out = st.split(s, out)
	}
	return out
}

// split applies a Split step with behaviour Isolated (matches and gaps are
// pieces) or Removed (gaps only).
func (st *preStep) split(s string, out []string) []string {
	emit := func(a, b int, match bool) {
		if a >= b || (match && st.behavior == "Removed") {
			return
		}
		out = append(out, s[a:b])
	}
	switch st.pattern {
	case patQwen2, patLlama3, patGPT2:
		for i := 0; i < len(s); {
			var e int
			switch st.pattern {
			case patQwen2:
				e = scanQwen(s, i, 1)
			case patLlama3:
				e = scanQwen(s, i, 3)
			default:
				e = scanGPT2(s, i)
			}
			emit(i, e, true)
			i = e
		}
	case patLiteral:
		prev := 0
		if st.literal == "" {
			emit(0, len(s), false)
			return out
		}
		for {
			k := strings.Index(s[prev:], st.literal)
			if k < 0 {
				break
			}
			emit(prev, prev+k, false)
			emit(prev+k, prev+k+len(st.literal), true)
			prev += k + len(st.literal)
		}
		emit(prev, len(s), false)
	case patRegexp:
		prev := 0
		for _, m := range st.re.FindAllStringIndex(s, -1) {
			emit(prev, m[0], false)
			emit(m[0], m[1], true)
			prev = m[1]
		}
		emit(prev, len(s), false)
	}
	return out
}
