package cuda

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/sched"
)

func TestStepMetaLayout(t *testing.T) {
	bt := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{7, 8, 9}, Pos: 3, Blocks: []int32{5, 2}},
		{SeqID: 2, Tokens: []int32{4}, Pos: 0, Blocks: []int32{6, 1, 0}},
	}}
	// Eager: 4 token rows, 2 table rows of stride 2, tiles of 2 tokens,
	// warp tiles of 1.
	m, ft := stepMeta(nil, bt, 4, 4, 2, 2, 2, 1, 1)
	want := []int32{
		7, 8, 9, 4, // tokens
		3, 4, 5, 0, // positions
		5*4 + 3, 2*4 + 0, 2*4 + 1, 6 * 4, // slots: block*bs + pos%bs
		0, 0, 0, 1, // token → sequence row
		5, 2, 6, 1, // tables (truncated to the stride)
		// tiles: the 3-token chunk in runs of 2, the 1-token chunk; the
		// 1-token tiles (warp tiles) first
		2, 1, 3, 1, 0, 2, 0, 0,
	}
	if wt := (FlashTiles{Warp: 2, Big: 1, BigKeys: 5, Single: true}); !slices.Equal(m, want) || ft != wt {
		t.Fatalf("eager meta\n got %v (%+v)\nwant %v (%+v)", m, ft, want, wt)
	}
	// Graph bucket of 4 rows for a 2-sequence decode, stride 3: padding rows
	// store nothing and read their own zero table rows.
	dec := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{11}, Pos: 6, Blocks: []int32{5, 2}},
		{SeqID: 2, Tokens: []int32{12}, Pos: 1, Blocks: []int32{6}},
	}}
	g, ft := stepMeta(m, dec, 4, 4, 4, 3, 16, 4, 8)
	want = []int32{
		11, 12, 0, 0,
		6, 1, 0, 0,
		2*4 + 2, 6*4 + 1, -1, -1,
		0, 1, 2, 3,
		5, 2, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 1, 1, 1, 2, 1, 3, 1, // one tile per row, padding rows included: a bucket's tile count is fixed
	}
	if wt := (FlashTiles{Warp: 4, Single: true}); !slices.Equal(g, want) || ft != wt {
		t.Fatalf("graph meta\n got %v (%+v)\nwant %v (%+v: all warp tiles)", g, ft, want, wt)
	}
	// A mixed step, Tm = 8 rows: a 5-token chunk (a tile of 4, warp tiles
	// of 2: one big tile and a 1-token tail), a decode token, 2 padding
	// rows. Warp tiles first, then the big one moved up behind them.
	mix := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{1, 2, 3, 4, 5}, Pos: 0, Blocks: []int32{0, 1}},
		{SeqID: 2, Tokens: []int32{6}, Pos: 9, Blocks: []int32{2, 3, 4}},
	}}
	x, ft := stepMeta(nil, mix, 4, 8, 2, 3, 4, 2, 2)
	if got, want, wt := x[metaLen(8, 2, 3)-16:], []int32{4, 1, 5, 1, 6, 1, 7, 1, 0, 4, 0, 0, 0, 0, 0, 0}, (FlashTiles{Warp: 4, Big: 1, BigKeys: 4, Single: true}); !slices.Equal(got, want) || ft != wt {
		t.Fatalf("mixed tiles %v (%+v), want %v (%+v)", got, ft, want, wt)
	}
	// Big tiles longest first, across sequences: a 6-token chunk at
	// position 10 (a big tile ending at 13, a 2-token warp tile) and a
	// 9-token prompt (big tiles ending at 3 and 7, a 1-token warp tile),
	// Tm = 16 rows. In the order they are made the big tiles would come
	// out prompt-last-first, then the chunk's: 10 4, 6 4, 0 4.
	long := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: make([]int32, 6), Pos: 10, Blocks: []int32{0, 1, 2, 3}},
		{SeqID: 2, Tokens: make([]int32, 9), Pos: 0, Blocks: []int32{4, 5, 6}},
	}}
	l, ft := stepMeta(nil, long, 4, 16, 2, 4, 4, 2, 2)
	// Rows: chunk 0..5 (positions 10..15), prompt 6..14, padding 15. Tiles:
	// the warp tiles (chunk rows 4..5, prompt row 14, padding row 15), then
	// the big ones ending at positions 13, 7, 3.
	// The longest big tile ends at position 13: it sees 14 keys. A warp
	// tile of two tokens: not Single (attn_dec takes one a tile).
	if got, want, wt := l[metaLen(16, 2, 4)-32:][:12], []int32{4, 2, 14, 1, 15, 1, 0, 4, 10, 4, 6, 4}, (FlashTiles{Warp: 3, Big: 3, BigKeys: 14}); !slices.Equal(got, want) || ft != wt {
		t.Fatalf("longest-first tiles %v (%+v), want %v (%+v)", got, ft, want, wt)
	}
	// Three forms: tiles of 8, warp tiles of up to 1 token, mid tiles of
	// up to 4. A 19-token prompt (8, 8, a 3-token mid tail), a 2-token
	// chunk at position 40 (mid), a decode token at 7 (warp), Tm = 24 (2
	// padding rows, warp tiles). Mid tiles longest first (the chunk ends at
	// 41, the tail at 18), big tiles too (ending at 15, then 7).
	three := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: make([]int32, 19), Pos: 0, Blocks: []int32{0, 1, 2, 3, 4}},
		{SeqID: 2, Tokens: make([]int32, 2), Pos: 40, Blocks: []int32{5, 6, 7, 8, 9, 10, 11}},
		{SeqID: 3, Tokens: []int32{9}, Pos: 7, Blocks: []int32{12, 13}},
	}}
	tr, ft := stepMeta(nil, three, 8, 24, 3, 7, 8, 1, 4)
	wantTiles := []int32{21, 1, 22, 1, 23, 1, 19, 2, 16, 3, 8, 8, 0, 8}
	if got, wt := tr[metaLen(24, 3, 7)-48:][:14], (FlashTiles{Warp: 3, Mid: 2, Big: 2, MidKeys: 42, BigKeys: 16, Single: true}); !slices.Equal(got, wantTiles) || ft != wt {
		t.Fatalf("three forms: tiles %v (%+v), want %v (%+v)", got, ft, wantTiles, wt)
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
	ck := synthCheckpoint(t, "qwen3", "tiny", 1, "")
	defer ck.Close()
	if _, err := NewBackend(ck, BackendOptions{NumBlocks: 0, BlockSize: 16}); err == nil {
		t.Fatal("zero KV blocks accepted")
	}
	if _, err := LoadDriver(); err == nil {
		t.Skip("a CUDA driver is installed here; this test covers machines without one")
	}
	_, err := NewBackend(ck, BackendOptions{NumBlocks: 8, BlockSize: 16})
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

// TestFlashSplits: each launch's splits fill one wave of its resident
// blocks (here eight one-warp, two mid and two four-warp blocks per
// multiprocessor, the H100's for these kernels as built in November
// 2026), each launch on its own, a mid or big split keeps 128 keys, and
// the scratch holds the splits of the steps that matter: any decode-only
// step, and a full step of decodes beside a long chunk.
func TestFlashSplits(t *testing.T) {
	a := AttnShape{Heads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16} // Qwen3-4B: G = 4, tiles of 4, 16 and 32 tokens
	res := FlashResidency{W1: 8, Mid: 2, W4: 2}
	for _, c := range []struct {
		what string
		t    FlashTiles
		want FlashSplitCounts
	}{
		{"64-sequence decode: 512 one-warp blocks, 1,024 of 1,056 slots with 2 splits", FlashTiles{Warp: 64}, FlashSplitCounts{2, 1, 1}},
		{"batch-1 decode: as many as allowed", FlashTiles{Warp: 1}, FlashSplitCounts{16, 1, 1}},
		{"a 64-token prompt: 16 four-warp blocks, but 64 keys make one split", FlashTiles{Big: 2, BigKeys: 64}, FlashSplitCounts{1, 1, 1}},
		{"64 tokens ending a 2,048-token prompt: 16 blocks of 264 slots", FlashTiles{Big: 2, BigKeys: 2048}, FlashSplitCounts{1, 1, 16}},
		{"a 256-token prompt: 64 blocks would take 4, its 256 keys allow 2", FlashTiles{Big: 8, BigKeys: 256}, FlashSplitCounts{1, 1, 2}},
		{"a long prefill fills the GPU alone", FlashTiles{Big: 100, BigKeys: 3200}, FlashSplitCounts{1, 1, 1}},
		{"63 decodes beside a 256-token chunk at 768: each its own", FlashTiles{Warp: 63, Big: 8, BigKeys: 1024}, FlashSplitCounts{2, 1, 4}},
		{"the 12-token tails of 64 cached prompts at 860 keys: 512 mid blocks", FlashTiles{Mid: 64, MidKeys: 860}, FlashSplitCounts{1, 1, 1}},
		{"a 12-token tail at 860 keys beside 63 decodes", FlashTiles{Warp: 63, Mid: 1, MidKeys: 860}, FlashSplitCounts{2, 6, 1}},
		{"64 decodes on four-warp blocks (flash4): 512 blocks, two waves already", FlashTiles{Big: 64, BigKeys: 1100}, FlashSplitCounts{1, 1, 1}},
		{"no tiles at all", FlashTiles{}, FlashSplitCounts{1, 1, 1}},
		{"64 decodes, no attn_dec residency: attn_mma_w1's", FlashTiles{Warp: 64, Single: true}, FlashSplitCounts{2, 1, 1}},
	} {
		if got := FlashSplits(a, res, c.t, 132); got != c.want {
			t.Errorf("%s: FlashSplits(%+v) = %+v, want %+v", c.what, c.t, got, c.want)
		}
	}
	// attn_dec (four-warp blocks, 4 an SM here) runs the warp tiles of a
	// decode step, so its residency sizes their splits.
	dres := FlashResidency{W1: 8, Mid: 2, W4: 2, Dec: 4}
	for _, c := range []struct {
		what string
		t    FlashTiles
		want FlashSplitCounts
	}{
		{"64-sequence decode on attn_dec: 512 blocks of 528 slots, one split", FlashTiles{Warp: 64, Single: true}, FlashSplitCounts{1, 1, 1}},
		{"batch-1 decode on attn_dec: as many as allowed", FlashTiles{Warp: 1, Single: true}, FlashSplitCounts{16, 1, 1}},
		{"16 decodes on attn_dec: 128 blocks, 4 splits", FlashTiles{Warp: 16, Single: true}, FlashSplitCounts{4, 1, 1}},
		{"warp tiles of several tokens stay on attn_mma_w1", FlashTiles{Warp: 16}, FlashSplitCounts{8, 1, 1}},
	} {
		if got := FlashSplits(a, dres, c.t, 132); got != c.want {
			t.Errorf("%s: FlashSplits(%+v) = %+v, want %+v", c.what, c.t, got, c.want)
		}
	}
	b := &Backend{cfg: model.Config{NumHeads: 32, NumKVHeads: 8, HeadDim: 128}, opts: BackendOptions{BlockSize: 16, Attention: AttentionFlash}}
	b.info.SMs, b.flashRes = 132, res
	fits := func(tiles FlashTiles, T, capT int) { // T token rows, scratch sized for capT
		t.Helper()
		b.capScratch = b.flashScratchFor(capT)
		want := FlashSplits(a, res, tiles, b.info.SMs)
		if got := b.flashSplits(T, tiles); got != want {
			t.Errorf("%+v, %d rows, capacity %d: scratch allows %+v splits, FlashSplits %+v", tiles, T, capT, got, want)
		}
	}
	for warp := 1; warp <= 300; warp++ { // decode steps, graph buckets included
		fits(FlashTiles{Warp: warp}, warp, warp)
		fits(FlashTiles{Warp: warp, Single: true}, warp, warp)
	}
	// The scratch is sized by attn_mma_w1's residency; attn_dec's, no
	// larger, gives no more splits.
	b.flashRes = FlashResidency{W1: 8, Mid: 2, W4: 2, Dec: 4}
	for warp := 1; warp <= 300; warp++ {
		b.capScratch = b.flashScratchFor(warp)
		want := FlashSplits(a, b.flashRes, FlashTiles{Warp: warp, Single: true}, b.info.SMs)
		if got := b.flashSplits(warp, FlashTiles{Warp: warp, Single: true}); got != want {
			t.Errorf("%d decodes on attn_dec: scratch allows %+v splits, FlashSplits %+v", warp, got, want)
		}
	}
	b.flashRes = res
	// Budget 2,048: 63 decodes and 1,985 prompt tokens (62 tiles of 32, one of 1 on a warp).
	fits(FlashTiles{Warp: 64, Big: 62, BigKeys: 1985}, 2048, 2048)
	fits(FlashTiles{Warp: 63, Big: 8, BigKeys: 1024}, 319, 2048) // 63 decodes beside a 256-token chunk: 2 and 4 splits
	fits(FlashTiles{Warp: 63, Mid: 1, MidKeys: 860}, 75, 2048)   // 63 decodes beside a 12-token tail: 2 and 6
	fits(FlashTiles{Big: 64, BigKeys: 2048}, 2048, 2048)         // a 2,048-token chunk alone
}

// TestMidTiling pins which steps layoutMeta cuts into mid tiles: a short
// prompt or chunk whose mid tiles fit one wave of mid blocks, and no
// longer one; decode tokens stay on one warp either way.
func TestMidTiling(t *testing.T) {
	// Qwen3-4B's shape, G = 4: tiles of 4, 16 and 32 tokens; an H100
	// holds 264 mid blocks, 33 tiles of 8 KV heads: two waves are 66.
	b := &Backend{cfg: model.Config{NumHeads: 32, NumKVHeads: 8, HeadDim: 128}, opts: BackendOptions{BlockSize: 16, Attention: AttentionFlash}}
	b.info.SMs, b.flashRes = 132, FlashResidency{W1: 8, Mid: 2, W4: 2}
	chunk := func(n, pos int) sched.SeqChunk {
		blocks := make([]int32, (pos+n+15)/16)
		for i := range blocks {
			blocks[i] = int32(i)
		}
		return sched.SeqChunk{Tokens: make([]int32, n), Pos: pos, Blocks: blocks}
	}
	decodes := func(n int) []sched.SeqChunk {
		s := make([]sched.SeqChunk, n)
		for i := range s {
			s[i] = chunk(1, 767)
		}
		return s
	}
	for _, c := range []struct {
		what string
		seqs []sched.SeqChunk
		want FlashTiles
	}{
		{"a 256-token prompt: 16 mid tiles, 128 blocks", []sched.SeqChunk{chunk(256, 0)}, FlashTiles{Mid: 16, MidKeys: 256}},
		{"a 1,024-token prompt: 64 mid tiles, two waves", []sched.SeqChunk{chunk(1024, 0)}, FlashTiles{Mid: 64, MidKeys: 1024}},
		{"a 1,056-token prompt: 66 mid tiles, two waves", []sched.SeqChunk{chunk(1056, 0)}, FlashTiles{Mid: 66, MidKeys: 1056}},
		{"a 1,072-token prompt: 67 mid tiles, over two waves (33 big, a 16-token mid tail)", []sched.SeqChunk{chunk(1072, 0)}, FlashTiles{Mid: 1, Big: 33, MidKeys: 1072, BigKeys: 1056}},
		{"two 512-token chunks at 512: two waves behind their length", []sched.SeqChunk{chunk(512, 512), chunk(512, 512)}, FlashTiles{Big: 32, BigKeys: 1024}},
		{"two 512-token prompts: 64 mid tiles", []sched.SeqChunk{chunk(512, 0), chunk(512, 0)}, FlashTiles{Mid: 64, MidKeys: 512}},
		{"2 × 1,024 prompt tokens", []sched.SeqChunk{chunk(1024, 0), chunk(1024, 0)}, FlashTiles{Big: 64, BigKeys: 1024}},
		{"63 decodes beside a 256-token chunk at 768", append(decodes(63), chunk(256, 768)), FlashTiles{Warp: 63, Mid: 16, MidKeys: 1024, Single: true}},
		{"a 256-token chunk at 784: more than 3x its length before it", []sched.SeqChunk{chunk(256, 784)}, FlashTiles{Big: 8, BigKeys: 1040}},
		{"a 1,024-token chunk at 3,072: two waves behind 3x its length", []sched.SeqChunk{chunk(1024, 3072)}, FlashTiles{Big: 32, BigKeys: 4096}},
		{"a 1,024-token chunk at 512: two waves behind half its length", []sched.SeqChunk{chunk(1024, 512)}, FlashTiles{Mid: 64, MidKeys: 1536}},
		{"a 1,024-token chunk at 528", []sched.SeqChunk{chunk(1024, 528)}, FlashTiles{Big: 32, BigKeys: 1552}},
		{"a 512-token chunk at 15,872: one wave behind 31x", []sched.SeqChunk{chunk(512, 15872)}, FlashTiles{Big: 16, BigKeys: 16384}},
		{"a 1,024-token chunk at 15,360", []sched.SeqChunk{chunk(1024, 15360)}, FlashTiles{Big: 32, BigKeys: 16384}},
		{"a 12-token tail at 848 beside a 256-token prompt: one mid tile either way", []sched.SeqChunk{chunk(12, 848), chunk(256, 0)}, FlashTiles{Mid: 17, MidKeys: 860}},
		{"a 40-token tail at 848 beside a 256-token prompt: the tail is cut too", []sched.SeqChunk{chunk(40, 848), chunk(256, 0)}, FlashTiles{Mid: 1, Big: 9, MidKeys: 888, BigKeys: 880}},
		{"a 40-token prompt: two of 16 and one of 8", []sched.SeqChunk{chunk(40, 0)}, FlashTiles{Mid: 3, MidKeys: 40}},
		{"64 decodes", decodes(64), FlashTiles{Warp: 64, Single: true}},
	} {
		bt := &sched.Batch{Seqs: c.seqs}
		T := 0
		for _, s := range c.seqs {
			T += len(s.Tokens)
		}
		b.layoutMeta(bt, T, len(c.seqs), 80)
		if b.metaTiles != c.want {
			t.Errorf("%s: tiles %+v, want %+v", c.what, b.metaTiles, c.want)
		}
	}
	// Off without a mid form (flash4) or before the residency is known.
	b.opts.Attention = AttentionFlash4
	b.layoutMeta(&sched.Batch{Seqs: []sched.SeqChunk{chunk(256, 0)}}, 256, 1, 80)
	if want := (FlashTiles{Big: 8, BigKeys: 256}); b.metaTiles != want {
		t.Errorf("flash4, 256-token prompt: tiles %+v, want %+v", b.metaTiles, want)
	}
	b.opts.Attention, b.flashRes = AttentionFlash, FlashResidency{}
	b.layoutMeta(&sched.Batch{Seqs: []sched.SeqChunk{chunk(256, 0)}}, 256, 1, 80)
	if want := (FlashTiles{Big: 8, BigKeys: 256}); b.metaTiles != want {
		t.Errorf("no residency yet, 256-token prompt: tiles %+v, want %+v", b.metaTiles, want)
	}
}

// TestGemmPath pins who runs each GEMM: gemm_skinny only where it fits;
// under GemmAuto always for up to SkinnyAutoRows rows, in eager steps for
// 9–16 rows of K ≤ skinnyEagerK (not under SkinnyRows8, not while a graph
// is captured), and for up to SkinnyMaxRows rows until cuBLASLt has run
// the shape; GemmCublasLt and GemmSkinny as named.
func TestGemmPath(t *testing.T) {
	const x, w = DevicePtr(1 << 20), DevicePtr(2 << 20)
	shape := func(M, K int) GemmShape { return GemmShape{M: M, N: 2560, K: K, In: BF16, Out: F32} }
	for _, c := range []struct {
		mode      string // "auto/8": GemmAuto with SkinnyRows8
		M, K      int
		capturing bool
		warm      bool // cuBLASLt has run the shape
		skinny    bool
	}{
		{GemmAuto, 1, 4096, false, false, true}, {GemmAuto, 1, 4096, false, true, true}, {GemmAuto, SkinnyAutoRows, 9728, true, true, true},
		{GemmAuto, 9, 4096, false, true, true}, {GemmAuto, 16, 4096, false, true, true},
		{GemmAuto, 16, 9728, false, true, false}, {GemmAuto, 16, 4096, true, true, false},
		{GemmAuto + "/8", 9, 4096, false, true, false}, {GemmAuto + "/8", 9, 4096, false, false, true},
		{GemmAuto, 17, 4096, false, false, true}, {GemmAuto, 17, 4096, false, true, false},
		{GemmAuto, SkinnyMaxRows, 4096, false, false, true}, {GemmAuto, SkinnyMaxRows + 1, 4096, false, false, false},
		{"", 52, 4096, false, false, true}, // the zero option is auto
		{GemmSkinny, 64, 4096, true, true, true}, {GemmSkinny, 65, 4096, false, false, false},
		{GemmCublasLt, 1, 4096, false, false, false},
	} {
		mode, rows, _ := strings.Cut(c.mode, "/")
		b := &Backend{opts: BackendOptions{Gemm: mode, SkinnyRows: rows}, capturing: c.capturing}
		if c.warm {
			b.warm.ran(shape(c.M, c.K))
		}
		if got := b.gemmOnSkinny(shape(c.M, c.K), x, w); got != c.skinny {
			t.Errorf("%q, %dx%d, capturing %v, cuBLASLt warm %v: on gemm_skinny = %v, want %v", c.mode, c.M, c.K, c.capturing, c.warm, got, c.skinny)
		}
	}
	b := &Backend{}
	for _, c := range []struct {
		N, K int
		x, w DevicePtr
	}{{2568, 4096, x, w}, {2560, 4080, x, w}, {2560, 4096, x + 8, w}, {2560, 4096, x, w + 2}} {
		if b.gemmOnSkinny(GemmShape{M: 1, N: c.N, K: c.K, In: BF16, Out: F32}, c.x, c.w) {
			t.Errorf("gemm_skinny given %dx%d at x%%16 = %d, w%%16 = %d, which it does not take", c.N, c.K, c.x%16, c.w%16)
		}
	}
	if _, err := gemmMode("fast"); err == nil {
		t.Error(`GEMM path "fast" accepted`)
	}
	t.Setenv(GemmEnv, GemmCublasLt)
	if m, err := gemmMode(GemmSkinny); err != nil || m != GemmCublasLt {
		t.Errorf("%s=%s over the option: %q, %v", GemmEnv, GemmCublasLt, m, err)
	}
}

// TestOnOffSwitches: PDL is on, fusion off, gemm_skinny's block width
// automatic, its eager rows 16 and the CUDA thread polling unless the
// option says otherwise; each variable wins over the option; other values
// are refused with the variable named.
func TestOnOffSwitches(t *testing.T) {
	for _, c := range []struct {
		env, def, other string
		mode            func(string) (string, error)
	}{{PDLEnv, PDLOn, PDLOff, pdlMode}, {FuseEnv, FuseOff, FuseOn, fuseMode}, {SkinnyNarrowEnv, SkinnyNarrowAutoMode, SkinnyNarrowOff, skinnyNarrowMode},
		{RunnerSpinEnv, RunnerSpinOn, RunnerSpinOff, runnerSpinMode}, {SkinnyRowsEnv, SkinnyRows16, SkinnyRows8, skinnyRowsMode}} {
		for opt, want := range map[string]string{"": c.def, c.def: c.def, c.other: c.other} {
			if m, err := c.mode(opt); err != nil || m != want {
				t.Errorf("%s: option %q gives %q, %v; want %q", c.env, opt, m, err, want)
			}
		}
		if _, err := c.mode("maybe"); err == nil || !strings.Contains(err.Error(), c.env) {
			t.Errorf(`%s: "maybe" gives %v, want an error naming the variable`, c.env, err)
		}
		t.Setenv(c.env, c.other)
		if m, err := c.mode(c.def); err != nil || m != c.other {
			t.Errorf("%s=%s over the option %s: %q, %v", c.env, c.other, c.def, m, err)
		}
		t.Setenv(c.env, "")
	}
}

// TestStartRefusesBadOptions: Start settles every environment-overridable
// option before it touches the driver, so a value none of them takes is
// refused there, GPU or not, naming the option's variable.
func TestStartRefusesBadOptions(t *testing.T) {
	var probe BackendOptions
	for i := range probe.envOptions() {
		var o BackendOptions
		*o.envOptions()[i].v = "maybe"
		s, err := Start(o)
		if err == nil || errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "TRENI_CUDA_") {
			if s != nil {
				s.Abort()
			}
			t.Errorf("option %d set to \"maybe\": %v, want an error naming its variable", i, err)
		}
	}
}

