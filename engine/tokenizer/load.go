package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// LoadOptions configures Load.
type LoadOptions struct {
	// CacheDir holds binary caches of parsed tokenizer.json files, keyed by
	// the SHA-256 of tokenizer.json and tokenizer_config.json. Empty means
	// the default, os.UserCacheDir()/treni-top/tokenizers; "-" disables the
	// cache.
	CacheDir string
}

// LoadStats says what Load did, for the tokenizer_load stage's attributes.
type LoadStats struct {
	CacheHit   bool   // loaded from the binary cache
	CachePath  string // cache file used or written ("" when disabled)
	CacheError string // why the cache could not be read or written, if it mattered
	JSONBytes  int    // size of tokenizer.json
	Vocab      int    // VocabSize()
	Merges     int    // number of merges
	Added      int    // number of added tokens
}

// Load reads dir/tokenizer.json (and tokenizer_config.json when present)
// with the default cache directory.
func Load(dir string) (*Tokenizer, error) {
	t, _, err := LoadWith(dir, LoadOptions{})
	return t, err
}

// LoadWith is Load with options; it also reports what it did.
//
// With a cache directory, a hit costs a stat of both files, a read of the
// small memo that maps their (path, size, mtime) to the content hash, and
// a read of the binary cache: tokenizer.json is neither read nor hashed.
// When the memo is missing or stale the files are read and hashed, and the
// cache (keyed by that SHA-256) is used or written.
func LoadWith(dir string, opt LoadOptions) (*Tokenizer, LoadStats, error) {
	var st LoadStats
	path := filepath.Join(dir, "tokenizer.json")
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfgData, err := os.ReadFile(cfgPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, st, fmt.Errorf("reading tokenizer config: %w", err)
		}
		cfgData = nil
	}
	cfg, err := parseConfig(cfgData)
	if err != nil {
		return nil, st, fmt.Errorf("%s: %w", cfgPath, err)
	}

	cacheDir := opt.CacheDir
	if cacheDir == "" {
		if ucd, err := os.UserCacheDir(); err == nil {
			cacheDir = filepath.Join(ucd, "treni-top", "tokenizers")
		} else {
			cacheDir = "-"
		}
	}
	memo := ""
	if cacheDir != "-" {
		memo = statMemoPath(cacheDir, path, cfgPath)
		if memo != "" {
			if key, err := os.ReadFile(memo); err == nil && validKey(string(key)) {
				cacheFile := filepath.Join(cacheDir, string(key)+".tok")
				if t, err := readCache(cacheFile); err == nil {
					t.applyConfig(cfg)
					st.CacheHit, st.CachePath = true, cacheFile
					if fi, err := os.Stat(path); err == nil {
						st.JSONBytes = int(fi.Size())
					}
					st.fill(t)
					return t, st, nil
				}
			}
		}
	}

	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, st, fmt.Errorf("no tokenizer.json in %s: point at a Hugging Face model directory that has one (or write one with 'treni-top model synth'): %w", dir, err)
		}
		return nil, st, fmt.Errorf("reading tokenizer: %w", err)
	}
	st.JSONBytes = len(data)
	var cacheFile string
	if cacheDir != "-" {
		key := cacheKey(data, cfgData)
		cacheFile = filepath.Join(cacheDir, key+".tok")
		st.CachePath = cacheFile
		t, err := readCache(cacheFile)
		if err == nil {
			t.applyConfig(cfg)
			st.CacheHit = true
			st.fill(t)
			writeMemo(memo, key)
			return t, st, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			st.CacheError = err.Error()
		}
	}

	t, err := parse(data, cfg)
	if err != nil {
		return nil, st, fmt.Errorf("%s: %w", path, err)
	}
	t.applyConfig(cfg)
	if cacheFile != "" {
		if err := writeCache(cacheFile, t); err != nil {
			// A read-only or full cache directory must not stop the load.
			st.CacheError = err.Error()
		} else {
			writeMemo(memo, strings.TrimSuffix(filepath.Base(cacheFile), ".tok"))
		}
	}
	st.fill(t)
	return t, st, nil
}

