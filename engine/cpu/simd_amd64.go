//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// The AVX2/FMA and AVX-512 kernels of simd_amd64.s. Go has no SIMD in the
// language (archsimd is still an experiment) and the scalar loops reach
// about one multiply-add per cycle; 8- and 16-wide FMAs are what let a batch
// of 16 decode tokens share one pass over the weights cheaply. Measured on
// the 2-core dev VM: demo-shape decode at batch 16 went from 5.4 s per step
// (scalar Go) to about 95 ms of CPU time. Build with -tags purego to use the
// portable Go kernels only.

//go:noescape
func cvtBF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func cvtF16F16C(dst *float32, src *uint16, n int)

//go:noescape
func dot4x2AVX2(w *float32, stride int, x0, x1 *float32, n int, out *[8]float32)

//go:noescape
func dot4x1AVX2(w *float32, stride int, x0 *float32, n int, out *[4]float32)

//go:noescape
func dot4x1BF16AVX2(w *uint16, stride int, x0 *float32, n int, out *[4]float32)

//go:noescape
func dot4x4AVX512(w *float32, stride int, x *float32, xstride int, n int, out *[16]float32)

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func axpy4AVX2(a *[4]float32, x *float32, stride int, y *float32, n int)

//go:noescape
func axpyAVX2(a float32, x, y *float32, n int)

// detectSIMD reports which vector kernels this CPU and OS support.
func detectSIMD() (avx2, f16c, avx512 bool) {
	avx2 = cpu.X86.HasAVX && cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasOSXSAVE
	avx512 = avx2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL
	return avx2, avx2 && cpu.X86.HasF16C, avx512
}