// TestSkinnyNarrowN: the 8-feature blocks take, by default, the GEMMs
// whose 16-feature blocks would be at most 1.5 per SM (on an H100's 132:
// the 4B and 0.6B o_proj and down_proj, N = 2,560 and 1,024, not the 0.6B
// qkv's 4,096); on takes every N, off none.
func TestSkinnyNarrowN(t *testing.T) {
	auto := skinnyNarrowN(SkinnyNarrowAutoMode, 132)
	if auto != 132*24 || auto < 2560 || auto >= 4096 {
		t.Errorf("auto on 132 SMs: N ≤ %d", auto)
	}
	if on, off := skinnyNarrowN(SkinnyNarrowOn, 132), skinnyNarrowN(SkinnyNarrowOff, 132); on < 151936 || off != 0 {
		t.Errorf("on: N ≤ %d, off: N ≤ %d", on, off)
	}
}

// TestRunnerPolls: the CUDA runner polls under RunnerSpinOn with four or
// more Go processors, never under RunnerSpinOff.
func TestRunnerPolls(t *testing.T) {
	for _, c := range []struct {
		mode  string
		procs int
		want  bool
	}{{RunnerSpinOn, 16, true}, {RunnerSpinOn, 4, true}, {RunnerSpinOn, 2, false}, {RunnerSpinOn, 1, false}, {RunnerSpinOff, 16, false}} {
		if got := runnerPolls(c.mode, c.procs); got != c.want {
			t.Errorf("%s with %d processors: polls %v", c.mode, c.procs, got)
		}
	}
}