func (st *LoadStats) fill(t *Tokenizer) {
	st.Vocab = t.VocabSize()
	st.Merges = t.mergeCount
	st.Added = len(t.added)
}

// Parse builds a tokenizer from the contents of tokenizer.json and,
// optionally (nil), tokenizer_config.json, without any cache.
func Parse(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	cfg, err := parseConfig(tokenizerConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	t, err := parse(tokenizerJSON, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t.applyConfig(cfg)
	return t, nil
}

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
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported: only byte-level BPE tokenizers (Qwen, Llama 3, GPT-2 style) are", m.Type)
	}
	if m.Vocab == nil {
		return nil, errors.New("model.vocab is missing: not a BPE tokenizer.json")
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") || (m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return nil, errors.New("BPE with continuing_subword_prefix or end_of_word_suffix is not supported (not a byte-level tokenizer)")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("BPE dropout %v is not supported for inference", *m.Dropout)
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

	// Vocabulary: id → piece.
	maxID := int64(-1)
	for s, id := range m.Vocab {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("vocab entry %q has id %d, outside [0, %d)", s, id, maxVocab)
		}
		maxID = max(maxID, id)
	}
	pieces := make([]string, maxID+1)
	present := make([]bool, maxID+1)
	for s, id := range m.Vocab {
		if present[id] && pieces[id] != s {
			// Two pieces with one id: keep the smaller for determinism.
			if s > pieces[id] {
				continue
			}
		}
		pieces[id] = s
		present[id] = true
	}

	// Added tokens get ids as HF's AddedVocabulary::add_tokens assigns
	// them: the model id when the content is a model piece, else the next
	// free id after the model vocabulary (tokenizer.json's "id" is only a
	// hint; HF warns when it differs).
	var toks []addedJSON
	toks = append(toks, f.AddedTokens...)
	toks = append(toks, cfg.added...)
	nextID := int64(len(m.Vocab))
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
		if id, ok := m.Vocab[a.Content]; ok {
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

	vocab := func(s string) (int32, bool) {
		id, ok := m.Vocab[s]
		return int32(id), ok
	}
	mt := newMergeTable(len(merges))
	for rank, p := range merges {
		a, ok := vocab(p[0])
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank+1, p[0], p[1], p[0])
		}
		b, ok := vocab(p[1])
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank+1, p[0], p[1], p[1])
		}
		c, ok := vocab(p[0] + p[1])
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): the merged piece %q is not in the vocabulary", rank+1, p[0], p[1], p[0]+p[1])
		}
		mt.put(a, b, uint32(rank), c)
	}
	unkID := int32(-1)
	if m.UnkToken != nil {
		id, ok := vocab(*m.UnkToken)
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		unkID = id
	}

	md := meta{Added: added, NFC: nfc, PreTokenizer: f.PreTokenizer, IgnoreMerges: m.IgnoreMerges, UnkID: unkID, FuseUnk: m.FuseUnk, MergeCount: len(merges)}
	t := &Tokenizer{merges: mt}
	if err := t.setMeta(md, pre, fast); err != nil {
		return nil, err
	}
	t.buildTables(pieces, present)
	return t, nil
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

// buildTables lays out pieces and decoded bytes per id, added tokens
// included, and the byte → id table.
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
	var pb, db strings.Builder
	pieceOff := make([]uint32, n+1)
	decOff := make([]uint32, n+1)
	for id := 0; id < n; id++ {
		pieceOff[id] = uint32(pb.Len())
		decOff[id] = uint32(db.Len())
		if present[id] {
			pb.WriteString(pieces[id])
			db.Write(byteLevelDecode(pieces[id]))
		}
	}
	pieceOff[n] = uint32(pb.Len())
	decOff[n] = uint32(db.Len())
	t.pieces, t.pieceOff = pb.String(), pieceOff
	t.decoded, t.decOff = db.String(), decOff
	t.present = present
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

// typed reads the "type" of a JSON object (or "" for null).
func typed(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var v struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	if v.Type == "" {
		return "", errors.New("object without a \"type\"")
	}
	return v.Type, nil
}

