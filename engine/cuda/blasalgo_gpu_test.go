package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
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
	type shape struct {
		name string
		N, K int
		out  DType
		acc  bool
	}
	shapes := []shape{{"4B qkv", 6144, 2560, BF16, false}, {"4B o", 2560, 4096, F32, true}, {"4B gate_up", 19456, 2560, BF16, false}, {"4B down", 2560, 9728, F32, true}}
	const maxM = 2048
	for _, s := range shapes {
		size := s.N * s.K * 2
		ws := g.distinctWeights(size, max(4, 256<<20/size))
		for _, w := range ws {
			upInto(g, w, randBF16(r, s.N*s.K, 0.05))
		}
		x := up(g, randBF16(r, maxM*s.K, 1))
		y := g.alloc(maxM * s.N * 4)
		for _, M := range []int{16, 32, 64, 128, 256, 2048} {
			shape := GemmShape{M: M, N: s.N, K: s.K, In: BF16, Out: s.out}
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
			ref0 := result(0)
			ref := make([]float64, len(ref0))
			for i, v := range ref0 {
				ref[i] = float64(v)
			}
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
