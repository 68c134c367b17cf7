package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// bf16 outputs carry a rounding error of at most 2^-9 relative per
// element; these tolerances on ‖got−ref‖/‖ref‖ leave room for fp32
// arithmetic in a different order than the float64 reference.
const (
	tolBF16 = 4e-3
	tolF32  = 1e-5
)

func TestGPUElementwise(t *testing.T) {
	g := newGPU(t)
	r := rand.New(rand.NewPCG(1, 2))
	const T, H, V, I = 5, 1000, 50, 700
	const eps = 1e-6

	table := randBF16(r, V*H, 1)
	tokens := []int32{3, 49, 0, 3, 17}
	x := g.alloc(T * H * 4)
	g.ok(g.k.Embed(g.s, x, up(g, table), up(g, tokens), T, H))
	xs := down[float32](g, x, T*H)
	ref := make([]float64, T*H)
	for t := 0; t < T; t++ {
		for i := 0; i < H; i++ {
			ref[t*H+i] = float64(bf2f(table[int(tokens[t])*H+i]))
		}
	}
	g.check("embed_bf16", xs, ref, 0)

	w := randF32(r, H, 1, 0.1)
	normRef := func(xs []float32) []float64 {
		out := make([]float64, T*H)
		for t := 0; t < T; t++ {
			ss := 0.0
			for i := 0; i < H; i++ {
				ss += float64(xs[t*H+i]) * float64(xs[t*H+i])
			}
			sc := 1 / math.Sqrt(ss/H+eps)
			for i := 0; i < H; i++ {
				out[t*H+i] = float64(xs[t*H+i]) * sc * float64(w[i])
			}
		}
		return out
	}
	wd := up(g, w)
	h := g.alloc(T * H * 2)
	g.ok(g.k.RMSNorm(g.s, h, x, wd, T, H, eps))
	g.check("rmsnorm", bfSlice(down[uint16](g, h, T*H)), normRef(xs), tolBF16)

	// rmsnorm's two forms (kernels.cu): rows of whole float4s held in
	// registers (a decode row, a step of 64, a row of 257 float4s), and
	// the looping form (H not a multiple of 4; a row of 5,000 float4s,
	// past RMS_VEC a thread of the 1,024-thread block).
	for _, c := range []struct{ T, H int }{{1, 2560}, {64, 2560}, {3, 1028}, {2, 1026}, {1, 20000}} {
		xr, wr := randF32(r, c.T*c.H, 0, 1), randF32(r, c.H, 1, 0.1)
		hr := g.alloc(c.T * c.H * 2)
		g.ok(g.k.RMSNorm(g.s, hr, up(g, xr), up(g, wr), c.T, c.H, eps))
		ref := make([]float64, c.T*c.H)
		for t := 0; t < c.T; t++ {
			ss := 0.0
			for i := 0; i < c.H; i++ {
				ss += float64(xr[t*c.H+i]) * float64(xr[t*c.H+i])
			}
			sc := 1 / math.Sqrt(ss/float64(c.H)+eps)
			for i := 0; i < c.H; i++ {
				ref[t*c.H+i] = float64(xr[t*c.H+i]) * sc * float64(wr[i])
			}
		}
		g.check(fmt.Sprintf("rmsnorm %dx%d", c.T, c.H), bfSlice(down[uint16](g, hr, c.T*c.H)), ref, tolBF16)
	}

	d := randF32(r, T*H, 0, 1)
	g.ok(g.k.AddRMSNorm(g.s, x, up(g, d), h, wd, T, H, eps))
	x2 := down[float32](g, x, T*H)
	sum := make([]float64, T*H)
	sum32 := make([]float32, T*H)
	for i := range sum {
		sum32[i] = xs[i] + d[i]
		sum[i] = float64(sum32[i])
	}
	g.check("add_rmsnorm residual", x2, sum, 0)
	g.check("add_rmsnorm norm", bfSlice(down[uint16](g, h, T*H)), normRef(sum32), tolBF16)

	g.ok(g.k.AddF32(g.s, x, up(g, d), T*H))
	x3 := down[float32](g, x, T*H)
	for i := range sum {
		sum[i] = float64(sum32[i] + d[i])
	}
	g.check("add_f32", x3, sum, 0)

	gu := randBF16(r, T*2*I, 2)
	act := g.alloc(T * I * 2)
	g.ok(g.k.SwiGLU(g.s, act, up(g, gu), T, I))
	sref := make([]float64, T*I)
	for t := 0; t < T; t++ {
		for i := 0; i < I; i++ {
			a, u := float64(bf2f(gu[t*2*I+i])), float64(bf2f(gu[t*2*I+I+i]))
			sref[t*I+i] = a / (1 + math.Exp(-a)) * u
		}
	}
	g.check("swiglu", bfSlice(down[uint16](g, act, T*I)), sref, tolBF16)
	// The 16-byte form (I a multiple of 8) must give the same bits as
	// the one-column form over the same columns.
	const I8 = 696
	gu8 := make([]uint16, T*2*I8)
	for t := 0; t < T; t++ {
		copy(gu8[t*2*I8:], gu[t*2*I:t*2*I+I8])
		copy(gu8[t*2*I8+I8:], gu[t*2*I+I:t*2*I+I+I8])
	}
	act8 := g.alloc(T * I8 * 2)
	g.ok(g.k.SwiGLU(g.s, act8, up(g, gu8), T, I8))
	one, vec := down[uint16](g, act, T*I), down[uint16](g, act8, T*I8)
	for row := 0; row < T; row++ {
		if !slices.Equal(one[row*I:row*I+I8], vec[row*I8:row*I8+I8]) {
			t.Errorf("swiglu: 8-column form differs from the one-column form in row %d", row)
		}
	}

	y := randBF16(r, T*I, 1)
	b := randF32(r, I, 0, 0.5)
	yd := up(g, y)
	g.ok(g.k.BiasAddBF16(g.s, yd, up(g, b), T, I))
	bref := make([]float64, T*I)
	for i := range bref {
		bref[i] = float64(bf2f(f2bf(bf2f(y[i]) + b[i%I])))
	}
	g.check("bias_add_bf16", bfSlice(down[uint16](g, yd, T*I)), bref, 0)
	yf := randF32(r, T*I, 0, 1)
	yfd := up(g, yf)
	g.ok(g.k.BiasAddF32(g.s, yfd, up(g, b), T, I))
	for i := range bref {
		bref[i] = float64(yf[i] + b[i%I])
	}
	g.check("bias_add_f32", down[float32](g, yfd, T*I), bref, 0)

	// argmax with planted ties: the lowest index must win.
	const R, AV = 3, 5000
	lg := randF32(r, R*AV, 0, 1)
	lg[0*AV+4000], lg[0*AV+17] = 9, 9
	lg[1*AV+4999] = 9
	lg[2*AV+0], lg[2*AV+1] = 9, 9
	am := g.alloc(R * 4)
	g.ok(g.k.Argmax(g.s, am, up(g, lg), R, AV, AV))
	got := down[int32](g, am, R)
	if got[0] != 17 || got[1] != 4999 || got[2] != 0 {
		t.Errorf("argmax_f32 = %v, want [17 4999 0]", got)
	}
}