// TestFusedOperand: the norms and SwiGLU fold into the GEMM after them
// only under FuseOn (not the default), for the rows gemm_skinny runs and
// an operand that fits its shared-memory copy (TRENI_CUDA_FUSE is in
// TestOnOffSwitches).
func TestFusedOperand(t *testing.T) {
	const x, w, nw = DevicePtr(1 << 20), DevicePtr(2 << 20), DevicePtr(3 << 20)
	for _, c := range []struct {
		fuse, gemm string
		M, K       int
		nw         DevicePtr
		want       bool
	}{
		{FuseOn, GemmAuto, 1, 2560, nw, true}, {FuseOn, GemmAuto, 8, 2560, nw, true}, {FuseOn, GemmAuto, 8, 2560, 0, true},
		{FuseOn, GemmAuto, 9, 2560, nw, false},     // past the fused forms' 8 rows
		{FuseOn, GemmAuto, 8, 4096, nw, false},     // 8 rows of 4,096 do not fit the copy
		{FuseOn, GemmAuto, 4, 4096, nw, true},      // 4 do
		{FuseOn, GemmAuto, 1, 9728, 0, true},       // down_proj at batch 1
		{FuseOn, GemmAuto, 2, 9728, 0, true},       // and at 2
		{FuseOn, GemmAuto, 3, 9728, 0, false},      // not at 3
		{FuseOn, GemmAuto, 1, 2560, nw + 4, false}, // a misaligned norm weight
		{FuseOn, GemmCublasLt, 1, 2560, nw, false},
		{FuseOff, GemmAuto, 1, 2560, nw, false},
		{"", GemmAuto, 1, 2560, nw, false}, // off by default
	} {
		fuse, err := fuseMode(c.fuse)
		if err != nil {
			t.Fatal(err)
		}
		b := &Backend{opts: BackendOptions{Fuse: fuse, Gemm: c.gemm}}
		if got := b.fusedOperand(GemmShape{M: c.M, N: 4096, K: c.K, In: BF16, Out: BF16}, x, w, c.nw); got != c.want {
			t.Errorf("%s/%s, %dx%d, norm weight %#x: fused %v, want %v", c.fuse, c.gemm, c.M, c.K, c.nw, got, c.want)
		}
	}
}

