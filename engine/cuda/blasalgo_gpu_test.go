package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/treni-top/treni-top/engine/memstat"
)

// TestGPUGemmAlgos asks whether cuBLASLt's heuristic pick is its fastest
// algorithm on the 4B layer GEMMs at the row counts serving runs (decode
// buckets up to 256 rows, a 2,048-token prefill step): for each shape and
// M it times up to 16 of the heuristic's candidates back to back on
// distinct weights (none from L2, as in a decode step), and checks that
// every candidate computes what the heuristic's pick does (SetAlgo runs
// the algorithm it is given). PERF lines for the report; only with
// TRENI_CUDA_BIG set.
func TestGPUGemmAlgos(t *testing.T) {
	if os.Getenv("TRENI_CUDA_BIG") == "" {
		t.Skip("set TRENI_CUDA_BIG to time cuBLASLt's candidate algorithms")
	}
	g := newGPU(t)
	b, err := g.c.NewBLAS()
	if err != nil {
		t.Skipf("no cuBLASLt: %v", err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(41, 42))
	const maxM = 2048
	for _, s := range layerGemms4B() {
		size := s.N * s.K * 2
		ws := g.distinctWeights(size, max(4, 256<<20/size))
		for _, w := range ws {
			upInto(g, w, randBF16(r, s.N*s.K, 0.05))
		}
		x := up(g, randBF16(r, maxM*s.K, 1))
		y := g.alloc(maxM * s.N * 4)
		for _, M := range []int{16, 32, 64, 128, 256, 2048} {
			shape := s.shape(M)
			algos, err := b.Algos(shape, 16)
			g.ok(err)
			if len(algos) == 0 {
				t.Fatalf("%s M=%d: cuBLASLt offers no algorithm", s.name, M)
			}
			// The output of algorithm i on the first weights, Y = X·Wᵀ.
			result := func(i int) []float32 {
				g.ok(b.SetAlgo(shape, algos[i]))
				g.ok(g.s.Memset8Async(y, 0, M*s.N*s.out.Size()))
				g.ok(b.Gemm(g.s, shape, y, x, ws[0], s.acc))
				g.ok(g.s.Synchronize())
				if s.out == F32 {
					return down[float32](g, y, M*s.N)
				}
				return bfSlice(down[uint16](g, y, M*s.N))
			}
			ref := f64s(result(0))
			times := make([]float64, len(algos))
			best := 0
			line := ""
			for i := range algos {
				if i > 0 {
					got := result(i)
					if st := compare(got, ref); st.nan > 0 || st.relL2 > 1e-2 {
						t.Errorf("%s M=%d: algorithm %d of %d differs from the heuristic's pick: rel_l2 %.3g, %d NaN", s.name, M, i, len(algos), st.relL2, st.nan)
					}
				}
				g.ok(b.SetAlgo(shape, algos[i]))
				times[i] = g.launchMS(len(ws), func(j int) error { return b.Gemm(g.s, shape, y, x, ws[j], s.acc) })
				if times[i] < times[best] {
					best = i
				}
				line += fmt.Sprintf(" %.1f", times[i]*1e3)
			}
			flops := 2 * float64(M) * float64(s.N) * float64(s.K)
			t.Logf("PERF algos %-10s M=%-4d heuristic %7.1f us (%5.0f GB/s, %4.0f TFLOP/s); best #%-2d %7.1f us (%.2fx) of %d:%s",
				s.name, M, times[0]*1e3, float64(size)/1e6/times[0], flops/1e9/times[0], best, times[best]*1e3, times[0]/times[best], len(algos), line)
			g.ok(b.SetAlgo(shape, algos[0]))
		}
	}
}

// TestGPUBLASThreadMemory asks where the background warm-up's host memory
// goes (the server's cublaslt_aside stage ends ~126 MB of anonymous RSS
// above the stage before it): it logs the anonymous and file-backed RSS
// growth of cuBLASLt's load, of the first cuBLASLt call after it (the
// heuristic's query for one serving GEMM shape), of the queries for the
// others, of every shape's first run on the loading thread, of the same
// shapes again, of a second handle running them on a thread of its own
// (what asideWarm does), and of the first handle on yet another thread.
// On the H100 (docs/BENCHMARKS.md, tenth session) the first call took
// ~94 MB, each further query ~2.3 MB, the kernels ~19 MB, a second handle
// or thread nothing; a server that planned from remembered algorithms,
// asking no heuristic, still grew by as much in its aside warm-up (the
// first matmul pays the one-time part). PERF lines; only with
// TRENI_CUDA_BIG set; run it alone in its process.
func TestGPUBLASThreadMemory(t *testing.T) {
	if os.Getenv("TRENI_CUDA_BIG") == "" {
		t.Skip("set TRENI_CUDA_BIG to measure cuBLASLt's host memory by thread")
	}
	g := newGPU(t)
	x, y, w := g.alloc(256*9728*2), g.alloc(256*19456*4), g.alloc(19456*2560*2)
	var shapes []GemmShape
	for _, M := range []int{64, 32, 16, 128, 256} {
		for _, l := range layerGemms4B() {
			shapes = append(shapes, l.shape(M))
		}
	}
	run := func(bl *BLAS, s *Stream) error {
		for _, sh := range shapes {
			if err := bl.Gemm(s, sh, y, x, w, false); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
		}
		return nil
	}
	step := func(what string, f func() error) {
		before, err := memstat.Self()
		if err != nil {
			t.Skipf("no resident memory reading: %v", err)
		}
		g.ok(f())
		after, _ := memstat.Self()
		t.Logf("PERF blasmem %-58s anonymous %+6.1f MB, file %+6.1f MB (now %s)", what, memstat.MB(after.Anon-before.Anon), memstat.MB(after.File-before.File), after)
	}
	onThread := func(f func(s *Stream) error) error {
		return <-contextThread(g.c, "test thread", func() error {
			s, err := g.c.NewStream()
			if err != nil {
				return err
			}
			defer s.Destroy()
			return f(s)
		})
	}
	var b1 *BLAS
	step("dlopen, handle and workspace", func() (err error) { b1, err = g.c.NewBLAS(); return err })
	defer b1.Close()
	step("the heuristic's query for one shape (its plan)", func() error { _, err := b1.Algos(shapes[0], 1); return err })
	step(fmt.Sprintf("the queries for the other %d shapes", len(shapes)-1), func() error {
		for _, sh := range shapes[1:] {
			if _, err := b1.Algos(sh, 1); err != nil {
				return err
			}
		}
		return nil
	})
	step(fmt.Sprintf("first run of %d shapes, loading thread", len(shapes)), func() error { return run(b1, g.s) })
	step("the same again, loading thread", func() error { return run(b1, g.s) })
	step("a second handle on a thread of its own (as asideWarm)", func() error {
		return onThread(func(s *Stream) error {
			lib, err := openBLASPath(b1.Path)
			if err != nil {
				return err
			}
			b2, err := g.c.newBLASFrom(lib)
			if err != nil {
				return err
			}
			return errors.Join(run(b2, s), s.Synchronize(), b2.Close())
		})
	})
	step("the first handle on a third thread", func() error { return onThread(func(s *Stream) error { return run(b1, s) }) })
}
