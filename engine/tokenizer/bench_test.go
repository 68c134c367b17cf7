package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// BenchmarkLoadQwen3Cold parses the 11 MB tokenizer.json with the cache
// disabled: the cold tokenizer_load cost.
func BenchmarkLoadQwen3Cold(b *testing.B) {
	for b.Loop() {
		if _, _, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: "-"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadQwen3Cached loads through a warm binary cache: the
// tokenizer_load cost on every start after the first.
func BenchmarkLoadQwen3Cached(b *testing.B) {
	dir := b.TempDir()
	if _, _, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: dir}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_, st, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: dir})
		if err != nil || !st.CacheHit {
			b.Fatalf("cache miss: %v %+v", err, st)
		}
	}
}

// BenchmarkLoadQwen3CachedHash loads through the binary cache without the
// stat memo, so tokenizer.json is read and hashed (SHA-256) first: the
// first load after the file was copied or touched.
func BenchmarkLoadQwen3CachedHash(b *testing.B) {
	dir := b.TempDir()
	if _, _, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: dir}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		memos, _ := filepath.Glob(filepath.Join(dir, "*.stat"))
		for _, m := range memos {
			os.Remove(m)
		}
		_, st, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: dir})
		if err != nil || !st.CacheHit {
			b.Fatalf("cache miss: %v %+v", err, st)
		}
	}
}

// BenchmarkEncodeQwen3 encodes mixed English prose (word cache warm after
// the first iteration).
func BenchmarkEncodeQwen3(b *testing.B) {
	tok := loadQwen3(b)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. Cold starts are dominated by page-cache fills, 1234 times!\n", 100)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

// BenchmarkEncodeQwen3Uncached measures BPE itself: 32 KB of varied prose
// with an empty word cache at every iteration.
func BenchmarkEncodeQwen3Uncached(b *testing.B) {
	tok := loadQwen3(b)
	text := string(defaultCorpus[:32768])
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.words.mu.Lock()
		tok.words.m = nil
		tok.words.mu.Unlock()
		tok.Encode(text)
	}
}

// BenchmarkPieceIndexQwen3 builds the piece index and looks up a piece it
// lacks: what the first request's StopTokenIDs costs (the index is built
// on first use).
func BenchmarkPieceIndexQwen3(b *testing.B) {
	tok := loadQwen3(b)
	for b.Loop() {
		tok.pieceIdxOnce, tok.pieceIdx = sync.Once{}, pieceIndex{}
		if _, ok := tok.TokenID("<|eot_id|>"); ok {
			b.Fatal("<|eot_id|> is not a Qwen3 token")
		}
	}
}

func BenchmarkDecodeQwen3(b *testing.B) {
	tok := loadQwen3(b)
	ids := tok.Encode(strings.Repeat("The quick brown fox jumps over the lazy dog. 你好，世界！\n", 100))
	for b.Loop() {
		tok.Decode(ids)
	}
}

// BenchmarkTrainDefault8192 trains the synth checkpoints' tokenizer.
func BenchmarkTrainDefault8192(b *testing.B) {
	for b.Loop() {
		if _, _, err := TrainDefault(8192); err != nil {
			b.Fatal(err)
		}
	}
}
