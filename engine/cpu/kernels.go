package cpu

import (
	"math"
	"unsafe"
)

// dtype is the stored element type of a weight matrix. It mirrors
// model.DType so that the kernels do not depend on the checkpoint reader.
type dtype uint8

const (
	dtF32 dtype = iota + 1
	dtBF16
	dtF16
)

func (d dtype) size() int {
	if d == dtF32 {
		return 4
	}
	return 2
}

func (d dtype) String() string {
	switch d {
	case dtF32:
		return "F32"
	case dtBF16:
		return "BF16"
	case dtF16:
		return "F16"
	}
	return "invalid"
}

// mat is a row-major [rows, cols] weight matrix (torch Linear layout
// [out, in]) kept in its stored dtype. Exactly one of f32 and u16 is set;
// both are views of the checkpoint's (mmapped) bytes, never copies.
type mat struct {
	dt         dtype
	rows, cols int
	f32        []float32
	u16        []uint16
}

// newMat views data as a rows×cols matrix of dt. It checks the length, so a
// truncated tensor is an error here rather than an out-of-range panic in a
// worker later.
func newMat(dt dtype, rows, cols int, data []byte) (mat, error) {
	m := mat{dt: dt, rows: rows, cols: cols}
	n := rows * cols
	if rows <= 0 || cols <= 0 || len(data) != n*dt.size() {
		return m, errShape
	}
	switch dt {
	case dtF32:
		m.f32 = unsafe.Slice((*float32)(unsafe.Pointer(&data[0])), n)
	case dtBF16, dtF16:
		m.u16 = unsafe.Slice((*uint16)(unsafe.Pointer(&data[0])), n)
	default:
		return m, errShape
	}
	return m, nil
}

// bytes is the storage size of the matrix: what one pass over it reads.
func (m *mat) bytes() int64 { return int64(m.rows) * int64(m.cols) * int64(m.dt.size()) }

// row returns row r as float32. For F32 it is a view of the weights (no
// copy); for BF16/F16 it is converted into buf, which must hold cols floats.
func (m *mat) row(r int, buf []float32) []float32 {
	c := m.cols
	switch m.dt {
	case dtF32:
		return m.f32[r*c : (r+1)*c : (r+1)*c]
	case dtBF16:
		bf16ToF32(buf[:c], m.u16[r*c:(r+1)*c])
	default:
		f16ToF32(buf[:c], m.u16[r*c:(r+1)*c])
	}
	return buf[:c]
}

// bf16ToF32 widens bfloat16 to float32: bf16 is the top half of an IEEE
// float32, so the conversion is a 16-bit shift. Unrolled by 8 because this
// loop runs once per weight element per step.
func bf16ToF32(dst []float32, src []uint16) {
	n := len(src)
	dst = dst[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		s := src[i : i+8 : i+8]
		d := dst[i : i+8 : i+8]
		d[0] = math.Float32frombits(uint32(s[0]) << 16)
		d[1] = math.Float32frombits(uint32(s[1]) << 16)
		d[2] = math.Float32frombits(uint32(s[2]) << 16)
		d[3] = math.Float32frombits(uint32(s[3]) << 16)
		d[4] = math.Float32frombits(uint32(s[4]) << 16)
		d[5] = math.Float32frombits(uint32(s[5]) << 16)
		d[6] = math.Float32frombits(uint32(s[6]) << 16)
		d[7] = math.Float32frombits(uint32(s[7]) << 16)
	}
	for ; i < n; i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

// f16ToF32 widens IEEE half precision to float32, subnormals, infinities and
// NaN included.
func f16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = halfToFloat(h)
	}
}

// halfToFloat converts one IEEE binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal: rebias 15 → 127
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: value = man × 2^-24, exact in float32.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// dot is a float32 dot product with four independent accumulators so the
// adds do not serialise on one register's latency.
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		aa := a[i : i+4 : i+4]
		bb := b[i : i+4 : i+4]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot4x1 computes the dot products of four weight rows with one activation
// row: each activation element is loaded once for four products.
func dot4x1(w0, w1, w2, w3, x []float32) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	// Two accumulators per row (even/odd k) break the add dependency chain.
	var t0, t1, t2, t3 float32
	k := 0
	for ; k+2 <= n; k += 2 {
		xa, xb := x[k], x[k+1]
		s0 += w0[k] * xa
		s1 += w1[k] * xa
		s2 += w2[k] * xa
		s3 += w3[k] * xa
		t0 += w0[k+1] * xb
		t1 += w1[k+1] * xb
		t2 += w2[k+1] * xb
		t3 += w3[k+1] * xb
	}
	for ; k < n; k++ {
		xa := x[k]
		s0 += w0[k] * xa
		s1 += w1[k] * xa
		s2 += w2[k] * xa
		s3 += w3[k] * xa
	}
	return s0 + t0, s1 + t1, s2 + t2, s3 + t3
}

// dot4x2 computes a 4 (weight rows) × 2 (tokens) tile: six loads feed eight
// multiply-adds, which is what makes batched steps cheaper per token than
// single-token ones.
func dot4x2(w0, w1, w2, w3, x0, x1 []float32) (a0, a1, a2, a3, b0, b1, b2, b3 float32) {
	n := len(x0)
	x1 = x1[:n]
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k := 0; k < n; k++ {
		xa, xb := x0[k], x1[k]
		v0, v1, v2, v3 := w0[k], w1[k], w2[k], w3[k]
		a0 += v0 * xa
		a1 += v1 * xa
		a2 += v2 * xa
		a3 += v3 * xa
		b0 += v0 * xb
		b1 += v1 * xb
		b2 += v2 * xb
		b3 += v3 * xb
	}
	return
}

// rmsNorm writes x / sqrt(mean(x²) + eps) * w into dst (dst may alias x).
// The sum of squares is accumulated in float64: it is a single pass over a
// short vector and it keeps large hidden sizes from losing precision.
func rmsNorm(dst, x, w []float32, eps float32) {
	n := len(x)
	dst, w = dst[:n], w[:n]
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
	for i, v := range x {
		dst[i] = v * scale * w[i]
	}
}

// ropeNeox rotates the two halves of one head vector (the "rotate_half"
// convention of HF Qwen and Llama): (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin).
func ropeNeox(x, cos, sin []float32) {
	half := len(cos)
	lo := x[:half]
	hi := x[half : 2*half]
	sin = sin[:half]
	for i, c := range cos {
		a, b := lo[i], hi[i]
		s := sin[i]
		lo[i] = a*c - b*s
		hi[i] = b*c + a*s
	}
}

// silu is x·sigmoid(x).
func silu(x float32) float32 {
	return x / (1 + float32(math.Exp(float64(-x))))
}

// axpy adds a·x to y.
func axpy(a float32, x, y []float32) {
	n := len(x)
	y = y[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		xx := x[i : i+4 : i+4]
		yy := y[i : i+4 : i+4]
		yy[0] += a * xx[0]
		yy[1] += a * xx[1]
		yy[2] += a * xx[2]
		yy[3] += a * xx[3]
	}
	for ; i < n; i++ {
		y[i] += a * x[i]
	}
}