// ropeCase is one attention geometry of the rope/store and attention test.
type ropeCase struct {
	name              string
	nh, nkv, hd, bs   int
	qkNorm, bias      bool
	theta             float64
	prefillPos, nPref int // sequence A: chunk of nPref tokens at prefillPos
	decodePos         int // sequence B: one token at decodePos
}

func TestGPURopeStoreAndAttention(t *testing.T) {
	g := newGPU(t)
	for _, c := range []ropeCase{
		{name: "qwen3-like", nh: 4, nkv: 2, hd: 128, bs: 16, qkNorm: true, theta: 1e6, prefillPos: 3, nPref: 5, decodePos: 200},
		{name: "qwen2-like", nh: 6, nkv: 2, hd: 64, bs: 4, bias: true, theta: 1e4, prefillPos: 0, nPref: 150, decodePos: 37},
		{name: "llama-like", nh: 8, nkv: 8, hd: 256, bs: 32, theta: 5e5, prefillPos: 130, nPref: 2, decodePos: 1},
		// hd/2 odd: qk_norm_rope_store's one-value-a-lane form.
		{name: "odd-half", nh: 4, nkv: 2, hd: 98, bs: 8, qkNorm: true, bias: true, theta: 1e4, prefillPos: 2, nPref: 9, decodePos: 20},
		// Long contexts: the kernel reads block tables 32 blocks at a time
		// (a span of 512 positions here), so a chunk and a decode token
		// reach across several spans.
		{name: "qwen3-long", nh: 8, nkv: 2, hd: 128, bs: 16, qkNorm: true, theta: 1e6, prefillPos: 1000, nPref: 37, decodePos: 1300},
	} {
		// Not t.Run: a subtest runs on another goroutine, off the thread
		// where the context is current (CUDA_ERROR_INVALID_CONTEXT).
		ropeAttention(g, c)
	}
}

