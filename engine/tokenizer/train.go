package tokenizer

import (
	"bytes"
	"container/heap"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// defaultCorpus is the English text TrainDefault learns from, shipped in
// the repository so that a fresh machine needs nothing downloaded
// (corpus/english.txt; corpus/gen_corpus.py says how it was composed).
//
//go:embed corpus/english.txt
var defaultCorpus []byte

// trainSpecial are the added tokens of every trained tokenizer: the Qwen
// ChatML ones and the Llama 3 ones, so that one small tokenizer serves the
// Qwen3, Qwen2 and Llama synthetic checkpoints. They take the last ids.
var trainSpecial = [...]string{
	"<|endoftext|>", "<|im_start|>", "<|im_end|>",
	"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
}

// TrainSpecialTokens returns the special tokens Train adds, in id order
// (they take the last ids of the vocabulary).
func TrainSpecialTokens() []string { return append([]string(nil), trainSpecial[:]...) }

// trainChatTemplate is the Qwen-style (ChatML) Jinja template written into
// tokenizer_config.json; ApplyChat renders the same text.
const trainChatTemplate = `{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`

// TrainDefault trains a deterministic byte-level BPE tokenizer with
// vocabSize ids in all (256 bytes, merges, and the 8 TrainSpecialTokens) on
// the English corpus embedded in this package, and returns the contents of
// tokenizer.json and tokenizer_config.json.
func TrainDefault(vocabSize int) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	return Train(defaultCorpus, vocabSize)
}

// Train is TrainDefault on a caller-supplied corpus. Text is split with
// Qwen's pre-tokenizer; the most frequent adjacent pair is merged first,
// ties going to the lexicographically smallest (left, right) byte strings,
// so the output is a pure function of (corpus, vocabSize). When the corpus
// runs out of pairs the vocabulary is smaller than asked; the special
// tokens then follow the last merge.
func Train(corpus []byte, vocabSize int) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	minSize := 256 + len(trainSpecial)
	if vocabSize < minSize {
		return nil, nil, fmt.Errorf("vocabulary size %d is too small: a byte-level BPE tokenizer needs at least %d ids (256 bytes and %d special tokens)", vocabSize, minSize, len(trainSpecial))
	}
	if vocabSize > maxVocab {
		return nil, nil, fmt.Errorf("vocabulary size %d is too large (at most %d)", vocabSize, maxVocab)
	}
	toks, merges := trainBPE(string(corpus), vocabSize-len(trainSpecial))
	tj, err := trainedTokenizerJSON(toks, merges)
	if err != nil {
		return nil, nil, err
	}
	cj, err := trainedConfigJSON(len(toks))
	if err != nil {
		return nil, nil, err
	}
	return tj, cj, nil
}

// trainer state: unique words as symbol sequences with their counts, pair
// counts, and which words contain each pair.
type trainer struct {
	toks   [][]byte // id → bytes
	words  [][]int32
	counts []int64
	pairs  map[uint64]int64
	where  map[uint64][]int32
	pq     pairHeap
}

// trainBPE learns merges until the model vocabulary has size ids.
func trainBPE(text string, size int) (toks [][]byte, merges [][2]int32) {
	wc := map[string]int64{}
	for i := 0; i < len(text); {
		e := scanQwen(text, i, 1)
		wc[text[i:e]]++
		i = e
	}
	keys := make([]string, 0, len(wc))
	for k := range wc {
		keys = append(keys, k)
	}
	slices.Sort(keys) // determinism: word order must not depend on map order
	tr := &trainer{pairs: map[uint64]int64{}, where: map[uint64][]int32{}}
	for b := 0; b < 256; b++ {
		tr.toks = append(tr.toks, []byte{byte(b)})
	}
	tr.pq.t = tr
	for wi, k := range keys {
		w := make([]int32, len(k))
		for i := 0; i < len(k); i++ {
			w[i] = int32(k[i])
		}
		tr.words = append(tr.words, w)
		tr.counts = append(tr.counts, wc[k])
		tr.addPairs(int32(wi), +1)
	}
	for p, c := range tr.pairs {
		tr.pq.items = append(tr.pq.items, pairItem{p, c})
	}
	heap.Init(&tr.pq)

	seen := map[int32]bool{}
	byBytes := map[string]int32{}
	for i, t := range tr.toks {
		byBytes[string(t)] = int32(i)
	}
	for len(tr.toks) < size && tr.pq.Len() > 0 {
		it := heap.Pop(&tr.pq).(pairItem)
		if tr.pairs[it.pair] != it.count || it.count <= 0 {
			continue // stale entry
		}
		a, b := int32(it.pair>>32), int32(uint32(it.pair))
		joined := string(tr.toks[a]) + string(tr.toks[b])
		// Two different splits can join to the same bytes ("ab"+"c" and
		// "a"+"bc"): the second merge reuses the token, so the vocabulary
		// never holds one piece twice (tokenizer.json could not say so).
		nt, ok := byBytes[joined]
		if !ok {
			nt = int32(len(tr.toks))
			tr.toks = append(tr.toks, []byte(joined))
			byBytes[joined] = nt
		}
		merges = append(merges, [2]int32{a, b})
		changed := map[uint64]bool{}
		clear(seen)
		for _, wi := range tr.where[it.pair] {
			if seen[wi] {
				continue
			}
			seen[wi] = true
			tr.mergeIn(wi, a, b, nt, changed)
		}
		delete(tr.where, it.pair)
		for p := range changed {
			if c := tr.pairs[p]; c > 0 {
				heap.Push(&tr.pq, pairItem{p, c})
			} else {
				delete(tr.pairs, p)
			}
		}
	}
	return tr.toks, merges
}

