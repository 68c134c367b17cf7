package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// gpu is one test's device: driver, primary context, kernels and a stream,
// all on the test goroutine's locked OS thread.
type gpu struct {
	t *testing.T
	d *Driver
	c *Context
	k *Kernels
	s *Stream
}

// newGPU skips the test when there is no usable GPU (CI); on a machine
// with one, every failure after that is a test failure.
func newGPU(t *testing.T) *gpu {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	d, err := LoadDriver()
	if err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	if err := d.Init(); err != nil {
		t.Skipf("cuInit failed, GPU test skipped: %v", err)
	}
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device, GPU test skipped (%v)", err)
	}
	c, err := d.RetainPrimary(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Release() })
	k, err := c.LoadKernels()
	if errors.Is(err, ErrNoKernels) {
		t.Skipf("GPU present but no kernels in this build: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	// The kernel tests launch as the backend does: with programmatic
	// dependent launch where the GPU has it, so each kernel's wait for
	// the one before is exercised (results are read after a sync).
	info, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	k.SetPDL(true, info)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return &gpu{t: t, d: d, c: c, k: k, s: s}
}

func (g *gpu) ok(err error) {
	g.t.Helper()
	if err != nil {
		g.t.Fatal(err)
	}
}

// alloc allocates n bytes poisoned with 0xFF (NaN for f32 and bf16, -1
// for int32), so that unwritten outputs show.
func (g *gpu) alloc(n int) DevicePtr {
	g.t.Helper()
	p, err := g.c.Alloc(n)
	g.ok(err)
	g.t.Cleanup(func() { g.c.Free(p) })
	g.ok(g.s.Memset8Async(p, 0xff, n))
	g.ok(g.s.Synchronize())
	return p
}

func up[T any](g *gpu, v []T) DevicePtr {
	g.t.Helper()
	n := len(v) * int(unsafe.Sizeof(v[0]))
	p := g.alloc(n)
	g.ok(g.c.CopyHtoD(p, unsafe.Pointer(&v[0]), n))
	// A pageable copy may return before the DMA lands; the kernels run on a
	// non-blocking stream, so wait for the whole context.
	g.ok(g.c.Synchronize())
	return p
}

func upInto[T any](g *gpu, p DevicePtr, v []T) {
	g.t.Helper()
	g.ok(g.c.CopyHtoD(p, unsafe.Pointer(&v[0]), len(v)*int(unsafe.Sizeof(v[0]))))
	g.ok(g.c.Synchronize())
}

func down[T any](g *gpu, p DevicePtr, n int) []T {
	g.t.Helper()
	g.ok(g.s.Synchronize())
	v := make([]T, n)
	g.ok(g.c.CopyDtoH(unsafe.Pointer(&v[0]), p, n*int(unsafe.Sizeof(v[0]))))
	return v
}

func bf2f(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

func f2bf(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func randBF16(r *rand.Rand, n int, scale float64) []uint16 {
	v := make([]uint16, n)
	for i := range v {
		v[i] = f2bf(float32(r.NormFloat64() * scale))
	}
	return v
}

func randF32(r *rand.Rand, n int, mean, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + r.NormFloat64()*scale)
	}
	return v
}

// errStats compares got with a float64 reference: max abs error, max
// error relative to the element (for |ref| > floor), and ‖got−ref‖/‖ref‖.
type errStats struct {
	maxAbs, maxRel, relL2 float64
	nan                   int
}

// f64s is v widened to float64, as compare takes its reference.
func f64s(v []float32) []float64 {
	r := make([]float64, len(v))
	for i, x := range v {
		r[i] = float64(x)
	}
	return r
}

func compare(got []float32, ref []float64) errStats {
	var s errStats
	var num, den float64
	refMax := 0.0
	for _, r := range ref {
		refMax = max(refMax, math.Abs(r))
	}
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			s.nan++
			continue
		}
		d := math.Abs(float64(g) - ref[i])
		s.maxAbs = max(s.maxAbs, d)
		if math.Abs(ref[i]) > 1e-3*refMax {
			s.maxRel = max(s.maxRel, d/math.Abs(ref[i]))
		}
		num += d * d
		den += ref[i] * ref[i]
	}
	if den > 0 {
		s.relL2 = math.Sqrt(num / den)
	}
	return s
}

// check logs the statistics in one greppable line and fails when the
// relative L2 error passes tol or any output is NaN (unwritten).
func (g *gpu) check(name string, got []float32, ref []float64, tol float64) {
	g.t.Helper()
	s := compare(got, ref)
	g.t.Logf("ERR %-28s n=%-7d max_abs=%.3g max_rel=%.3g rel_l2=%.3g tol=%.0e", name, len(got), s.maxAbs, s.maxRel, s.relL2, tol)
	if s.nan > 0 || !(s.relL2 <= tol) {
		g.t.Errorf("%s: %d NaN/unwritten, rel_l2 %.3g > %.0e", name, s.nan, s.relL2, tol)
	}
}