func ropeAttention(g *gpu, c ropeCase) {
	r := rand.New(rand.NewPCG(3, uint64(c.hd)))
	const eps = 1e-6
	nh, nkv, hd, bs := c.nh, c.nkv, c.hd, c.bs
	width := (nh + 2*nkv) * hd
	T := c.nPref + 1
	// Block tables: a shuffled pool so that logical and physical order differ.
	lenA, lenB := c.prefillPos+c.nPref, c.decodePos+1
	nbA, nbB := (lenA+bs-1)/bs, (lenB+bs-1)/bs
	NB := nbA + nbB + 3
	perm := r.Perm(NB)
	btStride := max(nbA, nbB)
	bt := make([]int32, 2*btStride)
	for i := 0; i < nbA; i++ {
		bt[i] = int32(perm[i])
	}
	for i := 0; i < nbB; i++ {
		bt[btStride+i] = int32(perm[nbA+i])
	}
	tokSeq, pos, slots := make([]int32, T), make([]int32, T), make([]int32, T)
	for i := 0; i < T; i++ {
		s, p := 0, c.prefillPos+i
		if i == c.nPref {
			s, p = 1, c.decodePos
		}
		tokSeq[i], pos[i] = int32(s), int32(p)
		slots[i] = bt[s*btStride+p/bs]*int32(bs) + int32(p%bs)
	}
	// Cached positions before this step are random; the step's own are
	// written by the store kernel.
	cacheN := NB * nkv * bs * hd
	kc, vc := randBF16(r, cacheN, 1), randBF16(r, cacheN, 1)
	kd, vd := up(g, kc), up(g, vc)
	qkv := randBF16(r, T*width, 1)
	qkvd := up(g, qkv)
	invFreq := make([]float64, hd/2)
	for i := range invFreq {
		invFreq[i] = 1 / math.Pow(c.theta, float64(2*i)/float64(hd))
	}
	var bias, qn, kn []float32
	rope := g.alloc(T * hd / 2 * 8)
	g.ok(g.k.RopeTable(g.s, rope, up(g, invFreq), up(g, pos), T, hd/2))
	args := RopeStoreArgs{QKV: qkvd, Rope: rope, Slots: up(g, slots), KCache: kd, VCache: vd, T: T, Eps: eps}
	if c.bias {
		bias = randF32(r, width, 0, 0.3)
		args.Bias = up(g, bias)
	}
	if c.qkNorm {
		qn, kn = randF32(r, hd, 1, 0.2), randF32(r, hd, 1, 0.2)
		args.QNorm, args.KNorm = up(g, qn), up(g, kn)
	}
	shape := AttnShape{Heads: nh, KVHeads: nkv, HeadDim: hd, BlockSize: bs}
	g.ok(g.k.QKNormRopeStore(g.s, shape, args))
	gotQKV := down[uint16](g, qkvd, T*width)
	gotK, gotV := down[uint16](g, kd, cacheN), down[uint16](g, vd, cacheN)

	// Reference for q, k, v of every token and head.
	var gq, gk, gv []float32
	var rq64, rk64, rv64 []float64
	half := hd / 2
	for t := 0; t < T; t++ {
		for h := 0; h < nh+2*nkv; h++ {
			v := make([]float64, hd)
			for i := range v {
				x := bf2f(qkv[t*width+h*hd+i])
				if c.bias {
					x = bf2f(f2bf(x + bias[h*hd+i]))
				}
				v[i] = float64(x)
			}
			isq, isk := h < nh, h >= nh && h < nh+nkv
			if c.qkNorm && (isq || isk) {
				w := qn
				if isk {
					w = kn
				}
				ss := 0.0
				for _, x := range v {
					ss += x * x
				}
				sc := 1 / math.Sqrt(ss/float64(hd)+eps)
				for i := range v {
					v[i] *= sc * float64(w[i])
				}
			}
			if isq || isk {
				for i := 0; i < half; i++ {
					a := float64(pos[t]) * invFreq[i]
					cs, sn := math.Cos(a), math.Sin(a)
					lo, hi := v[i], v[i+half]
					v[i], v[i+half] = lo*cs-hi*sn, hi*cs+lo*sn
				}
			}
			switch {
			case isq:
				rq64 = append(rq64, v...)
				gq = append(gq, bfSlice(gotQKV[t*width+h*hd:t*width+(h+1)*hd])...)
			default:
				gi := h - nh
				if !isk {
					gi -= nkv
				}
				off := (int(slots[t]/int32(bs))*nkv+gi)*bs*hd + int(slots[t]%int32(bs))*hd
				if isk {
					rk64 = append(rk64, v...)
					gk = append(gk, bfSlice(gotK[off:off+hd])...)
				} else {
					rv64 = append(rv64, v...)
					gv = append(gv, bfSlice(gotV[off:off+hd])...)
				}
			}
		}
	}
	g.check("rope q "+c.name, gq, rq64, tolBF16)
	g.check("rope+store k "+c.name, gk, rk64, tolBF16)
	g.check("store v "+c.name, gv, rv64, tolBF16)

	// Attention over what the GPU stored, against a float64 reference.
	out := g.alloc(T * nh * hd * 2)
	g.ok(g.k.PagedAttention(g.s, shape, AttentionArgs{
		Out: out, Q: qkvd, QStride: width, KCache: kd, VCache: vd,
		TokSeq: up(g, tokSeq), Pos: up(g, pos), BlockTables: up(g, bt), BTStride: btStride,
		T: T, Scale: float32(1 / math.Sqrt(float64(hd))),
	}))
	gotOut := bfSlice(down[uint16](g, out, T*nh*hd))
	ref := make([]float64, T*nh*hd)
	group := nh / nkv
	for t := 0; t < T; t++ {
		n := int(pos[t]) + 1
		for h := 0; h < nh; h++ {
			kv := h / group
			q := gotQKV[t*width+h*hd : t*width+(h+1)*hd]
			sc := make([]float64, n)
			mx := math.Inf(-1)
			rowOf := func(j int) int {
				blk := int(bt[int(tokSeq[t])*btStride+j/bs])
				return ((blk*nkv+kv)*bs + j%bs) * hd
			}
			for j := 0; j < n; j++ {
				o := rowOf(j)
				s := 0.0
				for d := 0; d < hd; d++ {
					s += float64(bf2f(q[d])) * float64(bf2f(gotK[o+d]))
				}
				sc[j] = s / math.Sqrt(float64(hd))
				mx = max(mx, sc[j])
			}
			z := 0.0
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				z += sc[j]
			}
			for j := 0; j < n; j++ {
				o := rowOf(j)
				for d := 0; d < hd; d++ {
					ref[t*nh*hd+h*hd+d] += sc[j] / z * float64(bf2f(gotV[o+d]))
				}
			}
		}
	}
	g.check("paged_attention "+c.name, gotOut, ref, tolBF16)

	// attn_mma over the same step, one KV split and three (with the
	// combine), where it covers the shape.
	if !FlashSupported(shape) {
		return
	}
	// Tiles: the decode token (row nPref) and the prefill chunk in runs of
	// n tokens.
	cut := func(n int) []int32 {
		var tl []int32
		for j := 0; j < c.nPref; j += n {
			tl = append(tl, int32(j), int32(min(n, c.nPref-j)))
		}
		return tl
	}
	decodeTile := []int32{int32(c.nPref), 1}
	tt, mt := FlashTileTokens(shape), FlashMidTokens(shape)
	// As stepMeta lays them out: the warp tile, then the chunk's runs of tt
	// whose length fits the mid form, then the others.
	var mids, bigs []int32
	for tl := cut(tt); len(tl) > 0; tl = tl[2:] {
		if tl[1] <= int32(mt) {
			mids = append(mids, tl[:2]...)
		} else {
			bigs = append(bigs, tl[:2]...)
		}
	}
	backend := slices.Concat(decodeTile, mids, bigs)
	bigOnly, midOnly := slices.Concat(cut(tt), decodeTile), slices.Concat(decodeTile, cut(mt))
	for _, r := range []struct {
		what   string
		tiles  []int32
		counts FlashTiles
		z      FlashSplitCounts
	}{
		{"four-warp form on every tile", bigOnly, FlashTiles{Big: len(bigOnly) / 2}, FlashSplitCounts{1, 1, 1}},
		{"mid form on the chunk", midOnly, FlashTiles{Warp: 1, Mid: len(midOnly)/2 - 1}, FlashSplitCounts{1, 1, 1}},
		{"mid form on the chunk, 3 splits", midOnly, FlashTiles{Warp: 1, Mid: len(midOnly)/2 - 1}, FlashSplitCounts{3, 3, 1}},
		{"as the backend", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2}, FlashSplitCounts{1, 1, 1}},
		{"as the backend, 3 splits", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2}, FlashSplitCounts{3, 3, 3}},
		// Each launch split its own way over a scratch of the largest.
		{"as the backend, 1/3/2 splits", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2}, FlashSplitCounts{1, 3, 2}},
		{"as the backend, 3/1/2 splits", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2}, FlashSplitCounts{3, 1, 2}},
		{"as the backend, the decode tile on attn_dec", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2, Single: true}, FlashSplitCounts{1, 1, 1}},
		{"as the backend, attn_dec, 3 splits", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2, Single: true}, FlashSplitCounts{3, 3, 3}},
		{"as the backend, attn_dec, 5/1/2 splits", backend, FlashTiles{Warp: 1, Mid: len(mids) / 2, Big: len(bigs) / 2, Single: true}, FlashSplitCounts{5, 1, 2}},
	} {
		// A Single tile list: the decode tile on attn_dec, where the shape
		// has it.
		if r.counts.Single && FlashDecodeKernel(shape) == "" {
			continue
		}
		fout := g.alloc(T * nh * hd * 2)
		scratch := DevicePtr(0)
		if n := FlashScratchBytes(shape, T, r.z.max()); n > 0 {
			scratch = g.alloc(n)
			// Stale partials, as a previous step leaves them: a row whose
			// launch has fewer splits than the scratch must not merge them.
			g.ok(g.s.Memset8Async(scratch, 0x3f, n))
		}
		g.ok(g.k.FlashAttention(g.s, shape, FlashArgs{
			AttentionArgs: AttentionArgs{Out: fout, Q: qkvd, QStride: width, KCache: kd, VCache: vd,
				TokSeq: up(g, tokSeq), Pos: up(g, pos), BlockTables: up(g, bt), BTStride: btStride,
				T: T, Scale: float32(1 / math.Sqrt(float64(hd)))},
			Tiles: up(g, r.tiles), TileCounts: r.counts, Splits: r.z, Scratch: scratch, Decode: r.counts.Single,
		}))
		g.check(fmt.Sprintf("attn_mma %s (%+v) %s", r.what, r.counts, c.name), bfSlice(down[uint16](g, fout, T*nh*hd)), ref, tolBF16)
	}
}