// TestGemmsSettled: a decode graph of a row count that GemmAuto moves to
// cuBLASLt is captured only once the aside thread has stopped (until then
// its GEMMs stay on gemm_skinny, even those whose shapes have run); other
// row counts and paths never wait. asideGemms lists what is left to warm
// within the scratch.
func TestGemmsSettled(t *testing.T) {
	b := &Backend{opts: BackendOptions{Gemm: GemmAuto}, cfg: model.Config{HiddenSize: 2560, IntermediateSize: 9728, VocabSize: 151936},
		qDim: 4096, qkvDim: 6144, capT: 256, capRows: 64}
	b.warm.setWarming(true)
	if !b.gemmsSettled(1) || !b.gemmsSettled(SkinnyAutoRows) || !b.gemmsSettled(128) {
		t.Error("rows that never change path wait for the aside thread")
	}
	if b.gemmsSettled(64) {
		t.Error("64 rows settled before cuBLASLt ran their shapes")
	}
	for _, s := range b.stepGemms(64, true) {
		b.warm.ran(s.shape)
		if b.gemmOnSkinny(s.shape, 0, 0) != SkinnyFits(s.shape.M, s.shape.N, s.shape.K, 0, 0) {
			t.Errorf("%v left gemm_skinny while the aside thread warms", s.shape)
		}
	}
	if b.gemmsSettled(64) {
		t.Error("64 rows settled while the aside thread warms")
	}
	if b.gemmsSettled(32) {
		t.Error("32 rows settled before their shapes ran")
	}
	b.warm.setWarming(false)
	if !b.gemmsSettled(32) || !b.gemmsSettled(64) {
		t.Error("32 or 64 rows wait for an aside thread that has stopped")
	}
	if s := b.stepGemms(64, true)[0].shape; b.gemmOnSkinny(s, 0, 0) {
		t.Errorf("%v stays on gemm_skinny once the aside thread has stopped", s)
	}
	b.opts.Gemm = GemmCublasLt
	b.warm.setWarming(true)
	if !b.gemmsSettled(32) {
		t.Error("GemmCublasLt waits for the aside thread")
	}

	// 64 rows ran above; 32, 16 (with their LM heads), 128 and 256 (layer
	// GEMMs only: beyond the LM-head scratch) are left.
	b.opts.Gemm = GemmAuto
	got := b.asideGemms()
	if len(got) != 5+5+4+4 {
		t.Fatalf("%d shapes left to warm, want 18: %v", len(got), got)
	}
	for _, g := range got {
		if s := g.shape; s.M == 64 || (s.M > 64 && s.N == 151936) {
			t.Errorf("asked to warm %v", s)
		}
	}
	b.capT = 100
	for _, g := range b.asideGemms() {
		if s := g.shape; s.M > 100 {
			t.Errorf("asked to warm %v beyond the scratch's 100 rows", s)
		}
	}
}

