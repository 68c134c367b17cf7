package cuda

/*
#include <stdlib.h>
#include <string.h>
#include "shim_calls.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Module is a loaded fatbin or PTX image.
type Module struct {
	c *Context
	m C.tt_CUmodule
}

// LoadModule loads a fatbin/cubin/PTX image. The image is copied to C
// memory for the call, so the Go slice may be reused afterwards.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("load CUDA module: empty image")
	}
	p := C.CBytes(image)
	defer C.free(p)
	m := &Module{c: c}
	if err := c.d.check("cuModuleLoadData", C.tt_cuModuleLoadData(c.d.c, &m.m, p)); err != nil {
		return nil, fmt.Errorf("load CUDA module (%d bytes): %w", len(image), err)
	}
	return m, nil
}

// Unload releases the module.
func (m *Module) Unload() error {
	return m.c.d.check("cuModuleUnload", C.tt_cuModuleUnload(m.c.d.c, m.m))
}

// Function is a kernel in a module.
type Function struct {
	c    *Context
	f    C.tt_CUfunction
	Name string
}

// Function looks a kernel up by its (extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	f := &Function{c: m.c, Name: name}
	if err := m.c.d.check("cuModuleGetFunction", C.tt_cuModuleGetFunction(m.c.d.c, &f.f, m.m, cn)); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// ResidentBlocks is how many blocks of threads threads (and dynSmem bytes
// of dynamic shared memory) of this kernel one multiprocessor holds at
// once, as the driver works it out from the kernel's registers and shared
// memory.
func (f *Function) ResidentBlocks(threads, dynSmem int) (int, error) {
	var n C.int
	if err := f.c.d.check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
		C.tt_cuOccupancyMaxActiveBlocksPerMultiprocessor(f.c.d.c, &n, f.f, C.int(threads), C.size_t(dynSmem))); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", f.Name, err)
	}
	return int(n), nil
}

// cuFuncAttributeMaxDynamicSharedBytes is
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
const cuFuncAttributeMaxDynamicSharedBytes = 8

// SetMaxDynamicShared lets launches of this kernel take up to n bytes of
// dynamic shared memory: beyond 48 KB a kernel must opt in.
func (f *Function) SetMaxDynamicShared(n int) error {
	if err := f.c.d.check("cuFuncSetAttribute", C.tt_cuFuncSetAttribute(f.c.d.c, f.f, C.int(cuFuncAttributeMaxDynamicSharedBytes), C.int(n))); err != nil {
		return fmt.Errorf("kernel %s: allow %d bytes of dynamic shared memory: %w", f.Name, n, err)
	}
	return nil
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Args packs kernel arguments into C memory in the layout cuLaunchKernel
// expects (an array of pointers to each argument's value). Reuse one Args
// per launch site to avoid allocations on the hot path.
type Args struct {
	buf  unsafe.Pointer // values, 8-byte slots
	ptrs unsafe.Pointer // void*[n]
	n    int
	cap  int
	err  error // set when more arguments were packed than allocated
}

// NewArgs allocates room for up to n arguments of at most 8 bytes each.
func NewArgs(n int) *Args {
	return &Args{buf: C.calloc(C.size_t(n+1), 8), ptrs: C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(uintptr(0)))), cap: n}
}

// Free releases the argument block.
func (a *Args) Free() {
	C.free(a.buf)
	C.free(a.ptrs)
}

// Reset empties the argument list.
func (a *Args) Reset() *Args { a.n, a.err = 0, nil; return a }

func (a *Args) slot() unsafe.Pointer {
	if a.n >= a.cap {
		// The spare slot absorbs writes past capacity so that packing
		// never corrupts memory; Launch reports the overflow.
		a.err = fmt.Errorf("kernel launch packs more than %d arguments", a.cap)
		return unsafe.Add(a.buf, a.cap*8)
	}
	p := unsafe.Add(a.buf, a.n*8)
	*(*unsafe.Pointer)(unsafe.Add(a.ptrs, a.n*int(unsafe.Sizeof(uintptr(0))))) = p
	a.n++
	return p
}

// Ptr appends a device pointer argument.
func (a *Args) Ptr(p DevicePtr) *Args { *(*uint64)(a.slot()) = uint64(p); return a }

// I32 appends an int argument.
func (a *Args) I32(v int32) *Args { *(*int32)(a.slot()) = v; return a }

// F32 appends a float argument.
func (a *Args) F32(v float32) *Args { *(*float32)(a.slot()) = v; return a }

// U64 appends a 64-bit argument.
func (a *Args) U64(v uint64) *Args { *(*uint64)(a.slot()) = v; return a }

// Launch enqueues the kernel on stream s (nil: default stream).
func (f *Function) Launch(grid, block Dim3, sharedMem uint32, s *Stream, args *Args) error {
	return f.launch(grid, block, sharedMem, s, args, false)
}

// LaunchPDL is Launch with programmatic dependent launch allowed: the
// grid may be scheduled before the previous kernel in s has finished and
// must wait for it itself (KERNEL_ENTRY in kernels/common.cuh does).
// Needs Driver.HasPDL and a device of compute capability 9.0 or later.
func (f *Function) LaunchPDL(grid, block Dim3, sharedMem uint32, s *Stream, args *Args) error {
	if !f.c.d.HasPDL() {
		return fmt.Errorf("%s: programmatic dependent launch needs cuLaunchKernelEx (a CUDA 12.0 or later driver)", f.Name)
	}
	return f.launch(grid, block, sharedMem, s, args, true)
}

func (f *Function) launch(grid, block Dim3, sharedMem uint32, s *Stream, args *Args, pdl bool) error {
	var st C.tt_CUstream
	if s != nil {
		st = s.s
	}
	var params *unsafe.Pointer
	if args != nil && args.err != nil {
		return fmt.Errorf("%s: %w", f.Name, args.err)
	}
	if args != nil && args.n > 0 {
		params = (*unsafe.Pointer)(args.ptrs)
	}
	gx, gy, gz, bx, by, bz := C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z)
	if pdl {
		return f.c.d.check("cuLaunchKernelEx("+f.Name+")", C.tt_launch_pdl(f.c.d.c, f.f, gx, gy, gz, bx, by, bz, C.uint(sharedMem), st, params))
	}
	return f.c.d.check("cuLaunchKernel("+f.Name+")", C.tt_cuLaunchKernel(f.c.d.c, f.f, gx, gy, gz, bx, by, bz, C.uint(sharedMem), st, params, nil))
}

// Graph is an instantiated CUDA graph captured from a stream.
type Graph struct {
	c    *Context
	g    C.tt_CUgraph
	exec C.tt_CUgraphExec
}

// BeginCapture starts capturing the stream's work into a graph (thread-local
// mode: other threads' CUDA calls are not affected).
func (s *Stream) BeginCapture() error {
	const threadLocal = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	return s.c.d.check("cuStreamBeginCapture", C.tt_cuStreamBeginCapture(s.c.d.c, s.s, threadLocal))
}

// EndCapture ends the capture and instantiates the graph.
func (s *Stream) EndCapture() (*Graph, error) {
	g, err := s.EndCaptureGraph()
	if err != nil {
		return nil, err
	}
	if err := g.Instantiate(); err != nil {
		g.Destroy() // the uninstantiated graph alone
		return nil, err
	}
	return g, nil
}

// EndCaptureGraph ends the capture and returns the captured graph without
// instantiating it: Instantiate, which may run on another thread where
// the context is current, makes it launchable.
func (s *Stream) EndCaptureGraph() (*Graph, error) {
	g := &Graph{c: s.c}
	if err := s.c.d.check("cuStreamEndCapture", C.tt_cuStreamEndCapture(s.c.d.c, s.s, &g.g)); err != nil {
		return nil, err
	}
	return g, nil
}

// Instantiate builds the executable form of a graph EndCaptureGraph
// returned; on failure the graph stays uninstantiated (Destroy still
// releases it).
func (g *Graph) Instantiate() error {
	return g.c.d.check("cuGraphInstantiate", C.tt_cuGraphInstantiate(g.c.d.c, &g.exec, g.g, 0))
}

// Launch replays the graph on a stream.
func (g *Graph) Launch(s *Stream) error {
	return g.c.d.check("cuGraphLaunch", C.tt_cuGraphLaunch(g.c.d.c, g.exec, s.s))
}

// Destroy releases the graph (and its executable form, if instantiated).
func (g *Graph) Destroy() error {
	var err error
	if g.exec != nil {
		err = g.c.d.check("cuGraphExecDestroy", C.tt_cuGraphExecDestroy(g.c.d.c, g.exec))
	}
	if e2 := g.c.d.check("cuGraphDestroy", C.tt_cuGraphDestroy(g.c.d.c, g.g)); err == nil {
		err = e2
	}
	return err
}