// allowed is the set sample_f32 may draw from: top-k (ties kept), then the
// smallest top-p nucleus, plus the next token for float slack.
func allowed(row []float32, temp float32, k int, p float32) map[int]bool {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
	keep := len(row)
	if k > 0 && k < len(row) {
		keep = k
		for keep < len(row) && row[idx[keep]] == row[idx[k-1]] {
			keep++
		}
	}
	if p < 1 {
		mx := float64(row[idx[0]])
		z := 0.0
		w := make([]float64, keep)
		for i := 0; i < keep; i++ {
			w[i] = math.Exp((float64(row[idx[i]]) - mx) / float64(temp))
			z += w[i]
		}
		acc, n := 0.0, 0
		for n < keep {
			acc += w[n]
			n++
			if acc >= float64(p)*z {
				break
			}
		}
		keep = min(keep, n+1)
	}
	m := map[int]bool{}
	for _, i := range idx[:keep] {
		m[i] = true
	}
	return m
}

func TestGPUSample(t *testing.T) {
	g := newGPU(t)
	r := rand.New(rand.NewPCG(5, 6))
	const R, V = 8, 1000
	logits := randF32(r, R*V, 0, 2)
	// Row 6 copies row 5 with the same seed: it must draw the same tokens.
	copy(logits[6*V:7*V], logits[5*V:6*V])
	temp := []float32{0, 1, 0.8, 1, 1.2, 1, 1, 0.7}
	topK := []int32{0, 1, 5, 0, 50, 0, 0, 10}
	topP := []float32{1, 1, 1, 0.3, 0.9, 1, 1, 0.5}
	seed := []uint64{1, 2, 3, 4, 5, 6, 6, 8}
	ctr := make([]uint64, R)
	out := g.alloc(R * 4)
	ctrd := up(g, ctr)
	args := SampleArgs{Out: out, Logits: up(g, logits), V: V, Stride: V, Rows: R, Temperature: up(g, temp),
		TopK: up(g, topK), TopP: up(g, topP), Seed: up(g, seed), Counter: ctrd, Part: g.alloc(R * SamplePartBytesPerRow)}
	am := g.alloc(R * 4)
	g.ok(g.k.Argmax(g.s, am, args.Logits, R, V, V))
	argmax := down[int32](g, am, R)
	sets := make([]map[int]bool, R)
	for i := range sets {
		sets[i] = allowed(logits[i*V:(i+1)*V], temp[i], int(topK[i]), topP[i])
	}
	const draws = 200
	distinct := make([]map[int32]bool, R)
	for i := range distinct {
		distinct[i] = map[int32]bool{}
	}
	for d := 0; d < draws; d++ {
		g.ok(g.k.Sample(g.s, args))
		got := down[int32](g, out, R)
		for i, tok := range got {
			distinct[i][tok] = true
			switch {
			case (i == 0 || i == 1) && tok != argmax[i]:
				t.Fatalf("draw %d row %d: %d, want argmax %d", d, i, tok, argmax[i])
			case !sets[i][int(tok)]:
				t.Fatalf("draw %d row %d: token %d outside the top-k/top-p set (%d tokens)", d, i, tok, len(sets[i]))
			}
		}
		if got[5] != got[6] {
			t.Fatalf("draw %d: same seed and counter drew %d and %d", d, got[5], got[6])
		}
	}
	if c := down[uint64](g, ctrd, R); c[0] != draws || c[7] != draws {
		t.Fatalf("counters %v, want %d each", c, draws)
	}
	t.Logf("SAMPLE distinct tokens per row over %d draws: %d %d %d %d %d %d %d %d (top-k 5 row ≤ 5, top-p rows narrow)", draws,
		len(distinct[0]), len(distinct[1]), len(distinct[2]), len(distinct[3]), len(distinct[4]), len(distinct[5]), len(distinct[6]), len(distinct[7]))
	if len(distinct[2]) > 5 || len(distinct[5]) < 20 {
		t.Errorf("top-k 5 row drew %d distinct tokens, unfiltered row %d", len(distinct[2]), len(distinct[5]))
	}

	// Distribution: 4096 rows of the same 8 logits, one draw each, against
	// softmax(l/T) within 5 standard deviations.
	const DR, DV = 4096, 8
	small := []float32{0.1, 1.5, -1, 0.7, 2.2, 0, -0.5, 1}
	dl := make([]float32, DR*DV)
	dt, dk, dp, ds := make([]float32, DR), make([]int32, DR), make([]float32, DR), make([]uint64, DR)
	for i := 0; i < DR; i++ {
		copy(dl[i*DV:], small)
		dt[i], dp[i], ds[i] = 0.9, 1, uint64(1000+i)
	}
	dout := g.alloc(DR * 4)
	g.ok(g.k.Sample(g.s, SampleArgs{Out: dout, Logits: up(g, dl), V: DV, Stride: DV, Rows: DR, Temperature: up(g, dt),
		TopK: up(g, dk), TopP: up(g, dp), Seed: up(g, ds), Counter: up(g, make([]uint64, DR)), Part: g.alloc(DR * SamplePartBytesPerRow)}))
	cnt := make([]float64, DV)
	for _, tok := range down[int32](g, dout, DR) {
		cnt[tok]++
	}
	z := 0.0
	for _, l := range small {
		z += math.Exp(float64(l) / 0.9)
	}
	worst := 0.0
	for i, l := range small {
		p := math.Exp(float64(l)/0.9) / z
		sd := math.Sqrt(DR * p * (1 - p))
		dev := math.Abs(cnt[i]-DR*p) / sd
		worst = max(worst, dev)
		if dev > 5 {
			t.Errorf("token %d drawn %v times, expected %.0f ± %.0f", i, cnt[i], DR*p, sd)
		}
	}
	t.Logf("SAMPLE distribution over %d draws: worst deviation %.2f sd", DR, worst)
}

