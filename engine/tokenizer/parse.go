package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Parsing tokenizer.json: the model (vocabulary, merges, added tokens) and
// the tables built from it.

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	Version      string          `json:"version"`
	AddedTokens  []addedJSON     `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        modelJSON       `json:"model"`
}

type addedJSON struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Dropout                 *float64         `json:"dropout"`
}

// maxVocab bounds ids so that a hostile file cannot make us allocate
// gigabytes for an id like 2^31.
const maxVocab = 1 << 24

// meta is the small, structural part of a tokenizer, kept as JSON in the
// binary cache.
type meta struct {
	Added        []addedToken    `json:"added"`
	NFC          bool            `json:"nfc"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	IgnoreMerges bool            `json:"ignore_merges"`
	UnkID        int32           `json:"unk_id"`
	FuseUnk      bool            `json:"fuse_unk"`
	MergeCount   int             `json:"merge_count"`
}

// parse builds a tokenizer from tokenizer.json. Config-declared added
// tokens (cfg.added) are merged in the way transformers does.
func parse(data []byte, cfg *config) (*Tokenizer, error) {
	var f fileJSON
	merges, ferr := fastDecodeFile(data, &f)
	if ferr != nil {
		f = fileJSON{}
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("not valid tokenizer JSON (is the file truncated?): %w", err)
		}
		var err error
		if merges, err = parseMerges(f.Model.Merges); err != nil {
			return nil, err
		}
	}
	if f.Version != "" && f.Version != "1.0" {
		return nil, fmt.Errorf("tokenizer.json version %q is not supported (want 1.0)", f.Version)
	}
	m := &f.Model
	if err := checkModel(m); err != nil {
		return nil, err
	}
	nfc, err := parseNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	pre, fast, err := parsePreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	pieces, present, err := vocabPieces(m.Vocab)
	if err != nil {
		return nil, err
	}
	added, err := addedTokens(append(append([]addedJSON(nil), f.AddedTokens...), cfg.added...), m.Vocab)
	if err != nil {
		return nil, err
	}
	numIDs := len(pieces)
	for _, a := range added {
		numIDs = max(numIDs, int(a.ID)+1)
	}
	mt, err := buildMerges(merges, m.Vocab, numIDs)
	if err != nil {
		return nil, err
	}
	unkID := int32(-1)
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		unkID = int32(id)
	}

	md := meta{Added: added, NFC: nfc, PreTokenizer: f.PreTokenizer, IgnoreMerges: m.IgnoreMerges, UnkID: unkID, FuseUnk: m.FuseUnk, MergeCount: len(merges)}
	t := &Tokenizer{merges: mt}
	if err := t.setMeta(md, pre, fast); err != nil {
		return nil, err
	}
	t.buildTables(pieces, present)
	return t, nil
}

// checkModel refuses the BPE variants this package does not implement.
func checkModel(m *modelJSON) error {
	if m.Type != "" && m.Type != "BPE" {
		return fmt.Errorf("model type %q is not supported: only byte-level BPE tokenizers (Qwen, Llama 3, GPT-2 style) are", m.Type)
	}
	if m.Vocab == nil {
		return errors.New("model.vocab is missing: not a BPE tokenizer.json")
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") || (m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return errors.New("BPE with continuing_subword_prefix or end_of_word_suffix is not supported (not a byte-level tokenizer)")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("BPE dropout %v is not supported for inference", *m.Dropout)
	}
	return nil
}

// vocabPieces inverts the vocabulary: id → piece, and which ids exist.
func vocabPieces(vocab map[string]int64) (pieces []string, present []bool, err error) {
	maxID := int64(-1)
	for s, id := range vocab {
		if id < 0 || id >= maxVocab {
			return nil, nil, fmt.Errorf("vocab entry %q has id %d, outside [0, %d)", s, id, maxVocab)
		}
		maxID = max(maxID, id)
	}
	pieces = make([]string, maxID+1)
	present = make([]bool, maxID+1)
	for s, id := range vocab {
		if present[id] && pieces[id] != s {
			// Two pieces with one id: keep the smaller for determinism.
			if s > pieces[id] {
				continue
			}
		}
		pieces[id] = s
		present[id] = true
	}
	return pieces, present, nil
}

// addedTokens gives the added tokens ids as HF's
// AddedVocabulary::add_tokens assigns them: the model id when the content
// is a model piece, else the next free id after the model vocabulary
// (tokenizer.json's "id" is only a hint; HF warns when it differs). A
// later entry with the same content replaces the earlier one, keeping its
// id.
func addedTokens(toks []addedJSON, vocab map[string]int64) ([]addedToken, error) {
	nextID := int64(len(vocab))
	var added []addedToken
	addedIdx := map[string]int{}
	for _, a := range toks {
		if a.Content == "" {
			continue
		}
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		at := addedToken{Content: a.Content, SingleWord: a.SingleWord, LStrip: a.LStrip, RStrip: a.RStrip, Normalized: normalized, Special: a.Special}
		if k, ok := addedIdx[a.Content]; ok {
			at.ID = added[k].ID
			added[k] = at
			continue
		}
		if id, ok := vocab[a.Content]; ok {
			at.ID = int32(id)
		} else {
			if nextID >= maxVocab {
				return nil, fmt.Errorf("too many added tokens (id %d)", nextID)
			}
			at.ID = int32(nextID)
			nextID++
		}
		addedIdx[a.Content] = len(added)
		added = append(added, at)
	}
	return added, nil
}

