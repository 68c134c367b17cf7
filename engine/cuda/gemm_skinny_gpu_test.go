package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// TestGPUGemmSkinny checks gemm_skinny against a float64 reference for
// every token-tile width, partly filled tiles, the three output modes,
// 8-feature blocks and shapes of the Qwen3 checkpoints; rows past M must
// stay untouched. Then,
// for the report (PERF lines, not assertions), it times gemm_skinny beside
// cuBLASLt on the 4B-shaped layer GEMMs and LM head at 1–64 rows: the
// figures behind SkinnyAutoRows and skinnyEager (docs/BENCHMARKS.md).
func TestGPUGemmSkinny(t *testing.T) {
	g := newGPU(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []gemmCase{
		{1, 6144, 2560, BF16, false}, {1, 2560, 4096, F32, true}, {3, 96, 64, F32, false},
		{8, 1024, 3072, F32, true}, {9, 4096, 1024, BF16, false}, {16, 272, 1056, F32, false},
		{31, 512, 2048, F32, true}, {52, 2560, 640, BF16, false}, {64, 160, 9728, F32, true},
	} {
		// One row more than M, which must keep its poison (NaN).
		name := "gemm_skinny " + c.String()
		past := g.checkGemm(r, name, c, 1, func(y, x, w DevicePtr) error {
			return g.k.GemmSkinny(g.s, y, x, w, c.M, c.N, c.K, c.out, c.acc)
		})
		for i, v := range past {
			if v == v { // not NaN: written
				t.Errorf("%s wrote row %d (column %d) past M", name, c.M, i)
				break
			}
		}
	}
	// The 8-feature blocks (gemm_skinny_n8_m8) on the same kind of cases.
	g.k.SetSkinnyNarrow(1 << 30)
	for _, c := range []gemmCase{{1, 2560, 9728, F32, true}, {1, 6144, 2560, BF16, false}, {3, 96, 64, F32, false}, {8, 1024, 3072, F32, true}, {5, 48, 4128, BF16, false}} {
		name := "gemm_skinny n8 " + c.String()
		for i, v := range g.checkGemm(r, name, c, 1, func(y, x, w DevicePtr) error {
			return g.k.GemmSkinny(g.s, y, x, w, c.M, c.N, c.K, c.out, c.acc)
		}) {
			if v == v {
				t.Errorf("%s wrote row %d (column %d) past M", name, c.M, i)
				break
			}
		}
	}
	g.k.SetSkinnyNarrow(0)
	if err := g.k.GemmSkinny(g.s, g.alloc(64), g.alloc(64), g.alloc(64), 65, 16, 32, F32, false); err == nil {
		t.Error("gemm_skinny took 65 rows")
	}
	if err := g.k.GemmSkinny(g.s, g.alloc(64), g.alloc(64), g.alloc(64), 1, 16, 32, BF16, true); err == nil {
		t.Error("gemm_skinny accumulated into bf16")
	}

	// Side by side with cuBLASLt on the 4B shapes (hidden 2560, q 4096,
	// kv 1024, intermediate 9728, vocabulary 151936), for the report; only
	// with TRENI_CUDA_BIG set (the check script's main run, not its
	// compute-sanitizer run, where timings mean nothing).
	if os.Getenv("TRENI_CUDA_BIG") == "" {
		return
	}
	b, err := g.c.NewBLAS()
	g.ok(err)
	defer b.Close()
	const H, Q, KV, I, V = 2560, 4096, 1024, 9728, 151936
	shapes := []struct {
		name string
		N, K int
		out  DType
		acc  bool
	}{
		{"qkv", Q + 2*KV, H, BF16, false}, {"o", H, Q, F32, true}, {"gate_up", 2 * I, H, BF16, false},
		{"down", H, I, F32, true}, {"lm_head", V, H, F32, false},
	}
	// ms per launch, 20 back to back after an untimed first (plan, lazy
	// kernel load).
	timeIt := func(f func() error) float64 { return g.launchMS(20, func(int) error { return f() }) }
	for _, s := range shapes {
		w := g.alloc(s.N * s.K * 2)
		x := up(g, randBF16(r, SkinnyMaxRows*s.K, 1))
		y := g.alloc(SkinnyMaxRows * s.N * 4)
		for _, M := range []int{1, 2, 4, 8, 16, 32, 64} {
			own := timeIt(func() error { return g.k.GemmSkinny(g.s, y, x, w, M, s.N, s.K, s.out, s.acc) })
			lt := timeIt(func() error {
				return b.Gemm(g.s, GemmShape{M: M, N: s.N, K: s.K, In: BF16, Out: s.out}, y, x, w, s.acc)
			})
			gb := float64(s.N*s.K*2) / 1e6
			t.Logf("PERF gemm %-7s M=%-2d N=%-6d K=%-4d  gemm_skinny %7.1f us %6.0f GB/s   cuBLASLt %7.1f us %6.0f GB/s   skinny/cuBLASLt %.2f",
				s.name, M, s.N, s.K, own*1e3, gb/own, lt*1e3, gb/lt, own/lt)
		}
	}
}

// TestGPUGemmSkinnyStream times gemm_skinny at the rows of decode steps
// and short prefills (1, 4, 8, 9 and 16), on 16- and on 8-feature blocks,
// and cuBLASLt beside them, on the layer GEMMs of the 4B and 0.6B shapes,
// back to back
// (PDL as newGPU set it) on distinct weights, at least 256 MB of them, so
// that none comes from the 50 MB L2: the bandwidth the decode step sees,
// which TestGPUGemmSkinny's table (one weight matrix, L2-warm for the
// smaller ones) overstates. PERF lines for the report, not assertions;
// only with TRENI_CUDA_BIG set.
func TestGPUGemmSkinnyStream(t *testing.T) {
	if os.Getenv("TRENI_CUDA_BIG") == "" {
		t.Skip("set TRENI_CUDA_BIG to time gemm_skinny on distinct weights")
	}
	g := newGPU(t)
	r := rand.New(rand.NewPCG(31, 32))
	shapes := append(layerGemms4B(), layerGemms06B()...)
	// TRENI_SKINNY_SHAPES=NxK,…: these shapes instead (f32 +=, as o_proj
	// and down_proj), for questions such as how the block count over the
	// SMs sets the stream rate.
	if env := os.Getenv("TRENI_SKINNY_SHAPES"); env != "" {
		shapes = nil
		for _, f := range strings.Split(env, ",") {
			var N, K int
			if _, err := fmt.Sscanf(f, "%dx%d", &N, &K); err != nil || N%16 != 0 || K%32 != 0 {
				t.Fatalf("TRENI_SKINNY_SHAPES: %q is not NxK with N a multiple of 16 and K of 32", f)
			}
			shapes = append(shapes, layerGemm{f, N, K, F32, true})
		}
	}
	b, err := g.c.NewBLAS()
	g.ok(err)
	defer b.Close()
	rows := []int{1, 4, 8, 9, 16}
	for _, s := range shapes {
		size := s.N * s.K * 2
		ws := g.distinctWeights(size, max(4, 256<<20/size))
		x, y := up(g, randBF16(r, 16*s.K, 1)), g.alloc(16*s.N*4)
		rate := func(M int, ms float64) string {
			return fmt.Sprintf("   M=%-2d %6.1f us %5.0f GB/s", M, ms*1e3, float64(size)/1e6/ms)
		}
		for _, narrow := range []bool{false, true} {
			form := "16-wide"
			if narrow {
				g.k.SetSkinnyNarrow(1 << 30)
				form = "8-wide"
			}
			line := fmt.Sprintf("PERF stream %-12s N=%-5d K=%-4d %-8s", s.name, s.N, s.K, form)
			for _, M := range rows {
				line += rate(M, g.launchMS(len(ws), func(i int) error { return g.k.GemmSkinny(g.s, y, x, ws[i], M, s.N, s.K, s.out, s.acc) }))
			}
			t.Log(line)
			g.k.SetSkinnyNarrow(0)
		}
		// cuBLASLt on the same weights, the path GemmAuto takes past
		// SkinnyAutoRows where skinnyEager does not keep gemm_skinny (its
		// first launch of a shape, which loads the kernel, is untimed).
		line := fmt.Sprintf("PERF stream %-12s N=%-5d K=%-4d %-8s", s.name, s.N, s.K, "cuBLASLt")
		for _, M := range rows {
			shape := GemmShape{M: M, N: s.N, K: s.K, In: BF16, Out: s.out}
			line += rate(M, g.launchMS(len(ws), func(i int) error { return b.Gemm(g.s, shape, y, x, ws[i], s.acc) }))
		}
		t.Log(line)
	}
}

// TestGPUGemmSkinnyFused checks gemm_skinny's fused operand forms on the
// device against their unfused twins: the RMSNorm operand against the
// rmsnorm kernel then gemm_skinny (within bf16 rounding: the two sum the
// squares in different orders), the SwiGLU operand against the swiglu
// kernel then gemm_skinny (bit for bit). Then, for the report (with
// TRENI_CUDA_BIG), it times each fused launch beside the two it replaces
// on the 4B shapes at one row.
func TestGPUGemmSkinnyFused(t *testing.T) {
	g := newGPU(t)
	r := rand.New(rand.NewPCG(21, 22))
	const eps = 1e-6
	for _, c := range []struct{ M, N, H, I int }{{1, 6144, 2560, 9728}, {5, 1024, 512, 1536}, {8, 96, 64, 128}, {2, 2560, 2560, 9728}} {
		M, N, H, I := c.M, c.N, c.H, c.I
		x, nw, w := up(g, randF32(r, M*H, 0, 3)), up(g, randF32(r, H, 1, 0.1)), up(g, randBF16(r, N*H, 0.05))
		h, yRef, y := g.alloc(M*H*2), g.alloc(M*N*2), g.alloc(M*N*2)
		g.ok(g.k.RMSNorm(g.s, h, x, nw, M, H, eps))
		g.ok(g.k.GemmSkinny(g.s, yRef, h, w, M, N, H, BF16, false))
		g.ok(g.k.GemmSkinnyNorm(g.s, y, x, nw, w, M, N, H, eps, BF16))
		ref := f64s(bfSlice(down[uint16](g, yRef, M*N)))
		g.check(fmt.Sprintf("gemm_skinny RMSNorm operand %dx%dx%d", M, N, H), bfSlice(down[uint16](g, y, M*N)), ref, tolBF16)

		if !SkinnyFusedFits(M, I) {
			continue
		}
		gu, wd := up(g, randBF16(r, M*2*I, 2)), up(g, randBF16(r, H*I, 0.05))
		act := g.alloc(M * I * 2)
		init := randF32(r, M*H, 0, 1)
		yRefF, yF := up(g, init), up(g, init)
		g.ok(g.k.SwiGLU(g.s, act, gu, M, I))
		g.ok(g.k.GemmSkinny(g.s, yRefF, act, wd, M, H, I, F32, true))
		g.ok(g.k.GemmSkinnySwiGLU(g.s, yF, gu, wd, M, H, I, F32, true))
		want, got := down[float32](g, yRefF, M*H), down[float32](g, yF, M*H)
		for i := range want {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
				t.Errorf("gemm_skinny SwiGLU operand %dx%dx%d: element %d is %g; the swiglu kernel then gemm_skinny give %g", M, H, I, i, got[i], want[i])
				break
			}
		}
		t.Logf("ERR gemm_skinny SwiGLU operand %dx%dx%d: bit-identical to swiglu + gemm_skinny over %d values", M, H, I, len(want))
	}
	p := g.alloc(1 << 16)
	if err := g.k.GemmSkinnyNorm(g.s, p, p, p, p, 9, 16, 32, eps, BF16); err == nil {
		t.Error("the RMSNorm operand took 9 rows")
	}
	if err := g.k.GemmSkinnySwiGLU(g.s, p, p, p, 3, 16, 9728, F32, true); err == nil {
		t.Error("the SwiGLU operand took 3 rows of 9,728")
	}

	if os.Getenv("TRENI_CUDA_BIG") == "" {
		return
	}
	// One row of the 4B shapes: the fused launch beside the two it
	// replaces, back to back (PDL as newGPU set it), distinct weights
	// per launch so that none comes from L2.
	const H, Q, KV, I, reps = 2560, 4096, 1024, 9728, 8
	// µs per launch over reps launches, launch i on weights ws[i].
	timeIt := func(f func(i int) error) float64 { return 1e3 * g.launchMS(reps, f) }
	x, h, nw := up(g, randF32(r, H, 0, 1)), g.alloc(H*2), up(g, randF32(r, H, 1, 0.1))
	for _, s := range []struct {
		name string
		N    int
	}{{"qkv", Q + 2*KV}, {"gate_up", 2 * I}} {
		ws := g.distinctWeights(s.N*H*2, reps)
		y := g.alloc(s.N * 2)
		two := timeIt(func(i int) error {
			if err := g.k.RMSNorm(g.s, h, x, nw, 1, H, eps); err != nil {
				return err
			}
			return g.k.GemmSkinny(g.s, y, h, ws[i], 1, s.N, H, BF16, false)
		})
		one := timeIt(func(i int) error { return g.k.GemmSkinnyNorm(g.s, y, x, nw, ws[i], 1, s.N, H, eps, BF16) })
		t.Logf("PERF fused %-7s M=1 N=%-5d K=%-4d  rmsnorm + gemm_skinny %6.1f us   gemm_skinny_m8_norm   %6.1f us", s.name, s.N, H, two, one)
	}
	ws := g.distinctWeights(H*I*2, reps)
	gu, act, y := up(g, randBF16(r, 2*I, 1)), g.alloc(I*2), g.alloc(H*4)
	two := timeIt(func(i int) error {
		if err := g.k.SwiGLU(g.s, act, gu, 1, I); err != nil {
			return err
		}
		return g.k.GemmSkinny(g.s, y, act, ws[i], 1, H, I, F32, true)
	})
	one := timeIt(func(i int) error { return g.k.GemmSkinnySwiGLU(g.s, y, gu, ws[i], 1, H, I, F32, true) })
	t.Logf("PERF fused down    M=1 N=%-5d K=%-4d  swiglu + gemm_skinny  %6.1f us   gemm_skinny_m8_swiglu %6.1f us", H, I, two, one)
}