func TestGPUGemm(t *testing.T) {
	g := newGPU(t)
	b, err := g.c.NewBLAS()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Logf("cuBLASLt %s version %d", b.Path, b.Version)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []gemmCase{
		{7, 96, 64, F32, false}, {7, 96, 64, BF16, false}, {33, 1000, 520, F32, true},
		{1, 2048, 1024, BF16, false}, {128, 3072, 1024, F32, false},
	} {
		g.checkGemm(r, "gemm "+c.String(), c, 0, func(y, x, w DevicePtr) error {
			return b.Gemm(g.s, GemmShape{M: c.M, N: c.N, K: c.K, In: BF16, Out: c.out}, y, x, w, c.acc)
		})
	}
	if b.Plans() != 5 {
		t.Errorf("%d plans cached for 5 shapes", b.Plans())
	}
	g.ok(b.Gemm(g.s, GemmShape{M: 7, N: 96, K: 64, In: BF16, Out: F32}, g.alloc(7*96*4), g.alloc(7*64*2), g.alloc(96*64*2), false))
	if b.Plans() != 5 {
		t.Errorf("a repeated shape built a new plan (%d)", b.Plans())
	}

	// Throughput of one large bf16 GEMM (for the report; not a test).
	const M, N, K = 4096, 4096, 4096
	sh := GemmShape{M: M, N: N, K: K, In: BF16, Out: BF16}
	xb, wb, yb := up(g, randBF16(r, M*K, 1)), up(g, randBF16(r, N*K, 0.02)), g.alloc(M*N*2)
	ms := g.launchMS(20, func(int) error { return b.Gemm(g.s, sh, yb, xb, wb, false) })
	t.Logf("PERF gemm 4096^3 bf16: %.3f ms, %.0f TFLOP/s", ms, 2*M*N*K/(ms*1e-3)/1e12)
}