// buildMerges turns the merge list into the rank table; every piece of a
// merge, and its result, must be in the vocabulary (whose ids, added
// tokens included, are below numIDs).
func buildMerges(merges [][2]string, vocab map[string]int64, numIDs int) (mergeTable, error) {
	mt, err := newMergeTable(len(merges), numIDs)
	if err != nil {
		return mt, err
	}
	for rank, p := range merges {
		a, ok := vocab[p[0]]
		if !ok {
			return mt, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank+1, p[0], p[1], p[0])
		}
		b, ok := vocab[p[1]]
		if !ok {
			return mt, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank+1, p[0], p[1], p[1])
		}
		c, ok := vocab[p[0]+p[1]]
		if !ok {
			return mt, fmt.Errorf("merge %d (%q %q): the merged piece %q is not in the vocabulary", rank+1, p[0], p[1], p[0]+p[1])
		}
		mt.put(int32(a), int32(b), uint32(rank), int32(c))
	}
	return mt, nil
}

// setMeta installs the structural part (shared by parse and the cache).
func (t *Tokenizer) setMeta(md meta, pre []preStep, fast int) error {
	if pre == nil && fast == 0 {
		var err error
		pre, fast, err = parsePreTokenizer(md.PreTokenizer)
		if err != nil {
			return err
		}
	}
	t.added = md.Added
	t.nfc = md.NFC
	t.pre = pre
	t.fastPath = fast
	t.ignoreMerges = md.IgnoreMerges
	t.unkID = md.UnkID
	t.fuseUnk = md.FuseUnk
	t.mergeCount = md.MergeCount
	t.rawPre = md.PreTokenizer
	t.special = map[int32]bool{}
	var raw, normed []addedToken
	for _, a := range md.Added {
		if a.Special {
			t.special[a.ID] = true
		}
		if a.Normalized {
			if t.nfc {
				a.Content = nfcString(a.Content)
			}
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.rawMatch = newAddedMatcher(raw)
	t.normMatch = newAddedMatcher(normed)
	t.scratch.New = func() any { return new(bpeScratch) }
	return nil
}

// buildTables lays out the pieces per id, added tokens included, and the
// byte → id table.
func (t *Tokenizer) buildTables(pieces []string, present []bool) {
	n := len(pieces)
	for _, a := range t.added {
		n = max(n, int(a.ID)+1)
	}
	for len(pieces) < n {
		pieces = append(pieces, "")
		present = append(present, false)
	}
	for _, a := range t.added {
		// simple_id_to_token: the (normalised) content replaces the piece.
		c := a.Content
		if a.Normalized && t.nfc {
			c = nfcString(c)
		}
		pieces[a.ID] = c
		present[a.ID] = true
	}
	size := 0
	for id, ok := range present {
		if ok {
			size += len(pieces[id])
		}
	}
	var pb strings.Builder
	pb.Grow(size)
	pieceOff := make([]uint32, n+1)
	t.present = make([]byte, n)
	for id := 0; id < n; id++ {
		pieceOff[id] = uint32(pb.Len())
		if present[id] {
			pb.WriteString(pieces[id])
			t.present[id] = 1
		}
	}
	pieceOff[n] = uint32(pb.Len())
	t.pieces, t.pieceOff = pb.String(), pieceOff
	for b := 0; b < 256; b++ {
		t.byteID[b] = -1
	}
	// The byte alphabet: model pieces only (an added token never stands
	// for a byte inside a word).
	isAdded := map[int32]bool{}
	for _, a := range t.added {
		isAdded[a.ID] = true
	}
	m := make(map[string]int32, 256)
	for id := 0; id < n; id++ {
		if present[id] && !isAdded[int32(id)] && pieceOff[id+1]-pieceOff[id] <= 2 {
			m[pieces[id]] = int32(id)
		}
	}
	for b := 0; b < 256; b++ {
		if id, ok := m[string(byteToRune[b])]; ok {
			t.byteID[b] = id
		}
	}
}

// parseMerges accepts both forms HF writes: "a b" strings (split on the
// single space) and [a, b] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model.merges is neither a list of \"a b\" strings nor of [a, b] pairs: %w", err)
	}
	pairs = make([][2]string, 0, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("merge %d %q is not two pieces separated by one space", i+1, l)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, nil
}