func bfSlice(v []uint16) []float32 {
	f := make([]float32, len(v))
	for i, u := range v {
		f[i] = bf2f(u)
	}
	return f
}

// gemmCase is one GEMM of the GEMM tests: Y = X·Wᵀ, or Y += X·Wᵀ with acc.
type gemmCase struct {
	M, N, K int
	out     DType
	acc     bool
}

func (c gemmCase) String() string {
	s := fmt.Sprintf("%dx%dx%d %v", c.M, c.N, c.K, c.out)
	if c.acc {
		s += " +=Y"
	}
	return s
}

// checkGemm runs one GEMM through run on random bf16 operands (x rows of
// scale 1, w of 0.05; Y first holding random values when accumulating)
// and checks Y's M rows against a float64 reference. Y is allocated with
// extra rows past M, poisoned (see alloc), which come back to the caller
// as read.
func (g *gpu) checkGemm(r *rand.Rand, name string, c gemmCase, extra int, run func(y, x, w DevicePtr) error) []float32 {
	g.t.Helper()
	x, w := randBF16(r, c.M*c.K, 1), randBF16(r, c.N*c.K, 0.05)
	y := g.alloc((c.M + extra) * c.N * c.out.Size())
	var y0 []float32
	if c.acc {
		y0 = randF32(r, c.M*c.N, 0, 1)
		upInto(g, y, y0)
	}
	g.ok(run(y, up(g, x), up(g, w)))
	ref := make([]float64, c.M*c.N)
	for i := 0; i < c.M; i++ {
		for j := 0; j < c.N; j++ {
			s := 0.0
			for k := 0; k < c.K; k++ {
				s += float64(bf2f(x[i*c.K+k])) * float64(bf2f(w[j*c.K+k]))
			}
			if c.acc {
				s += float64(y0[i*c.N+j])
			}
			ref[i*c.N+j] = s
		}
	}
	n := (c.M + extra) * c.N
	var got []float32
	tol := tolF32
	if c.out == F32 {
		got = down[float32](g, y, n)
	} else {
		got, tol = bfSlice(down[uint16](g, y, n)), tolBF16
	}
	g.check(name, got[:c.M*c.N], ref, tol)
	return got[c.M*c.N:]
}

// distinctWeights allocates n weight matrices of size bytes each (freed
// with the test), for PERF timings that give every launch its own, so
// that no launch finds its weights in L2 from the one before.
func (g *gpu) distinctWeights(size, n int) []DevicePtr {
	g.t.Helper()
	ws := make([]DevicePtr, n)
	for i := range ws {
		ws[i] = g.alloc(size)
	}
	return ws
}

// launchMS times f on the test stream with CUDA events, for the PERF
// report lines: f(0) once untimed (plans, lazily loaded kernels), then
// f(0) … f(reps-1) back to back; it returns the milliseconds per call.
func (g *gpu) launchMS(reps int, f func(i int) error) float64 {
	e0, err := g.c.NewEvent()
	g.ok(err)
	defer e0.Destroy()
	e1, err := g.c.NewEvent()
	g.ok(err)
	defer e1.Destroy()
	g.ok(f(0))
	g.ok(e0.Record(g.s))
	for i := 0; i < reps; i++ {
		g.ok(f(i))
	}
	g.ok(e1.Record(g.s))
	g.ok(e1.Synchronize())
	ms, err := ElapsedMS(e0, e1)
	g.ok(err)
	return float64(ms) / float64(reps)
}

// layerGemm is one GEMM of a transformer layer: N outputs from K inputs,
// the output type, and whether it adds into the f32 residual (o_proj and
// down_proj do).
type layerGemm struct {
	name string
	N, K int
	out  DType
	acc  bool
}

// shape is the GEMM at M rows.
func (l layerGemm) shape(M int) GemmShape {
	return GemmShape{M: M, N: l.N, K: l.K, In: BF16, Out: l.out}
}

// layerGemms4B are the Qwen3-4B-shaped layer's GEMMs (qkv, o, gate_up,
// down), the ones the GEMM timings report on.
func layerGemms4B() []layerGemm {
	return []layerGemm{{"4B qkv", 6144, 2560, BF16, false}, {"4B o", 2560, 4096, F32, true},
		{"4B gate_up", 19456, 2560, BF16, false}, {"4B down", 2560, 9728, F32, true}}
}

// layerGemms06B are the Qwen3-0.6B-shaped layer's.
func layerGemms06B() []layerGemm {
	return []layerGemm{{"0.6B qkv", 4096, 1024, BF16, false}, {"0.6B o", 1024, 2048, F32, true},
		{"0.6B gate_up", 6144, 1024, BF16, false}, {"0.6B down", 1024, 3072, F32, true}}
}
