// Package cuda is the built-in engine's access to NVIDIA GPUs: the CUDA
// driver API loaded at run time by dlopen (a small cgo shim with
// hand-declared prototypes, as go-nvml does for NVML), so that treni-top
// builds with plain `go build` and runs on machines without CUDA. cuBLASLt
// is loaded the same way (its cublasLtMatmul takes 16 arguments, more than
// purego passes on amd64, hence cgo). Every call is checked and its error
// named with cuGetErrorName.
//
// A CUDA context is current per OS thread: all calls on a context belong on
// one goroutine locked to its thread (see Runner).
//
// On top of that sit the kernels of kernels/kernels.cu, compiled by nvcc
// into an embedded fatbin (LoadKernels, ops.go), cuBLASLt GEMMs with a
// plan cache per shape (NewBLAS, blas.go), and Backend, the CUDA
// sched.Backend (NewBackend, backend.go): device weights, a paged bf16 KV
// pool and lazily captured decode graphs per batch-size bucket.
package cuda

// shim_calls.h holds a static inline caller per entry of shim.h's function
// table (cgo cannot call C function pointers); regenerate it after editing
// the table.
//go:generate python3 gen_calls.py

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim_calls.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// ErrNoDriver is wrapped by LoadDriver's error when no libcuda could be
// loaded: the normal state on machines without an NVIDIA driver.
var ErrNoDriver = errors.New("no NVIDIA CUDA driver (libcuda.so.1) found")

// DriverEnv names a variable that overrides where libcuda is loaded from.
const DriverEnv = "TRENI_CUDA_DRIVER"

// DriverCandidates lists where libcuda.so.1 is looked for, in order: the
// override variable, the loader's search path, then the usual install
// locations of this architecture (distribution packages, the NVIDIA
// container runtime, WSL).
func DriverCandidates() []string { return driverCandidates(hostLibArch()) }

func driverCandidates(a libArch) []string {
	var c []string
	if p := os.Getenv(DriverEnv); p != "" {
		c = append(c, p)
	}
	c = append(c, "libcuda.so.1")
	if a.multiarch != "" {
		c = append(c, "/usr/lib/"+a.multiarch+"/libcuda.so.1")
	}
	return append(c,
		"/usr/lib64/libcuda.so.1",
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/wsl/lib/libcuda.so.1",
	)
}

// Driver is a loaded CUDA driver library.
type Driver struct {
	c *C.tt_cuda
	// Path is the file the loader resolved.
	Path string
}

// HasPDL says whether the driver has cuLaunchKernelEx, through which
// programmatic dependent launch goes (CUDA 12.0 on).
func (d *Driver) HasPDL() bool { return d.c.cuLaunchKernelEx != nil }

// LoadDriver dlopens the first candidate that loads and resolves every
// symbol treni-top needs.
func LoadDriver(candidates ...string) (*Driver, error) {
	if len(candidates) == 0 {
		candidates = DriverCandidates()
	}
	var errs []string
	for _, p := range candidates {
		cp := C.CString(p)
		var buf [512]C.char
		c := C.tt_cuda_open(cp, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cp))
		if c == nil {
			errs = append(errs, C.GoString(&buf[0]))
			continue
		}
		d := &Driver{c: c, Path: p}
		var out [4096]C.char
		if C.tt_lib_path(c.lib, &out[0], C.size_t(len(out))) == 0 {
			if s := C.GoString(&out[0]); s != "" {
				d.Path = s
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("%w (tried %s; install the NVIDIA driver or set %s to libcuda.so.1): %s",
		ErrNoDriver, strings.Join(candidates, ", "), DriverEnv, lastOr(errs, "not found"))
}

func lastOr(xs []string, def string) string {
	if len(xs) == 0 {
		return def
	}
	return xs[len(xs)-1]
}

// Close frees the function table (the library itself stays loaded: the
// driver keeps threads that outlive dlclose).
func (d *Driver) Close() {
	if d != nil && d.c != nil {
		C.tt_cuda_close(d.c)
		d.c = nil
	}
}

// Error is a failed driver call.
type Error struct {
	Call string // the driver function, e.g. cuMemAlloc
	Code int    // CUresult
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
	Desc string // the driver's description
}

func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Call, e.Name, e.Desc)
	}
	return fmt.Sprintf("%s: %s", e.Call, e.Name)
}

// check turns a CUresult into an error named by the driver.
func (d *Driver) check(call string, r C.tt_CUresult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: fmt.Sprintf("CUresult %d", int(r))}
	var s *C.char
	if C.tt_cuGetErrorName(d.c, r, &s) == 0 && s != nil {
		e.Name = C.GoString(s)
	}
	if C.tt_cuGetErrorString(d.c, r, &s) == 0 && s != nil {
		e.Desc = C.GoString(s)
	}
	return e
}

// Init calls cuInit(0).
func (d *Driver) Init() error { return d.check("cuInit", C.tt_cuInit(d.c, 0)) }

// Version is the driver's CUDA version as major*1000 + minor*10.
func (d *Driver) Version() (int, error) {
	var v C.int
	err := d.check("cuDriverGetVersion", C.tt_cuDriverGetVersion(d.c, &v))
	return int(v), err
}

// VersionString renders a driver version like 13000 as "13.0".
func VersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10) }

// DeviceCount is the number of CUDA devices (after Init).
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	err := d.check("cuDeviceGetCount", C.tt_cuDeviceGetCount(d.c, &n))
	return int(n), err
}

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal      int    `json:"ordinal"`
	Name         string `json:"name"`
	TotalMem     uint64 `json:"total_mem_bytes"`
	CCMajor      int    `json:"cc_major"`
	CCMinor      int    `json:"cc_minor"`
	SMs          int    `json:"sms"`
	PCIBusID     int    `json:"pci_bus_id"`
	UnifiedAddrs bool   `json:"unified_addressing"`
}

// Device attribute numbers from cuda.h (CUdevice_attribute).
const (
	attrMultiprocessorCount = 16
	attrPCIBusID            = 33
	attrUnifiedAddressing   = 41
	attrCCMajor             = 75
	attrCCMinor             = 76
)

// Device queries device ordinal i.
func (d *Driver) Device(i int) (DeviceInfo, error) {
	var dev C.tt_CUdevice
	if err := d.check("cuDeviceGet", C.tt_cuDeviceGet(d.c, &dev, C.int(i))); err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{Ordinal: i}
	var name [256]C.char
	if err := d.check("cuDeviceGetName", C.tt_cuDeviceGetName(d.c, &name[0], C.int(len(name)), dev)); err != nil {
		return info, err
	}
	info.Name = C.GoString(&name[0])
	var mem C.size_t
	if err := d.check("cuDeviceTotalMem", C.tt_cuDeviceTotalMem(d.c, &mem, dev)); err != nil {
		return info, err
	}
	info.TotalMem = uint64(mem)
	attr := func(a int) (int, error) {
		var v C.int
		err := d.check("cuDeviceGetAttribute", C.tt_cuDeviceGetAttribute(d.c, &v, C.int(a), dev))
		return int(v), err
	}
	var err error
	if info.SMs, err = attr(attrMultiprocessorCount); err != nil {
		return info, err
	}
	if info.CCMajor, err = attr(attrCCMajor); err != nil {
		return info, err
	}
	if info.CCMinor, err = attr(attrCCMinor); err != nil {
		return info, err
	}
	info.PCIBusID, _ = attr(attrPCIBusID)
	u, _ := attr(attrUnifiedAddressing)
	info.UnifiedAddrs = u != 0
	return info, nil
}
