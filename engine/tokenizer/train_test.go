package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// trainDir trains the default tokenizer at size and writes it to a
// temporary model directory.
func trainDir(t testing.TB, size int) string {
	t.Helper()
	tj, cj, err := TrainDefault(size)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTrainDefault(t *testing.T) {
	const size = 8192
	dir := trainDir(t, size)
	tok, _, err := LoadWith(dir, LoadOptions{CacheDir: "-"})
	if err != nil {
		t.Fatalf("trained tokenizer does not load: %v", err)
	}
	if tok.VocabSize() != size {
		t.Errorf("VocabSize = %d, want %d", tok.VocabSize(), size)
	}
	for i, s := range TrainSpecialTokens() {
		id, ok := tok.TokenID(s)
		if !ok || int(id) != size-len(TrainSpecialTokens())+i {
			t.Errorf("special %s: id %d %v", s, id, ok)
		}
	}
	text := "The engineer walked to the harbour at 6 o'clock; she'd never seen 42 boats!"
	ids := tok.Encode(text)
	if got := tok.Decode(ids); got != text {
		t.Errorf("round trip: %q", got)
	}
	if len(ids) > len(text)/2 {
		t.Errorf("%d ids for %d bytes: the merges are not being used", len(ids), len(text))
	}
	if tok.ChatFormat() != ChatQwen {
		t.Errorf("chat format %q, want qwen", tok.ChatFormat())
	}
	eos, ok := tok.EOS()
	if im, _ := tok.TokenID("<|im_end|>"); !ok || eos != im {
		t.Errorf("EOS = %d %v", eos, ok)
	}
}

func TestTrainDeterministic(t *testing.T) {
	a1, b1, err := TrainDefault(1024)
	if err != nil {
		t.Fatal(err)
	}
	a2, b2, err := TrainDefault(1024)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a1, a2) || !bytes.Equal(b1, b2) {
		t.Fatal("two trainings of the same corpus differ")
	}
}

