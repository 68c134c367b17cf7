package cuda

/*
#include "shim_calls.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// The driver's virtual memory management API (CUDA 10.2 on), which sleep
// mode allocates the weights and the KV pool through: a range of device
// addresses is reserved once, and physical memory is created and mapped
// into it, or unmapped and released, as often as needed. Kernels'
// arguments and captured CUDA graphs hold addresses in the range, so they
// stay valid across a sleep and a wake (vLLM's CuMemAllocator does the
// same for PyTorch's tensors).

// vmmChunk is the physical unit of a region: a wake maps chunk after chunk
// and enqueues each one's copy at once, so creating and mapping the
// memory overlaps the copies instead of preceding them.
const vmmChunk = 512 << 20

// CUDA constants of the API (cuda.h).
const (
	memAllocationTypePinned = 1 // CU_MEM_ALLOCATION_TYPE_PINNED
	memLocationTypeDevice   = 1 // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessProtReadWrite  = 3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	memAllocGranularityMin  = 0 // CU_MEM_ALLOC_GRANULARITY_MINIMUM
)

// HasVMM says whether the driver has the virtual memory management API
// that sleep mode needs.
func (d *Driver) HasVMM() bool {
	c := d.c
	return c.cuMemGetAllocationGranularity != nil && c.cuMemAddressReserve != nil && c.cuMemAddressFree != nil &&
		c.cuMemCreate != nil && c.cuMemRelease != nil && c.cuMemMap != nil && c.cuMemUnmap != nil && c.cuMemSetAccess != nil
}

// vmmRegion is device memory whose address range outlives its physical
// memory: reserved once (reserveVMM), backed by physical memory (back) and
// given back (unback) any number of times at the same addresses. Its
// methods run on a thread where the context is current.
type vmmRegion struct {
	c     *Context
	base  DevicePtr
	size  int // bytes asked for
	span  int // bytes reserved: size rounded up to the granularity
	chunk int // bytes of one physical allocation (a multiple of the granularity)
	// handles are the physical allocations mapped at base, base+chunk, …;
	// empty while the region is unbacked.
	handles []C.tt_CUmemGenericAllocationHandle
}

// allocProp describes pinned device memory on the context's device.
func (c *Context) allocProp() C.tt_CUmemAllocationProp {
	var p C.tt_CUmemAllocationProp
	p._type = memAllocationTypePinned
	p.location._type = memLocationTypeDevice
	p.location.id = C.int(c.Ordinal)
	return p
}

// reserveVMM reserves a range for n bytes and backs it (back), so that it
// is usable at once like a cuMemAlloc allocation.
func (c *Context) reserveVMM(n int) (*vmmRegion, error) {
	if !c.d.HasVMM() {
		return nil, errors.New("cuda: the driver lacks the virtual memory management API (cuMemCreate and friends, CUDA 10.2 on) that sleep mode needs; update the driver or serve without --enable-sleep-mode")
	}
	if n <= 0 {
		return nil, fmt.Errorf("cuda: a device range of %d bytes", n)
	}
	prop := c.allocProp()
	var g C.size_t
	if err := c.d.check("cuMemGetAllocationGranularity", C.tt_cuMemGetAllocationGranularity(c.d.c, &g, &prop, memAllocGranularityMin)); err != nil {
		return nil, err
	}
	gran := max(int(g), 1)
	span := (n + gran - 1) / gran * gran
	r := &vmmRegion{c: c, size: n, span: span, chunk: min(span, (vmmChunk+gran-1)/gran*gran)}
	var p C.tt_CUdeviceptr
	if err := c.d.check("cuMemAddressReserve", C.tt_cuMemAddressReserve(c.d.c, &p, C.size_t(span), 0, 0, 0)); err != nil {
		return nil, fmt.Errorf("reserve %d bytes of device addresses: %w", span, err)
	}
	r.base = DevicePtr(p)
	if err := r.back(nil); err != nil {
		_ = c.d.check("cuMemAddressFree", C.tt_cuMemAddressFree(c.d.c, p, C.size_t(span)))
		return nil, err
	}
	return r, nil
}

// backed says whether physical memory is mapped at the region.
func (r *vmmRegion) backed() bool { return len(r.handles) > 0 }

// back creates the region's physical memory and maps it, chunk by chunk,
// readable and writable by the context's device. each, when set, is called
// once a chunk is mapped with the range of the asked-for bytes it holds
// (offset lo, n bytes), so that a wake can enqueue that chunk's copy while
// the next chunk is created. On error nothing stays mapped.
func (r *vmmRegion) back(each func(lo, n int) error) error {
	if r.backed() {
		return errors.New("cuda: the device range is already backed")
	}
	d := r.c.d
	prop := r.c.allocProp()
	var access C.tt_CUmemAccessDesc
	access.location._type = memLocationTypeDevice
	access.location.id = C.int(r.c.Ordinal)
	access.flags = memAccessProtReadWrite
	fail := func(err error) error {
		return errors.Join(err, r.unback())
	}
	for lo := 0; lo < r.span; lo += r.chunk {
		n := min(r.chunk, r.span-lo)
		var h C.tt_CUmemGenericAllocationHandle
		if err := d.check("cuMemCreate", C.tt_cuMemCreate(d.c, &h, C.size_t(n), &prop, 0)); err != nil {
			return fail(fmt.Errorf("allocate %d bytes of device memory: %w", n, err))
		}
		at := C.tt_CUdeviceptr(r.base + DevicePtr(lo))
		if err := d.check("cuMemMap", C.tt_cuMemMap(d.c, at, C.size_t(n), 0, h, 0)); err != nil {
			return fail(errors.Join(err, d.check("cuMemRelease", C.tt_cuMemRelease(d.c, h))))
		}
		r.handles = append(r.handles, h)
		if err := d.check("cuMemSetAccess", C.tt_cuMemSetAccess(d.c, at, C.size_t(n), &access, 1)); err != nil {
			return fail(err)
		}
		if m := min(n, r.size-lo); each != nil && m > 0 {
			if err := each(lo, m); err != nil {
				return fail(err)
			}
		}
	}
	return nil
}

// unback unmaps the region's physical memory and gives it back to the
// driver; the addresses stay reserved. The caller has waited for every
// piece of work that touches the region.
func (r *vmmRegion) unback() error {
	d := r.c.d
	var errs []error
	for i, h := range r.handles {
		lo := i * r.chunk
		n := min(r.chunk, r.span-lo)
		errs = append(errs, d.check("cuMemUnmap", C.tt_cuMemUnmap(d.c, C.tt_CUdeviceptr(r.base+DevicePtr(lo)), C.size_t(n))))
		errs = append(errs, d.check("cuMemRelease", C.tt_cuMemRelease(d.c, h)))
	}
	r.handles = nil
	return errors.Join(errs...)
}

// free unbacks the region and releases its addresses.
func (r *vmmRegion) free() error {
	if r == nil {
		return nil
	}
	err := r.unback()
	return errors.Join(err, r.c.d.check("cuMemAddressFree", C.tt_cuMemAddressFree(r.c.d.c, C.tt_CUdeviceptr(r.base), C.size_t(r.span))))
}
