package cuda

import (
	"math/rand/v2"
	"os"
	"testing"
)

// TestGPUGemmSkinny checks gemm_skinny against a float64 reference for
// every token-tile width, partly filled tiles, the three output modes and
// shapes of the Qwen3 checkpoints; rows past M must stay untouched. Then,
// for the report (PERF lines, not assertions), it times gemm_skinny beside
// cuBLASLt on the 4B-shaped layer GEMMs and LM head at 1–64 rows: the
// figures behind SkinnyAutoRows (docs/BENCHMARKS.md).
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
	e0, err := g.c.NewEvent()
	g.ok(err)
	e1, err := g.c.NewEvent()
	g.ok(err)
	const reps = 20
	timeIt := func(f func() error) float64 {
		g.ok(f()) // first launch: plan, lazy kernel load
		g.ok(e0.Record(g.s))
		for i := 0; i < reps; i++ {
			g.ok(f())
		}
		g.ok(e1.Record(g.s))
		g.ok(e1.Synchronize())
		ms, err := ElapsedMS(e0, e1)
		g.ok(err)
		return float64(ms) / reps
	}
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