// TestGPUGraphReplay captures embed → RMSNorm → GEMM (+= residual) →
// argmax in a graph and checks that replays with new tokens match an eager
// run exactly.
func TestGPUGraphReplay(t *testing.T) {
	g := newGPU(t)
	b, err := g.c.NewBLAS()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(9, 10))
	const T, H, V = 8, 512, 300
	table := up(g, randBF16(r, V*H, 1))
	wn := up(g, randF32(r, H, 1, 0.1))
	wo := up(g, randBF16(r, H*H, 0.05))
	tokens := g.alloc(T * 4)
	x, h, am := g.alloc(T*H*4), g.alloc(T*H*2), g.alloc(T*4)
	sh := GemmShape{M: T, N: H, K: H, In: BF16, Out: F32}
	seq := func() error {
		if err := g.k.Embed(g.s, x, table, tokens, T, H); err != nil {
			return err
		}
		if err := g.k.RMSNorm(g.s, h, x, wn, T, H, 1e-6); err != nil {
			return err
		}
		if err := b.Gemm(g.s, sh, x, h, wo, true); err != nil {
			return err
		}
		return g.k.Argmax(g.s, am, x, T, H, H)
	}
	newTokens := func() {
		tk := make([]int32, T)
		for i := range tk {
			tk[i] = int32(r.IntN(V))
		}
		upInto(g, tokens, tk)
	}
	newTokens()
	g.ok(seq()) // builds the GEMM plan outside the capture
	g.ok(g.s.Synchronize())
	g.ok(g.s.BeginCapture())
	if err := seq(); err != nil {
		g.s.EndCapture()
		t.Fatal(err)
	}
	graph, err := g.s.EndCapture()
	g.ok(err)
	defer graph.Destroy()
	for trial := 0; trial < 3; trial++ {
		newTokens()
		g.ok(seq())
		wantX, wantA := down[float32](g, x, T*H), down[int32](g, am, T)
		g.ok(g.s.Memset8Async(x, 0xff, T*H*4))
		g.ok(g.s.Memset8Async(am, 0xff, T*4))
		g.ok(graph.Launch(g.s))
		gotX, gotA := down[float32](g, x, T*H), down[int32](g, am, T)
		for i := range wantX {
			if gotX[i] != wantX[i] {
				t.Fatalf("trial %d: replay x[%d] = %v, eager %v", trial, i, gotX[i], wantX[i])
			}
		}
		for i := range wantA {
			if gotA[i] != wantA[i] {
				t.Fatalf("trial %d: replay argmax[%d] = %d, eager %d", trial, i, gotA[i], wantA[i])
			}
		}
	}
	// Launch cost: eager sequence vs graph replay, 200 each.
	timeIt := func(f func() error) float64 {
		g.ok(g.s.Synchronize())
		t0 := time.Now()
		for i := 0; i < 200; i++ {
			g.ok(f())
		}
		g.ok(g.s.Synchronize())
		return float64(time.Since(t0).Microseconds()) / 200
	}
	eager := timeIt(seq)
	replay := timeIt(func() error { return graph.Launch(g.s) })
	t.Logf("PERF graph of 4 launches (T=%d H=%d): eager %.1f us, replay %.1f us per sequence", T, H, eager, replay)
}

// TestGPUFlashResidency asks the driver how many attn_mma blocks of each
// form a multiprocessor holds (what FlashSplits sizes its splits by): at
// least one of each, and no fewer one-warp blocks than blocks of either
// four-warp form, which need four times the registers.
func TestGPUFlashResidency(t *testing.T) {
	g := newGPU(t)
	for _, hd := range []int{64, 128} {
		r, err := g.k.FlashResidency(hd)
		g.ok(err)
		t.Logf("attn_mma head dim %d: %d one-warp, %d mid, %d four-warp blocks per multiprocessor", hd, r.W1, r.Mid, r.W4)
		if r.W4 < 1 || r.Mid < 1 || r.W1 < r.W4 || r.W1 < r.Mid {
			t.Errorf("head dim %d: %+v", hd, r)
		}
	}
}
