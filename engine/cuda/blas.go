package cuda

/*
#include <stdlib.h>
#include "blas_shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// BLASSonames are the cuBLASLt file names looked for, newest first.
func BLASSonames() []string {
	return []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}
}

// ErrNoBLAS is wrapped by NewBLAS's error when cuBLASLt cannot be loaded.
var ErrNoBLAS = errors.New("cuBLASLt not found")

// DType is the element type of a GEMM operand.
type DType int

// GEMM element types.
const (
	BF16 DType = iota + 1
	F32
)

func (d DType) String() string {
	switch d {
	case BF16:
		return "bf16"
	case F32:
		return "f32"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// cudaDataType_t values.
func (d DType) cuda() (int, error) {
	switch d {
	case BF16:
		return 14, nil // CUDA_R_16BF
	case F32:
		return 0, nil // CUDA_R_32F
	}
	return 0, fmt.Errorf("GEMM element type %v is not supported (bf16, f32)", d)
}

// GemmShape is one GEMM of the forward pass: Y[M,N] = X[M,K]·W[N,K]ᵀ with
// every matrix row-major, W as safetensors stores a torch Linear ([out,in]).
// X and W are In; Y is Out. It is the plan cache's key.
type GemmShape struct {
	M, N, K int
	In, Out DType
}

// layoutSpec is one matrix in cuBLASLt's column-major terms.
type layoutSpec struct {
	Type       DType
	Rows, Cols int
	LD         int
}

// gemmLayouts maps the row-major Y = X·Wᵀ onto cuBLASLt's column-major
// D = op(A)·op(B): a row-major [r,c] matrix is a column-major [c,r] one, so
// Yᵀ[N,M] = W[N,K]·Xᵀ[K,M] where A is W seen as column-major [K,N]
// (transposed: op(A) = Aᵀ) and B is X seen as column-major [K,M].
func gemmLayouts(s GemmShape) (transA, transB int, a, b, c layoutSpec) {
	const opN, opT = 0, 1
	return opT, opN,
		layoutSpec{Type: s.In, Rows: s.K, Cols: s.N, LD: s.K},
		layoutSpec{Type: s.In, Rows: s.K, Cols: s.M, LD: s.K},
		layoutSpec{Type: s.Out, Rows: s.N, Cols: s.M, LD: s.N}
}

func (s GemmShape) validate() error {
	if s.M <= 0 || s.N <= 0 || s.K <= 0 {
		return fmt.Errorf("GEMM shape %dx%dx%d has a non-positive size", s.M, s.N, s.K)
	}
	if s.In != BF16 {
		return fmt.Errorf("GEMM inputs must be bf16, got %v", s.In)
	}
	if s.Out != BF16 && s.Out != F32 {
		return fmt.Errorf("GEMM output must be bf16 or f32, got %v", s.Out)
	}
	return nil
}

// BLASError is a failed cuBLASLt call.
type BLASError struct {
	Call   string
	Status int
	Name   string
	Desc   string
}

func (e *BLASError) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Call, e.Name, e.Desc)
	}
	return fmt.Sprintf("%s: %s", e.Call, e.Name)
}

// blasStatusName names cublasStatus_t values for releases without
// cublasLtGetStatusName.
func blasStatusName(st int) string {
	switch st {
	case 0:
		return "CUBLAS_STATUS_SUCCESS"
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return fmt.Sprintf("cublasStatus %d", st)
}

// BLAS is a cuBLASLt handle on a context with a workspace and a plan cache
// per GemmShape. Like the Context, it is used from the runner's thread
// only, which is why the cache needs no lock.
type BLAS struct {
	c      *Context
	lib    *C.tt_blaslt
	h      C.tt_ltHandle
	ws     DevicePtr
	wsSize int
	plans  map[GemmShape]*C.tt_ltPlan
	// Path is the library file loaded.
	Path string
	// Version is cublasLtGetVersion(), e.g. 130100 for 13.1.0.
	Version int
}

// BLASWorkspace is the device workspace cuBLASLt may use per GEMM (NVIDIA
// recommends 32 MiB on Hopper).
const BLASWorkspace = 32 << 20

func (b *BLAS) check(call string, st C.int) error {
	if st == 0 {
		return nil
	}
	e := &BLASError{Call: call, Status: int(st), Name: blasStatusName(int(st))}
	if s := C.tt_ltStatusName(b.lib, st); s != nil {
		e.Name = C.GoString(s)
	}
	if s := C.tt_ltStatusString(b.lib, st); s != nil {
		e.Desc = C.GoString(s)
	}
	return e
}

// blasLib is a dlopened cuBLASLt with its symbols resolved but no handle
// yet. Opening it makes no CUDA call, so it can happen on any goroutine
// while the driver initialises: the dlopen and relocation of a library of
// several hundred MB is a visible share of a cold start.
type blasLib struct {
	lib  *C.tt_blaslt
	path string
}

// openBLASLib finds cuBLASLt (LibDirEnv, then the usual places) and
// dlopens it.
func openBLASLib() (blasLib, error) {
	lib := FindLibrary("cuBLASLt", BLASSonames())
	if !lib.Found {
		return blasLib{}, fmt.Errorf("%w (tried %s): %s; install the CUDA toolkit's cuBLAS or pip install nvidia-cublas, or set %s to its folder",
			ErrNoBLAS, strings.Join(lib.Tried, ", "), lib.Error, LibDirEnv)
	}
	return openBLASPath(lib.Path)
}

func openBLASPath(path string) (blasLib, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var errb [512]C.char
	lib := C.tt_blaslt_open(cp, &errb[0], C.size_t(len(errb)))
	if lib == nil {
		return blasLib{}, fmt.Errorf("%w: %s (set %s to the folder holding libcublasLt.so.*)", ErrNoBLAS, C.GoString(&errb[0]), LibDirEnv)
	}
	return blasLib{lib: lib, path: path}, nil
}

// close releases a library no BLAS adopted.
func (l blasLib) close() {
	if l.lib != nil {
		C.tt_blaslt_close(l.lib)
	}
}

// NewBLAS loads cuBLASLt (LibDirEnv, then the usual places), creates a handle
// and allocates its workspace on the context's device. Call it on the
// context's thread.
func (c *Context) NewBLAS() (*BLAS, error) {
	l, err := openBLASLib()
	if err != nil {
		return nil, err
	}
	return c.newBLASFrom(l)
}

// OpenBLAS is NewBLAS with the library file given.
func (c *Context) OpenBLAS(path string) (*BLAS, error) {
	l, err := openBLASPath(path)
	if err != nil {
		return nil, err
	}
	return c.newBLASFrom(l)
}

// newBLASFrom creates the handle and workspace over an opened library,
// which it owns from then on (closed on failure too).
func (c *Context) newBLASFrom(l blasLib) (*BLAS, error) {
	lib := l.lib
	b := &BLAS{c: c, lib: lib, Path: l.path, plans: map[GemmShape]*C.tt_ltPlan{}}
	b.Version = int(C.tt_ltGetVersion(lib))
	if err := b.check("cublasLtCreate", C.tt_ltCreate(lib, &b.h)); err != nil {
		C.tt_blaslt_close(lib)
		return nil, err
	}
	ws, err := c.Alloc(BLASWorkspace)
	if err != nil {
		C.tt_ltDestroy(lib, b.h)
		C.tt_blaslt_close(lib)
		return nil, fmt.Errorf("cuBLASLt workspace: %w", err)
	}
	b.ws, b.wsSize = ws, BLASWorkspace
	return b, nil
}

// Plans is the number of cached GEMM plans.
func (b *BLAS) Plans() int { return len(b.plans) }

func (b *BLAS) plan(s GemmShape) (*C.tt_ltPlan, error) {
	if p, ok := b.plans[s]; ok {
		return p, nil
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	ta, tb, a, bb, cc := gemmLayouts(s)
	spec := func(l layoutSpec) (C.tt_ltLayoutSpec, error) {
		t, err := l.Type.cuda()
		return C.tt_ltLayoutSpec{_type: C.int(t), rows: C.ulonglong(l.Rows), cols: C.ulonglong(l.Cols), ld: C.longlong(l.LD)}, err
	}
	sa, err := spec(a)
	if err != nil {
		return nil, err
	}
	sb, _ := spec(bb)
	sc, err := spec(cc)
	if err != nil {
		return nil, err
	}
	p := (*C.tt_ltPlan)(C.calloc(1, C.size_t(unsafe.Sizeof(C.tt_ltPlan{}))))
	if p == nil {
		return nil, errors.New("cuBLASLt plan: out of C memory")
	}
	var failed *C.char
	st := C.tt_lt_plan(b.lib, b.h, p, C.int(ta), C.int(tb), sa, sb, sc, C.size_t(b.wsSize), &failed)
	if st != 0 {
		C.free(unsafe.Pointer(p))
		name := "cuBLASLt plan"
		if failed != nil {
			name = C.GoString(failed)
		}
		return nil, fmt.Errorf("GEMM plan for %dx%dx%d %v→%v: %w", s.M, s.N, s.K, s.In, s.Out, b.check(name, st))
	}
	b.plans[s] = p
	return p, nil
}

// GemmAlgo is one of cuBLASLt's algorithms for a GEMM shape (opaque to
// treni-top) with the workspace it needs: BLAS.Algos lists them, SetAlgo
// makes one the shape's plan.
type GemmAlgo struct {
	algo      C.tt_ltAlgo
	Workspace int
}

// Algos lists up to n of cuBLASLt's algorithms for shape that fit the
// handle's workspace, the heuristic's pick first (the one a new plan
// takes), building the shape's plan if needed.
func (b *BLAS) Algos(shape GemmShape, n int) ([]GemmAlgo, error) {
	p, err := b.plan(shape)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, nil
	}
	res := make([]C.tt_ltHeuristic, n)
	var got C.int
	var failed *C.char
	if st := C.tt_lt_algos(b.lib, b.h, p, C.size_t(b.wsSize), C.int(n), &res[0], &got, &failed); st != 0 {
		return nil, fmt.Errorf("GEMM algorithms for %dx%dx%d: %w", shape.M, shape.N, shape.K, b.check(C.GoString(failed), st))
	}
	out := make([]GemmAlgo, 0, int(got))
	for _, r := range res[:int(got)] {
		out = append(out, GemmAlgo{algo: r.algo, Workspace: int(r.workspaceSize)})
	}
	return out, nil
}

// SetAlgo makes a (one of Algos(shape)) the algorithm Gemm runs for shape.
func (b *BLAS) SetAlgo(shape GemmShape, a GemmAlgo) error {
	p, err := b.plan(shape)
	if err != nil {
		return err
	}
	if a.Workspace > b.wsSize {
		return fmt.Errorf("GEMM algorithm for %dx%dx%d needs %d bytes of workspace, more than the %d there are", shape.M, shape.N, shape.K, a.Workspace, b.wsSize)
	}
	p.algo, p.workspace = a.algo, C.size_t(a.Workspace)
	return nil
}

// Gemm enqueues Y = X·Wᵀ on stream s (nil: the default stream), or Y += X·Wᵀ
// when accumulate is set (beta = 1, which fuses a residual add into an f32
// Y). Plans are built on first use of a shape; the first call per shape
// therefore allocates and should happen before graph capture.
func (b *BLAS) Gemm(s *Stream, shape GemmShape, y, x, w DevicePtr, accumulate bool) error {
	p, err := b.plan(shape)
	if err != nil {
		return err
	}
	var st unsafe.Pointer
	if s != nil {
		st = unsafe.Pointer(s.s)
	}
	beta := C.float(0)
	if accumulate {
		beta = 1
	}
	// A is W, B is X (see gemmLayouts).
	return b.check("cublasLtMatmul", C.tt_lt_matmul(b.lib, b.h, p, 1, beta,
		C.ulonglong(w), C.ulonglong(x), C.ulonglong(y), C.ulonglong(b.ws), C.size_t(b.wsSize), st))
}

// Close destroys the plans, the handle and the workspace.
func (b *BLAS) Close() error {
	if b == nil || b.lib == nil {
		return nil
	}
	var first error
	for k, p := range b.plans {
		if err := b.check("cuBLASLt plan destroy", C.tt_lt_plan_free(b.lib, p)); err != nil && first == nil {
			first = err
		}
		C.free(unsafe.Pointer(p))
		delete(b.plans, k)
	}
	if err := b.check("cublasLtDestroy", C.tt_ltDestroy(b.lib, b.h)); err != nil && first == nil {
		first = err
	}
	if err := b.c.Free(b.ws); err != nil && first == nil {
		first = err
	}
	C.tt_blaslt_close(b.lib)
	b.lib = nil
	return first
}
