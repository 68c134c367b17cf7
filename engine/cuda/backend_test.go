package cuda

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/sched"
)

func TestStepMetaLayout(t *testing.T) {
	bt := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{7, 8, 9}, Pos: 3, Blocks: []int32{5, 2}},
		{SeqID: 2, Tokens: []int32{4}, Pos: 0, Blocks: []int32{6, 1, 0}},
	}}
	// Eager: 4 token rows, 2 table rows of stride 2, tiles of 2 tokens.
	m, tiles := stepMeta(nil, bt, 4, 4, 2, 2, 2)
	want := []int32{
		7, 8, 9, 4, // tokens
		3, 4, 5, 0, // positions
		5*4 + 3, 2*4 + 0, 2*4 + 1, 6 * 4, // slots: block*bs + pos%bs
		0, 0, 0, 1, // token → sequence row
		5, 2, 6, 1, // tables (truncated to the stride)
		0, 2, 2, 1, 3, 1, 0, 0, // tiles: the 3-token chunk in runs of 2, then the 1-token chunk
	}
	if !slices.Equal(m, want) || tiles != 3 {
		t.Fatalf("eager meta\n got %v (%d tiles)\nwant %v (3 tiles)", m, tiles, want)
	}
	// Graph bucket of 4 rows for a 2-sequence decode, stride 3: padding rows
	// store nothing and read their own zero table rows.
	dec := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{11}, Pos: 6, Blocks: []int32{5, 2}},
		{SeqID: 2, Tokens: []int32{12}, Pos: 1, Blocks: []int32{6}},
	}}
	g, tiles := stepMeta(m, dec, 4, 4, 4, 3, 16)
	want = []int32{
		11, 12, 0, 0,
		6, 1, 0, 0,
		2*4 + 2, 6*4 + 1, -1, -1,
		0, 1, 2, 3,
		5, 2, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 1, 1, 1, 2, 1, 3, 1, // one tile per row, padding rows included: a bucket's tile count is fixed
	}
	if !slices.Equal(g, want) || tiles != 4 {
		t.Fatalf("graph meta\n got %v (%d tiles)\nwant %v (4 tiles)", g, tiles, want)
	}
}

func TestBucket(t *testing.T) {
	b := &Backend{buckets: DefaultGraphBuckets()}
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 9: 16, 256: 256, 257: 0} {
		if got := b.bucket(n); got != want {
			t.Errorf("bucket(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestKVBytesPerBlock(t *testing.T) {
	c := model.Config{NumLayers: 28, NumKVHeads: 8, HeadDim: 128}
	// bf16 K and V: 16 positions × 28 layers × 8 heads × 128 × 2 × 2 bytes.
	if got := KVBytesPerBlock(c, 16); got != 16*28*8*128*4 {
		t.Fatal(got)
	}
}

// TestNewBackendWithoutGPU: on a machine without a driver (CI) the
// constructor fails with ErrNoDriver, which callers use to fall back to the
// CPU backend; bad options fail before any CUDA work.
func TestNewBackendWithoutGPU(t *testing.T) {
	if _, err := NewBackend(nil, BackendOptions{}); err == nil {
		t.Fatal("nil checkpoint accepted")
	}
	dir := t.TempDir()
	if _, err := synth.Write(context.Background(), synth.Options{Arch: "qwen3", Preset: "tiny", OutDir: dir, Seed: 1,
		TokenizerDir: "../model/synth/testdata/tok"}); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if _, err := NewBackend(ck, BackendOptions{NumBlocks: 0, BlockSize: 16}); err == nil {
		t.Fatal("zero KV blocks accepted")
	}
	if _, err := LoadDriver(); err == nil {
		t.Skip("a CUDA driver is installed here; this test covers machines without one")
	}
	_, err = NewBackend(ck, BackendOptions{NumBlocks: 8, BlockSize: 16})
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("without a driver: %v", err)
	}
}

// TestPadRows: decode sizes stay exact, others round up to a power of two
// within the capacity, and never below n.
func TestPadRows(t *testing.T) {
	for _, c := range []struct{ n, capacity, want int }{
		{1, 256, 1}, {3, 256, 3}, {4, 256, 4}, {5, 256, 8}, {8, 256, 8}, {52, 256, 64},
		{129, 256, 256}, {200, 220, 220}, {300, 256, 300}, {300, 1024, 320}, {319, 1024, 320}, {321, 1024, 384}, {512, 1024, 512}, {1000, 1010, 1010},
	} {
		if got := padRows(c.n, c.capacity); got != c.want {
			t.Errorf("padRows(%d, %d) = %d, want %d", c.n, c.capacity, got, c.want)
		}
	}
}
