package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// qwen3Dir is the shared fixture: CI has ../shared beside the clone.
var qwen3Dir = filepath.Join("..", "..", "..", "shared", "fixtures", "tokenizers", "qwen3")

type goldenCase struct {
	Name    string  `json:"name"`
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"`
}

// loadQwen3 loads the fixture tokenizer without a cache; a missing fixture
// fails the test: the exactness check must not silently disappear.
// The parse is shared by the tests (it is the slow part of the package's
// tests); Tokenizer is safe for concurrent use, so sharing is sound.
func loadQwen3(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwen3Once.Do(func() {
		qwen3Tok, _, qwen3Err = LoadWith(qwen3Dir, LoadOptions{CacheDir: "-"})
	})
	if qwen3Err != nil {
		tb.Fatalf("the Qwen3 tokenizer fixture must be at %s (../shared beside the clone): %v", qwen3Dir, qwen3Err)
	}
	return qwen3Tok
}

var (
	qwen3Once sync.Once
	qwen3Tok  *Tokenizer
	qwen3Err  error
)

func readGolden(tb testing.TB) []goldenCase {
	tb.Helper()
	f, err := os.Open(filepath.Join(qwen3Dir, "golden.jsonl"))
	if err != nil {
		tb.Fatalf("golden fixture missing: %v", err)
	}
	defer f.Close()
	var cases []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatalf("golden line: %v", err)
		}
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		tb.Fatal("golden fixture is empty")
	}
	return cases
}

func TestGoldenQwen3(t *testing.T) {
	tok := loadQwen3(t)
	for _, c := range readGolden(t) {
		got := tok.Encode(c.Text)
		if c.IDs == nil {
			c.IDs = []int32{}
		}
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q)\n got  %v\n want %v", c.Name, c.Text, got, c.IDs)
		}
		if d := tok.Decode(c.IDs); d != c.Decoded {
			t.Errorf("%s: Decode = %q, want %q", c.Name, d, c.Decoded)
		}
	}
}

func TestFastJSONMatchesEncodingJSON(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(qwen3Dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f fileJSON
	if _, err := fastDecodeFile(data, &f); err != nil {
		t.Fatalf("the fast reader declined the Qwen3 file: %v", err)
	}
	checkFastJSON(t, data)
	tj, _, err := TrainDefault(500)
	if err != nil {
		t.Fatal(err)
	}
	checkFastJSON(t, tj)
	// Escapes, legacy merges, and declines.
	checkFastJSON(t, []byte(`{"model":{"type":"BPE","vocab":{"\u0041\n\ud83d\ude80":1,"a\"b":2},"merges":["a b","#version x"]},"x":[1,-2.5e3,true,null,{"y":"z"}]}`))
	for _, bad := range []string{`{"model":{"vocab":{"a":1.5}}}`, `{"Model":{}}`, `{"model":{"vocab":{}},"model":{}}`, `{"model":{"vocab":{"\ud800":1}}}`, `{"model":{}} x`} {
		var f fileJSON
		if _, err := fastDecodeFile([]byte(bad), &f); err == nil {
			t.Errorf("fast reader accepted %s", bad)
		}
	}
}