// synthCheckpoint writes a synthetic checkpoint of arch at preset (dtype ""
// is synth's default) with the test tokenizer into a temporary directory
// and opens it; the caller closes it.
func synthCheckpoint(t *testing.T, arch, preset string, seed uint64, dtype string) *model.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if _, err := synth.Write(context.Background(), synth.Options{Arch: arch, Preset: preset, OutDir: dir, Seed: seed, DType: dtype,
		TokenizerDir: "../model/synth/testdata/tok"}); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// TestOwnAllocsCoverDeviceFields: every DevicePtr field of Backend is
// either an allocation free releases (ownAllocs) or a pointer into one of
// them, listed here; a new allocation left out of ownAllocs (the step's
// RoPE table once was) fails this instead of leaking device memory on
// Close.
func TestOwnAllocsCoverDeviceFields(t *testing.T) {
	into := map[string]string{"embed": "weights", "lmHead": "weights", "finalNorm": "smalls", "invFreq": "smalls"}
	var b Backend
	owned := map[uintptr]bool{}
	for _, p := range b.ownAllocs() {
		owned[uintptr(unsafe.Pointer(p))] = true
	}
	v := reflect.ValueOf(&b).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if f.Type != reflect.TypeOf(DevicePtr(0)) {
			continue
		}
		own := owned[v.Field(i).Addr().Pointer()]
		switch _, sub := into[f.Name]; {
		case own && sub:
			t.Errorf("%s points into %s but ownAllocs frees it too", f.Name, into[f.Name])
		case !own && !sub:
			t.Errorf("Backend.%s is a device pointer that ownAllocs does not free: add it there, or to this test's list if it points into another allocation", f.Name)
		}
	}
	if len(owned) != len(b.ownAllocs()) {
		t.Errorf("ownAllocs lists an allocation twice")
	}
}

// TestFlashDecodeKernel: attn_dec serves head dim 128 with groups of 2 and
// 4 (Qwen3-0.6B/1.7B and 4B) and nothing else.
func TestFlashDecodeKernel(t *testing.T) {
	for _, c := range []struct {
		a    AttnShape
		want string
	}{
		{AttnShape{Heads: 16, KVHeads: 8, HeadDim: 128}, "attn_dec_g2"},
		{AttnShape{Heads: 32, KVHeads: 8, HeadDim: 128}, "attn_dec_g4"},
		{AttnShape{Heads: 32, KVHeads: 8, HeadDim: 64}, ""},
		{AttnShape{Heads: 24, KVHeads: 8, HeadDim: 128}, ""},
		{AttnShape{Heads: 5, KVHeads: 2, HeadDim: 128}, ""},
		{AttnShape{Heads: 8, KVHeads: 8, HeadDim: 128}, ""},
		{AttnShape{Heads: 8, HeadDim: 128}, ""},
	} {
		if got := FlashDecodeKernel(c.a); got != c.want {
			t.Errorf("FlashDecodeKernel(%+v) = %q, want %q", c.a, got, c.want)
		}
	}
}