// parseNormalizer accepts no normalizer, NFC, or a Sequence of those.
func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	typ, err := typed(raw)
	if err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	switch typ {
	case "":
		return false, nil
	case "NFC":
		return true, nil
	case "Sequence":
		var s struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return false, fmt.Errorf("normalizer: %w", err)
		}
		for _, n := range s.Normalizers {
			sub, err := parseNormalizer(n)
			if err != nil {
				return false, err
			}
			nfc = nfc || sub
		}
		return nfc, nil
	}
	return false, fmt.Errorf("normalizer %q is not supported (byte-level BPE tokenizers use none or NFC)", typ)
}

// parsePreTokenizer reads a ByteLevel, Split or Sequence pre-tokenizer. fast
// is 1 or 3 when it is exactly [Split(Qwen2 or Llama 3 pattern, Isolated),
// ByteLevel(no prefix space, no regex)], the common case with a direct path.
func parsePreTokenizer(raw json.RawMessage) (steps []preStep, fast int, err error) {
	steps, err = preSteps(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("pre_tokenizer: %w", err)
	}
	hasByteLevel := false
	for _, s := range steps {
		hasByteLevel = hasByteLevel || s.byteLevel
	}
	if !hasByteLevel {
		return nil, 0, errors.New("pre_tokenizer has no ByteLevel step: only byte-level BPE tokenizers are supported")
	}
	if len(steps) == 2 && !steps[0].byteLevel && steps[0].behavior == "Isolated" &&
		(steps[0].pattern == patQwen2 || steps[0].pattern == patLlama3) &&
		steps[1].byteLevel && !steps[1].addPrefixSpace && !steps[1].useRegex {
		fast = 1
		if steps[0].pattern == patLlama3 {
			fast = 3
		}
	}
	return steps, fast, nil
}

func preSteps(raw json.RawMessage) ([]preStep, error) {
	typ, err := typed(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "":
		return nil, nil
	case "Sequence":
		var s struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		var out []preStep
		for _, p := range s.PreTokenizers {
			sub, err := preSteps(p)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
		return out, nil
	case "ByteLevel":
		v := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		useRegex := v.UseRegex == nil || *v.UseRegex
		return []preStep{{byteLevel: true, addPrefixSpace: v.AddPrefixSpace, useRegex: useRegex}}, nil
	case "Split":
		var v struct {
			Pattern struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		if v.Invert {
			return nil, errors.New("Split with invert=true is not supported")
		}
		if v.Behavior != "Isolated" && v.Behavior != "Removed" {
			return nil, fmt.Errorf("Split behavior %q is not supported (Isolated and Removed are)", v.Behavior)
		}
		st := preStep{behavior: v.Behavior}
		switch {
		case v.Pattern.String != nil:
			st.pattern, st.literal = patLiteral, *v.Pattern.String
		case v.Pattern.Regex != nil:
			switch *v.Pattern.Regex {
			case patternQwen2:
				st.pattern = patQwen2
			case patternLlama3:
				st.pattern = patLlama3
			case patternGPT2:
				st.pattern = patGPT2
			default:
				re, err := regexp.Compile(*v.Pattern.Regex)
				if err != nil {
					return nil, fmt.Errorf("Split regex %q is neither a known tokenizer pattern (Qwen2, Llama 3, GPT-2) nor one Go's regexp can run: %w", *v.Pattern.Regex, err)
				}
				st.pattern, st.re = patRegexp, re
			}
		default:
			return nil, errors.New("Split without a Regex or String pattern")
		}
		return []preStep{st}, nil
	}
	return nil, fmt.Errorf("pre-tokenizer %q is not supported (Sequence, Split and ByteLevel are)", typ)
}

// checkDecoder accepts a ByteLevel decoder, alone or in a Sequence.
func checkDecoder(raw json.RawMessage) error {
	typ, err := typed(raw)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	switch typ {
	case "ByteLevel":
		return nil
	case "Sequence":
		var s struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("decoder: %w", err)
		}
		if len(s.Decoders) == 1 {
			return checkDecoder(s.Decoders[0])
		}
	}
	return fmt.Errorf("decoder %q is not supported: only the ByteLevel decoder is", typ)
}
