package cuda

/*
#include <stdlib.h>
#include "shim_calls.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Context is a device's primary context. Its methods must run on the OS
// thread where SetCurrent was called (see Runner).
type Context struct {
	d       *Driver
	dev     C.tt_CUdevice
	ctx     C.tt_CUcontext
	Ordinal int
}

// RetainPrimary retains device i's primary context and makes it current on
// the calling thread.
func (d *Driver) RetainPrimary(i int) (*Context, error) {
	c := &Context{d: d, Ordinal: i}
	if err := d.check("cuDeviceGet", C.tt_cuDeviceGet(d.c, &c.dev, C.int(i))); err != nil {
		return nil, err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", C.tt_cuDevicePrimaryCtxRetain(d.c, &c.ctx, c.dev)); err != nil {
		return nil, err
	}
	if err := c.SetCurrent(); err != nil {
		C.tt_cuDevicePrimaryCtxRelease(d.c, c.dev)
		return nil, err
	}
	return c, nil
}

// SetCurrent binds the context to the calling OS thread.
func (c *Context) SetCurrent() error {
	return c.d.check("cuCtxSetCurrent", C.tt_cuCtxSetCurrent(c.d.c, c.ctx))
}

// Release releases the primary context.
func (c *Context) Release() error {
	return c.d.check("cuDevicePrimaryCtxRelease", C.tt_cuDevicePrimaryCtxRelease(c.d.c, c.dev))
}

// Synchronize waits for all work in the context.
func (c *Context) Synchronize() error {
	return c.d.check("cuCtxSynchronize", C.tt_cuCtxSynchronize(c.d.c))
}

// MemInfo returns free and total device memory.
func (c *Context) MemInfo() (free, total uint64, err error) {
	var f, t C.size_t
	err = c.d.check("cuMemGetInfo", C.tt_cuMemGetInfo(c.d.c, &f, &t))
	return uint64(f), uint64(t), err
}

// DevicePtr is a device address.
type DevicePtr uint64

// Alloc allocates n bytes of device memory.
func (c *Context) Alloc(n int) (DevicePtr, error) {
	var p C.tt_CUdeviceptr
	if err := c.d.check("cuMemAlloc", C.tt_cuMemAlloc(c.d.c, &p, C.size_t(n))); err != nil {
		return 0, fmt.Errorf("allocate %d bytes of device memory: %w", n, err)
	}
	return DevicePtr(p), nil
}

// Free releases device memory.
func (c *Context) Free(p DevicePtr) error {
	return c.d.check("cuMemFree", C.tt_cuMemFree(c.d.c, C.tt_CUdeviceptr(p)))
}

// HostBuffer is page-locked host memory allocated by the driver (C memory,
// never Go heap, so it may be handed to asynchronous copies).
type HostBuffer struct {
	Ptr unsafe.Pointer
	Len int
}

// Bytes views the buffer as a byte slice.
func (h HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.Ptr), h.Len) }

// HostAlloc allocates n bytes of pinned host memory (cuMemHostAlloc,
// portable).
func (c *Context) HostAlloc(n int) (HostBuffer, error) {
	var p unsafe.Pointer
	const portable = 1 // CU_MEMHOSTALLOC_PORTABLE
	if err := c.d.check("cuMemHostAlloc", C.tt_cuMemHostAlloc(c.d.c, &p, C.size_t(n), portable)); err != nil {
		return HostBuffer{}, fmt.Errorf("allocate %d bytes of pinned host memory: %w", n, err)
	}
	return HostBuffer{Ptr: p, Len: n}, nil
}

// FreeHost releases memory from HostAlloc.
func (c *Context) FreeHost(h HostBuffer) error {
	return c.d.check("cuMemFreeHost", C.tt_cuMemFreeHost(c.d.c, h.Ptr))
}

// HostRegister page-locks an existing host range (for example part of a
// read-only mmap of a weight file) so that copies from it run at pinned
// bandwidth. The range must not be Go heap memory.
func (c *Context) HostRegister(p unsafe.Pointer, n int, readOnly bool) error {
	flags := C.uint(1) // CU_MEMHOSTREGISTER_PORTABLE
	if readOnly {
		flags |= 8 // CU_MEMHOSTREGISTER_READ_ONLY
	}
	return c.d.check("cuMemHostRegister", C.tt_cuMemHostRegister(c.d.c, p, C.size_t(n), flags))
}

// HostUnregister undoes HostRegister.
func (c *Context) HostUnregister(p unsafe.Pointer) error {
	return c.d.check("cuMemHostUnregister", C.tt_cuMemHostUnregister(c.d.c, p))
}

// CopyHtoD copies n bytes from host memory to the device (synchronous).
func (c *Context) CopyHtoD(dst DevicePtr, src unsafe.Pointer, n int) error {
	return c.d.check("cuMemcpyHtoD", C.tt_cuMemcpyHtoD(c.d.c, C.tt_CUdeviceptr(dst), src, C.size_t(n)))
}

// CopyDtoH copies n bytes from the device into host memory.
func (c *Context) CopyDtoH(dst unsafe.Pointer, src DevicePtr, n int) error {
	return c.d.check("cuMemcpyDtoH", C.tt_cuMemcpyDtoH(c.d.c, dst, C.tt_CUdeviceptr(src), C.size_t(n)))
}

// CopyDtoD copies n bytes between device buffers.
func (c *Context) CopyDtoD(dst, src DevicePtr, n int) error {
	return c.d.check("cuMemcpyDtoD", C.tt_cuMemcpyDtoD(c.d.c, C.tt_CUdeviceptr(dst), C.tt_CUdeviceptr(src), C.size_t(n)))
}

// Stream is a CUDA stream.
type Stream struct {
	c *Context
	s C.tt_CUstream
}

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (*Stream, error) {
	s := &Stream{c: c}
	const nonBlocking = 1 // CU_STREAM_NON_BLOCKING
	if err := c.d.check("cuStreamCreate", C.tt_cuStreamCreate(c.d.c, &s.s, nonBlocking)); err != nil {
		return nil, err
	}
	return s, nil
}

// Destroy releases the stream.
func (s *Stream) Destroy() error {
	return s.c.d.check("cuStreamDestroy", C.tt_cuStreamDestroy(s.c.d.c, s.s))
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return s.c.d.check("cuStreamSynchronize", C.tt_cuStreamSynchronize(s.c.d.c, s.s))
}

// CopyHtoDAsync enqueues a host→device copy; src must be pinned or
// registered for the copy to be asynchronous.
func (s *Stream) CopyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int) error {
	return s.c.d.check("cuMemcpyHtoDAsync", C.tt_cuMemcpyHtoDAsync(s.c.d.c, C.tt_CUdeviceptr(dst), src, C.size_t(n), s.s))
}

// CopyDtoHAsync enqueues a device→host copy; dst must be pinned for the
// copy to be asynchronous, and must not be read before the stream syncs.
func (s *Stream) CopyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int) error {
	return s.c.d.check("cuMemcpyDtoHAsync", C.tt_cuMemcpyDtoHAsync(s.c.d.c, dst, C.tt_CUdeviceptr(src), C.size_t(n), s.s))
}

// CopyDtoDAsync enqueues a device→device copy.
func (s *Stream) CopyDtoDAsync(dst, src DevicePtr, n int) error {
	return s.c.d.check("cuMemcpyDtoDAsync", C.tt_cuMemcpyDtoDAsync(s.c.d.c, C.tt_CUdeviceptr(dst), C.tt_CUdeviceptr(src), C.size_t(n), s.s))
}

// Memset8Async fills n bytes with v.
func (s *Stream) Memset8Async(dst DevicePtr, v byte, n int) error {
	return s.c.d.check("cuMemsetD8Async", C.tt_cuMemsetD8Async(s.c.d.c, C.tt_CUdeviceptr(dst), C.uchar(v), C.size_t(n), s.s))
}

// WaitEvent makes the stream wait for an event recorded elsewhere.
func (s *Stream) WaitEvent(e *Event) error {
	return s.c.d.check("cuStreamWaitEvent", C.tt_cuStreamWaitEvent(s.c.d.c, s.s, e.e, 0))
}

// Event is a CUDA event used for timing and ordering.
type Event struct {
	c *Context
	e C.tt_CUevent
}

// NewEvent creates a timing event.
func (c *Context) NewEvent() (*Event, error) {
	e := &Event{c: c}
	if err := c.d.check("cuEventCreate", C.tt_cuEventCreate(c.d.c, &e.e, 0)); err != nil {
		return nil, err
	}
	return e, nil
}

// Record records the event on a stream (nil: the default stream).
func (e *Event) Record(s *Stream) error {
	var st C.tt_CUstream
	if s != nil {
		st = s.s
	}
	return e.c.d.check("cuEventRecord", C.tt_cuEventRecord(e.c.d.c, e.e, st))
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error {
	return e.c.d.check("cuEventSynchronize", C.tt_cuEventSynchronize(e.c.d.c, e.e))
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	return e.c.d.check("cuEventDestroy", C.tt_cuEventDestroy(e.c.d.c, e.e))
}

// ElapsedMS is the time between two recorded events in milliseconds.
func ElapsedMS(start, end *Event) (float32, error) {
	var ms C.float
	err := start.c.d.check("cuEventElapsedTime", C.tt_cuEventElapsedTime(start.c.d.c, &ms, start.e, end.e))
	return float32(ms), err
}

// contextThread runs f on an OS thread of its own with the context
// current, beside the backend's runner thread: the staged upload enqueues
// the weight copies there while the runner loads kernels and warms up,
// and the aside warm-up runs cuBLASLt's first GEMMs there while the runner
// serves steps. The driver API is thread-safe; what must hold is that the
// context is current on the calling thread, which SetCurrent makes so.
// what names the thread in a SetCurrent error. The returned channel
// yields f's error once.
func contextThread(c *Context, what string, f func() error) <-chan error {
	res := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, with the context current on it,
		// ends with the goroutine instead of returning to Go's pool.
		runtime.LockOSThread()
		if err := c.SetCurrent(); err != nil {
			res <- fmt.Errorf("%s: %w", what, err)
			return
		}
		res <- f()
	}()
	return res
}
