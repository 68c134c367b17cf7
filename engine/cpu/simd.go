package cpu

import "math"

// kern selects the kernels of a Backend: the AVX2/FMA assembly where the CPU
// has it, the portable Go loops otherwise. It is a value in the Backend, not
// a package variable, so tests can run both on the same machine.
type kern struct {
	avx2, f16c, avx512 bool
}

// row returns weight row r as float32, converting bf16/f16 into buf.
func (k kern) row(m *mat, r int, buf []float32) []float32 {
	c := m.cols
	n8 := c &^ 7
	switch {
	case m.dt == dtBF16 && k.avx2 && n8 > 0:
		src := m.u16[r*c : (r+1)*c]
		cvtBF16AVX2(&buf[0], &src[0], n8)
		bf16ToF32(buf[n8:c], src[n8:])
		return buf[:c]
	case m.dt == dtF16 && k.f16c && n8 > 0:
		src := m.u16[r*c : (r+1)*c]
		cvtF16F16C(&buf[0], &src[0], n8)
		f16ToF32(buf[n8:c], src[n8:])
		return buf[:c]
	}
	return m.row(r, buf)
}

// tile4x2 computes the dots of four weight rows w[j*stride : j*stride+n]
// with two activation rows.
func (k kern) tile4x2(w []float32, stride int, x0, x1 []float32, out *[8]float32) {
	n := len(x0)
	w0, w1, w2, w3 := w[:n], w[stride:stride+n], w[2*stride:2*stride+n], w[3*stride:3*stride+n]
	n8 := n &^ 7
	if !k.avx2 || n8 == 0 {
		out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7] = dot4x2(w0, w1, w2, w3, x0, x1[:n])
		return
	}
	dot4x2AVX2(&w[0], stride, &x0[0], &x1[0], n8, out)
	if n8 < n {
		a0, a1, a2, a3, b0, b1, b2, b3 := dot4x2(w0[n8:], w1[n8:], w2[n8:], w3[n8:], x0[n8:], x1[n8:n])
		out[0] += a0
		out[1] += a1
		out[2] += a2
		out[3] += a3
		out[4] += b0
		out[5] += b1
		out[6] += b2
		out[7] += b3
	}
}

// tile4x1 computes the dots of four weight rows with one activation row.
func (k kern) tile4x1(w []float32, stride int, x0 []float32, out *[4]float32) {
	n := len(x0)
	w0, w1, w2, w3 := w[:n], w[stride:stride+n], w[2*stride:2*stride+n], w[3*stride:3*stride+n]
	n8 := n &^ 7
	if !k.avx2 || n8 == 0 {
		out[0], out[1], out[2], out[3] = dot4x1(w0, w1, w2, w3, x0)
		return
	}
	dot4x1AVX2(&w[0], stride, &x0[0], n8, out)
	if n8 < n {
		a0, a1, a2, a3 := dot4x1(w0[n8:], w1[n8:], w2[n8:], w3[n8:], x0[n8:])
		out[0] += a0
		out[1] += a1
		out[2] += a2
		out[3] += a3
	}
}

// dot is a·b.
func (k kern) dot(a, b []float32) float32 {
	n := len(a)
	n8 := n &^ 7
	if !k.avx2 || n8 == 0 {
		return dot(a, b)
	}
	b = b[:n]
	s := dotAVX2(&a[0], &b[0], n8)
	if n8 < n {
		s += dot(a[n8:], b[n8:])
	}
	return s
}

// axpy adds a·x to y.
func (k kern) axpy(a float32, x, y []float32) {
	n := len(x)
	n8 := n &^ 7
	if !k.avx2 || n8 == 0 {
		axpy(a, x, y)
		return
	}
	y = y[:n]
	axpyAVX2(a, &x[0], &y[0], n8)
	if n8 < n {
		axpy(a, x[n8:], y[n8:])
	}
}

// fusedBF16 reports whether tile4x1BF16 runs vector code.
func (k kern) fusedBF16() bool { return k.avx2 }

// tile4x1BF16 is tile4x1 straight from four bf16 weight rows (stride
// elements apart), for single-token steps.
func (k kern) tile4x1BF16(w []uint16, stride int, x0 []float32, out *[4]float32) {
	n := len(x0)
	_ = w[3*stride+n-1]
	n8 := n &^ 7
	if n8 > 0 {
		dot4x1BF16AVX2(&w[0], stride, &x0[0], n8, out)
	} else {
		*out = [4]float32{}
	}
	for j := 0; j < 4; j++ {
		var s float32
		for i := n8; i < n; i++ {
			s += math.Float32frombits(uint32(w[j*stride+i])<<16) * x0[i]
		}
		out[j] += s
	}
}

// axpy4 adds a[0]·x0 + … + a[3]·x3 to y, for four rows x_j = x[j·stride:]
// of len(y) elements.
func (k kern) axpy4(a *[4]float32, x []float32, stride int, y []float32) {
	n := len(y)
	_ = x[3*stride+n-1]
	n8 := n &^ 7
	if k.avx2 && n8 > 0 {
		axpy4AVX2(a, &x[0], stride, &y[0], n8)
	} else {
		n8 = 0
	}
	for j := 0; j < 4; j++ {
		axpy(a[j], x[j*stride+n8:j*stride+n], y[n8:])
	}
}

// tile4x4 computes the dots of four weight rows (stride apart) with four
// activation rows x[t·xstride : t·xstride+n]: out[4t+j] = w_j · x_t.
func (k kern) tile4x4(w []float32, stride int, x []float32, xstride, n int, out *[16]float32) {
	_ = w[3*stride+n-1]
	_ = x[3*xstride+n-1]
	n16 := n &^ 15
	if k.avx512 && n16 > 0 {
		dot4x4AVX512(&w[0], stride, &x[0], xstride, n16, out)
	} else {
		n16 = 0
		*out = [16]float32{}
	}
	if n16 == n {
		return
	}
	w0, w1, w2, w3 := w[n16:n], w[stride+n16:stride+n], w[2*stride+n16:2*stride+n], w[3*stride+n16:3*stride+n]
	for t := 0; t < 4; t += 2 {
		a0, a1, a2, a3, b0, b1, b2, b3 := dot4x2(w0, w1, w2, w3, x[t*xstride+n16:t*xstride+n], x[(t+1)*xstride+n16:(t+1)*xstride+n])
		out[4*t] += a0
		out[4*t+1] += a1
		out[4*t+2] += a2
		out[4*t+3] += a3
		out[4*t+4] += b0
		out[4*t+5] += b1
		out[4*t+6] += b2
		out[4*t+7] += b3
	}
}