// addPairs adds (sign +1) or removes (-1) a word's pair occurrences.
func (tr *trainer) addPairs(wi int32, sign int64) {
	w := tr.words[wi]
	c := tr.counts[wi] * sign
	for i := 0; i+1 < len(w); i++ {
		p := pairKey(w[i], w[i+1])
		tr.pairs[p] += c
		if sign > 0 {
			tr.where[p] = append(tr.where[p], wi)
		}
	}
}

// mergeIn replaces (a, b) by nt in word wi, left to right without overlap,
// and updates the pair counts, recording every pair whose count changed.
func (tr *trainer) mergeIn(wi, a, b, nt int32, changed map[uint64]bool) {
	w := tr.words[wi]
	has := false
	for i := 0; i+1 < len(w); i++ {
		if w[i] == a && w[i+1] == b {
			has = true
			break
		}
	}
	if !has {
		return
	}
	for i := 0; i+1 < len(w); i++ {
		changed[pairKey(w[i], w[i+1])] = true
	}
	c := tr.counts[wi]
	for i := 0; i+1 < len(w); i++ {
		tr.pairs[pairKey(w[i], w[i+1])] -= c
	}
	out := w[:0]
	for i := 0; i < len(w); i++ {
		if i+1 < len(w) && w[i] == a && w[i+1] == b {
			out = append(out, nt)
			i++
			continue
		}
		out = append(out, w[i])
	}
	tr.words[wi] = out
	for i := 0; i+1 < len(out); i++ {
		p := pairKey(out[i], out[i+1])
		tr.pairs[p] += c
		changed[p] = true
		if out[i] == nt || out[i+1] == nt {
			tr.where[p] = append(tr.where[p], wi)
		}
	}
}

type pairItem struct {
	pair  uint64
	count int64
}

// pairHeap orders pairs by count (highest first), then by the bytes of the
// left and right tokens (smallest first).
type pairHeap struct {
	items []pairItem
	t     *trainer
}

func (h *pairHeap) Len() int { return len(h.items) }
func (h *pairHeap) Less(i, j int) bool {
	x, y := h.items[i], h.items[j]
	if x.count != y.count {
		return x.count > y.count
	}
	if c := bytes.Compare(h.t.toks[x.pair>>32], h.t.toks[y.pair>>32]); c != 0 {
		return c < 0
	}
	return bytes.Compare(h.t.toks[uint32(x.pair)], h.t.toks[uint32(y.pair)]) < 0
}
func (h *pairHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pairHeap) Push(x any)    { h.items = append(h.items, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	n := len(h.items) - 1
	it := h.items[n]
	h.items = h.items[:n]
	return it
}

// jstr encodes a JSON string without HTML escaping, so pieces stay readable.
func jstr(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimRight(b.Bytes(), "\n")
}

const byteLevelJSON = `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`

// trainedTokenizerJSON writes tokenizer.json in HF's layout (keys in HF's
// order, vocabulary in id order) so that equal inputs give equal bytes.
func trainedTokenizerJSON(toks [][]byte, merges [][2]int32) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range trainSpecial {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}", len(toks)+i, jstr(s))
	}
	b.WriteString("\n  ],\n  \"normalizer\": {\"type\": \"NFC\"},\n")
	b.WriteString("  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ")
	b.Write(jstr(patternQwen2))
	b.WriteString("}, \"behavior\": \"Isolated\", \"invert\": false}, " + byteLevelJSON + "]},\n")
	b.WriteString("  \"post_processor\": " + byteLevelJSON + ",\n")
	b.WriteString("  \"decoder\": " + byteLevelJSON + ",\n")
	b.WriteString("  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n    \"vocab\": {")
	for id, t := range toks {
		if id > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n      ")
		b.Write(jstr(byteLevelEncode(string(t))))
		b.WriteString(": " + strconv.Itoa(id))
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n      [")
		b.Write(jstr(byteLevelEncode(string(toks[m[0]]))))
		b.WriteString(", ")
		b.Write(jstr(byteLevelEncode(string(toks[m[1]]))))
		b.WriteString("]")
	}
	b.WriteString("\n    ]\n  }\n}\n")
	if !json.Valid(b.Bytes()) {
		return nil, fmt.Errorf("internal error: trained tokenizer.json is not valid JSON; please report it")
	}
	return b.Bytes(), nil
}

// trainedConfigJSON writes tokenizer_config.json: the added tokens, the
// Qwen-style chat template, and eos/bos/pad.
func trainedConfigJSON(modelVocab int) ([]byte, error) {
	type tokInfo struct {
		Content    string `json:"content"`
		LStrip     bool   `json:"lstrip"`
		Normalized bool   `json:"normalized"`
		RStrip     bool   `json:"rstrip"`
		SingleWord bool   `json:"single_word"`
		Special    bool   `json:"special"`
	}
	dec := map[string]tokInfo{}
	for i, s := range trainSpecial {
		dec[strconv.Itoa(modelVocab+i)] = tokInfo{Content: s, Special: true}
	}
	cfg := map[string]any{
		"add_bos_token":                false,
		"add_eos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         dec,
		"additional_special_tokens":    trainSpecial[1:],
		"bos_token":                    "<|begin_of_text|>",
		"chat_template":                trainChatTemplate,
		"clean_up_tokenization_spaces": false,
		"eos_token":                    "<|im_end|>",
		"errors":                       "replace",
		"model_max_length":             32768,
		"pad_token":                    "<|endoftext|>",
		"split_special_tokens":         false,
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"unk_token":                    nil,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, fmt.Errorf("writing tokenizer_config.json: %w", err)
	}
	return b.Bytes(), nil
}