func TestTrainSmallCorpus(t *testing.T) {
	// A corpus with few pairs stops early instead of failing.
	tj, _, err := Train([]byte("aaaa bbbb"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("aaaa"); len(got) != 1 {
		t.Errorf("aaaa → %v, want one token", got)
	}
	if _, _, err := Train([]byte("x"), 100); err == nil {
		t.Error("vocabulary below 264 accepted")
	}
}

func TestTrainTieBreak(t *testing.T) {
	// "ab" and "cd" occur equally often: "a"+"b" sorts first and must be
	// the first merge.
	tj, _, err := Train([]byte("cd\nab\ncd\nab"), 256+8+1)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tok.Encode("ab"), []int32{256}) {
		t.Errorf("first merge is not a+b: %v", tok.Encode("ab"))
	}
}

// TestCacheSeesRewrite: rewriting tokenizer.json in place must not serve
// the old tokenizer from the cache.
func TestCacheSeesRewrite(t *testing.T) {
	dir := trainDir(t, 300)
	cache := t.TempDir()
	a, _, err := LoadWith(dir, LoadOptions{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if _, st, _ := LoadWith(dir, LoadOptions{CacheDir: cache}); !st.CacheHit {
		t.Fatal("second load missed the cache")
	}
	tj, _, err := TrainDefault(400)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	b, st, err := LoadWith(dir, LoadOptions{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if st.CacheHit || b.VocabSize() == a.VocabSize() {
		t.Fatalf("stale cache served after rewrite: hit=%v vocab %d", st.CacheHit, b.VocabSize())
	}
}

// TestLlama3StyleFile runs the Llama 3 pattern and ignore_merges through a
// trained file rewritten the way Llama 3's tokenizer.json is configured.
func TestLlama3StyleFile(t *testing.T) {
	tj, _, err := TrainDefault(2000)
	if err != nil {
		t.Fatal(err)
	}
	s := string(tj)
	s = strings.Replace(s, string(jstr(patternQwen2)), string(jstr(patternLlama3)), 1)
	s = strings.Replace(s, `"ignore_merges": false`, `"ignore_merges": true`, 1)
	s = strings.Replace(s, `"normalizer": {"type": "NFC"}`, `"normalizer": null`, 1)
	tok, err := Parse([]byte(s), []byte(`{"bos_token":"<|begin_of_text|>","add_bos_token":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if tok.fastPath != 3 || !tok.ignoreMerges || tok.nfc {
		t.Fatalf("file not read as Llama 3 style: fast %d ignore %v nfc %v", tok.fastPath, tok.ignoreMerges, tok.nfc)
	}
	text := "In 2024, 1234567 engineers walked."
	if got := tok.Decode(tok.Encode(text)); got != text {
		t.Errorf("round trip %q", got)
	}
	if bos, ok := tok.BOS(); !ok || !tok.AddBOS() || tok.Piece(bos) != "<|begin_of_text|>" {
		t.Errorf("BOS %d %v", bos, ok)
	}
}

// TestConcurrentEncode exercises the shared word cache under -race.
func TestConcurrentEncode(t *testing.T) {
	tj, _, err := TrainDefault(1000)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := tok.Encode(string(defaultCorpus[:4000]))
	done := make(chan []int32)
	for g := range 4 {
		go func() {
			var last []int32
			for i := range 20 {
				last = tok.Encode(string(defaultCorpus[(g*i*97)%20000 : (g*i*97)%20000+2000]))
			}
			_ = last
			done <- tok.Encode(string(defaultCorpus[:4000]))
		}()
	}
	for range 4 {
		if got := <-done; !slices.Equal(got, want) {
			t.Fatal("concurrent Encode disagrees with sequential Encode")
		}
	}
}

// TestIgnoreMerges: with ignore_merges a word found whole in the
// vocabulary is one token even when no merge sequence builds it.
func TestIgnoreMerges(t *testing.T) {
	js := strings.Replace(string(tinyJSON("")), `"ab":256`, `"ab":256,"abc":257`, 1)
	plain, err := Parse([]byte(js), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Encode("abc"); !slices.Equal(got, []int32{256, 99}) {
		t.Errorf("without ignore_merges: %v", got)
	}
	im, err := Parse([]byte(strings.Replace(js, `"type":"BPE",`, `"type":"BPE","ignore_merges":true,`, 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := im.Encode("abc abc"); !slices.Equal(got, []int32{257, 32, 256, 99}) {
		t.Errorf("with ignore_merges: %v", got)
	}
}

// TestTrainVocabConsistent: every piece has one id, ids are dense, and
// each merge adds a piece unless an earlier merge already made it (two
// splits such as "ab"+"c" and "a"+"bc" share the piece).
func TestTrainVocabConsistent(t *testing.T) {
	for _, size := range []int{300, 8192} {
		tj, _, err := TrainDefault(size)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Model struct {
				Vocab  map[string]int `json:"vocab"`
				Merges [][2]string    `json:"merges"`
			} `json:"model"`
		}
		if err := json.Unmarshal(tj, &f); err != nil {
			t.Fatal(err)
		}
		ids := map[int]bool{}
		for _, id := range f.Model.Vocab {
			ids[id] = true
		}
		n := len(f.Model.Vocab)
		if len(ids) != n || !ids[0] || !ids[n-1] || n != 256+len(f.Model.Merges)-dupMerges(f.Model.Merges) || n != size-len(trainSpecial) {
			t.Errorf("size %d: vocab %d entries, %d distinct ids, %d merges", size, n, len(ids), len(f.Model.Merges))
		}
		for _, m := range f.Model.Merges {
			if _, ok := f.Model.Vocab[m[0]+m[1]]; !ok {
				t.Fatalf("merge %q has no piece", m)
			}
		}
	}
}

// dupMerges counts merges whose result an earlier merge already made.
func dupMerges(m [][2]string) int {
	seen := map[string]bool{}
	n := 0
	for _, p := range m {
		if seen[p[0]+p[1]] {
			n++
		}
		seen[p[0]+p[1]] = true
	}
	return n
}
