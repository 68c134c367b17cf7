//go:build !amd64 || purego

package cpu

// Without the amd64 assembly the vector entry points are never called
// (detectSIMD says so); these bodies only keep the callers portable.

func detectSIMD() (avx2, f16c, avx512 bool) { return false, false, false }

func cvtBF16AVX2(dst *float32, src *uint16, n int) { panic("unreachable") }
func cvtF16F16C(dst *float32, src *uint16, n int)  { panic("unreachable") }
func dot4x2AVX2(w *float32, stride int, x0, x1 *float32, n int, out *[8]float32) {
	panic("unreachable")
}
func dot4x1AVX2(w *float32, stride int, x0 *float32, n int, out *[4]float32) { panic("unreachable") }
func dot4x1BF16AVX2(w *uint16, stride int, x0 *float32, n int, out *[4]float32) {
	panic("unreachable")
}
func dot4x4AVX512(w *float32, stride int, x *float32, xstride int, n int, out *[16]float32) {
	panic("unreachable")
}
func dotAVX2(a, b *float32, n int) float32 { panic("unreachable") }
func axpy4AVX2(a *[4]float32, x *float32, stride int, y *float32, n int) {
	panic("unreachable")
}
func axpyAVX2(a float32, x, y *float32, n int) { panic("unreachable") }
