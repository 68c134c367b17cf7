package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernelsAgree checks the assembly kernels against the portable ones on
// lengths around the 8- and 16-wide steps (the tails are where vector code
// goes wrong).
func TestKernelsAgree(t *testing.T) {
	avx2, f16c, avx512 := detectSIMD()
	if !avx2 {
		t.Skip("this CPU has no AVX2/FMA: only the portable kernels run here")
	}
	fast, slow := kern{avx2: avx2, f16c: f16c, avx512: avx512}, kern{}
	if !avx512 {
		t.Log("no AVX-512 here: tile4x4 runs its portable path")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	near := func(what string, n int, got, want float32) {
		t.Helper()
		// Different summation orders: bound by n ulps of the terms' scale.
		if d := math.Abs(float64(got - want)); d > 1e-6*float64(n)*math.Max(1, math.Abs(float64(want))) {
			t.Errorf("%s n=%d: %v, portable %v", what, n, got, want)
		}
	}
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 24, 31, 64, 100, 131} {
		stride := n + 3
		w := randv(3*stride + n)
		x0, x1 := randv(n), randv(n)
		var a8, b8 [8]float32
		fast.tile4x2(w, stride, x0, x1, &a8)
		slow.tile4x2(w, stride, x0, x1, &b8)
		for i := range a8 {
			near("tile4x2", n, a8[i], b8[i])
		}
		var a4, b4 [4]float32
		fast.tile4x1(w, stride, x0, &a4)
		slow.tile4x1(w, stride, x0, &b4)
		for i := range a4 {
			near("tile4x1", n, a4[i], b4[i])
		}
		// The fused bf16 single-token tile against widen-then-dot.
		wb := encode(dtBF16, w)
		wm, err := newMat(dtBF16, 1, len(w), wb)
		if err != nil {
			t.Fatal(err)
		}
		wf := make([]float32, len(w))
		slow.row(&wm, 0, wf)
		fast.tile4x1BF16(wm.u16, stride, x0, &a4)
		slow.tile4x1(wf, stride, x0, &b4)
		for i := range a4 {
			near("tile4x1BF16", n, a4[i], b4[i])
		}
		p4 := [4]float32{0.5, -1.25, 2, 0.125}
		z0, z1 := append([]float32(nil), x1...), append([]float32(nil), x1...)
		fast.axpy4(&p4, w, stride, z0)
		slow.axpy4(&p4, w, stride, z1)
		for i := range z0 {
			near("axpy4", 4, z0[i], z1[i])
		}
		// 4×4 tile: activation rows xs apart, compared with 4×2 tiles.
		xs := n + 5
		xa := randv(3*xs + n)
		var a16 [16]float32
		fast.tile4x4(w, stride, xa, xs, n, &a16)
		for tt := 0; tt < 4; tt += 2 {
			slow.tile4x2(w, stride, xa[tt*xs:tt*xs+n], xa[(tt+1)*xs:(tt+1)*xs+n], &b8)
			for j := 0; j < 8; j++ {
				near("tile4x4", n, a16[4*tt+j], b8[j])
			}
		}
		near("dot", n, fast.dot(x0, x1), slow.dot(x0, x1))
		y0, y1 := append([]float32(nil), x1...), append([]float32(nil), x1...)
		fast.axpy(0.37, x0, y0)
		slow.axpy(0.37, x0, y1)
		for i := range y0 {
			near("axpy", 1, y0[i], y1[i])
		}
		// Conversions are exact: compare bits, for every dtype.
		for _, dt := range []dtype{dtBF16, dtF16} {
			m, err := newMat(dt, 2, n, encode(dt, randv(2*n)))
			if err != nil {
				t.Fatal(err)
			}
			fb, sb := make([]float32, n), make([]float32, n)
			fast.row(&m, 1, fb)
			slow.row(&m, 1, sb)
			for i := range fb {
				if math.Float32bits(fb[i]) != math.Float32bits(sb[i]) {
					t.Fatalf("%s row n=%d elem %d: %v, portable %v", dt, n, i, fb[i], sb[i])
				}
			}
		}
	}
}
