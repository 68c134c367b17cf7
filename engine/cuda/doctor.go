package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"
)

// LibDirEnv names a variable with extra directories (colon-separated) to
// search for cuBLASLt and NVRTC.
const LibDirEnv = "TRENI_CUDA_LIB_DIR"

// Library is a CUDA library looked for at run time.
type Library struct {
	Name  string   `json:"name"`  // e.g. cublasLt
	Found bool     `json:"found"` // loaded successfully
	Path  string   `json:"path,omitempty"`
	Tried []string `json:"tried,omitempty"`
	Error string   `json:"error,omitempty"`
	Fix   string   `json:"fix,omitempty"`
}

// KernelsInfo describes the CUDA kernels this binary carries.
type KernelsInfo struct {
	Found bool   `json:"found"`
	Bytes int    `json:"bytes,omitempty"`
	NVCC  string `json:"nvcc,omitempty"`
	// Source is "embedded" or the file named by FatbinEnv.
	Source string `json:"source,omitempty"`
	Error  string `json:"error,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

func kernelsInfo() KernelsInfo {
	var k KernelsInfo
	img, err := KernelImage()
	if err != nil {
		k.Error = err.Error()
		k.Fix = "run make kernels on a machine with nvcc, or set " + FatbinEnv + " to a kernels.fatbin"
		return k
	}
	k.Found, k.Bytes, k.Source = true, len(img), "embedded"
	if p := os.Getenv(FatbinEnv); p != "" {
		k.Source = p
	} else if m, err := EmbeddedManifest(); err == nil {
		k.NVCC = m.NVCC
	}
	return k
}

// DoctorReport is what `treni-top doctor` prints.
type DoctorReport struct {
	Driver        Library      `json:"driver"`
	DriverVersion string       `json:"driver_cuda_version,omitempty"`
	InitError     string       `json:"init_error,omitempty"`
	GPUs          []DeviceInfo `json:"gpus,omitempty"`
	Libraries     []Library    `json:"libraries"`
	// Kernels describes the fatbin compiled into this binary.
	Kernels KernelsInfo `json:"kernels"`
	// Usable says whether the CUDA backend can run here.
	Usable bool `json:"usable"`
}

// LibrarySearchDirs lists where cuBLASLt and NVRTC are looked for: the
// override variable, LD_LIBRARY_PATH, the CUDA toolkit's usual folders,
// the distribution's (this architecture's), and the pip wheels of nvidia-*
// packages (where PyTorch installs get them).
func LibrarySearchDirs() []string { return librarySearchDirs(hostLibArch()) }

func librarySearchDirs(a libArch) []string {
	var dirs []string
	add := func(ds ...string) {
		for _, d := range ds {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	add(filepath.SplitList(os.Getenv(LibDirEnv))...)
	add(filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	if h := os.Getenv("CUDA_HOME"); h != "" {
		add(filepath.Join(h, "lib64"))
		for _, t := range a.targets {
			add(filepath.Join(h, "targets", t, "lib"))
		}
	}
	add("/usr/local/cuda/lib64")
	for _, t := range a.targets {
		add("/usr/local/cuda/targets/" + t + "/lib")
	}
	if a.multiarch != "" {
		add("/usr/lib/" + a.multiarch)
	}
	add("/usr/lib64")
	var globs []string
	for _, t := range a.targets {
		globs = append(globs, "/usr/local/cuda-*/targets/"+t+"/lib")
	}
	for _, pat := range append(globs,
		"/usr/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
		"/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib",
		"/opt/conda/lib",
	) {
		m, _ := filepath.Glob(pat)
		sort.Sort(sort.Reverse(sort.StringSlice(m))) // newest version first
		add(m...)
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// FindLibrary looks for the first loadable file among sonames (e.g.
// libcublasLt.so.13, libcublasLt.so.12) in the loader's path and in
// LibrarySearchDirs.
func FindLibrary(name string, sonames []string) Library {
	lib := Library{Name: name}
	var cands []string
	for _, so := range sonames {
		for _, d := range LibrarySearchDirs() {
			p := filepath.Join(d, so)
			if _, err := os.Stat(p); err == nil {
				cands = append(cands, p)
			}
		}
		cands = append(cands, so) // the loader's own search path
	}
	for _, c := range cands {
		lib.Tried = append(lib.Tried, c)
		path, err := probeLoad(c)
		if err == nil {
			lib.Found, lib.Path, lib.Error = true, path, ""
			return lib
		}
		lib.Error = err.Error()
	}
	return lib
}

func probeLoad(path string) (string, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var out, errb [4096]C.char
	if C.tt_dlopen_probe(cp, &out[0], C.size_t(len(out)), &errb[0], C.size_t(len(errb))) != 0 {
		if e := C.GoString(&errb[0]); e != "" {
			return "", fmt.Errorf("%s", e)
		}
	}
	p := C.GoString(&out[0])
	if p == "" {
		p = path
	}
	return p, nil
}

// Checkup is `treni-top doctor`'s result: the report, and the physical
// floors when they were asked for and could be measured.
type Checkup struct {
	DoctorReport
	Floors *Floors `json:"floors,omitempty"`
}

// RunCheckup measures the floors on GPU 0 with copies of floorBytes when
// floors is set, then inspects the machine (Doctor). Floors first: cuInit
// is only measurable as the process's first CUDA call, and Doctor
// initialises the driver. Its error is a measurement that failed on a usable GPU; a
// machine without one leaves Floors nil, for the caller to say.
func RunCheckup(ctx context.Context, floors bool, floorBytes int) (Checkup, error) {
	var c Checkup
	var floorErr error
	if floors {
		f, err := MeasureFloors(ctx, floorBytes)
		if err == nil {
			c.Floors = &f
		}
		floorErr = err
	}
	c.DoctorReport = Doctor()
	if floors && c.Usable && floorErr != nil {
		return c, fmt.Errorf("measure floors: %w", floorErr)
	}
	return c, nil
}

// Text is the report, then the floors when measured.
func (c Checkup) Text() string {
	s := c.DoctorReport.Text()
	if c.Floors != nil {
		s += "\n" + c.Floors.Text()
	}
	return s
}

// Doctor inspects the machine: the driver, its GPUs, and the libraries the
// CUDA backend needs, with the fix for whatever is missing.
func Doctor() DoctorReport {
	var r DoctorReport
	r.Driver = Library{Name: "CUDA driver (libcuda.so.1)", Tried: DriverCandidates()}
	d, err := LoadDriver()
	if err != nil {
		r.Driver.Error = err.Error()
		r.Driver.Fix = "install the NVIDIA driver (it ships libcuda.so.1), or point " + DriverEnv + " at libcuda.so.1; without it treni-top uses the CPU backend"
	} else {
		defer d.Close()
		r.Driver.Found, r.Driver.Path = true, d.Path
		if v, err := d.Version(); err == nil {
			r.DriverVersion = VersionString(v)
		}
		if err := d.Init(); err != nil {
			r.InitError = err.Error()
		} else if n, err := d.DeviceCount(); err != nil {
			r.InitError = err.Error()
		} else {
			for i := 0; i < n; i++ {
				if info, err := d.Device(i); err == nil {
					r.GPUs = append(r.GPUs, info)
				}
			}
		}
	}
	cublas := FindLibrary("cuBLASLt", []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"})
	if !cublas.Found {
		cublas.Fix = "install the CUDA toolkit's cuBLAS (or pip install nvidia-cublas) and/or set " + LibDirEnv + " to the folder holding libcublasLt.so.*"
	}
	r.Libraries = append(r.Libraries, cublas)
	r.Kernels = kernelsInfo()
	r.Usable = r.Driver.Found && r.InitError == "" && len(r.GPUs) > 0 && cublas.Found && r.Kernels.Found
	return r
}

// Text renders the report for people.
func (r DoctorReport) Text() string {
	var b strings.Builder
	mark := func(ok bool) string {
		if ok {
			return "ok "
		}
		return "MISSING"
	}
	fmt.Fprintf(&b, "%-8s %s", mark(r.Driver.Found), r.Driver.Name)
	if r.Driver.Found {
		fmt.Fprintf(&b, ": %s (CUDA %s)\n", r.Driver.Path, r.DriverVersion)
	} else {
		fmt.Fprintf(&b, "\n         %s\n         fix: %s\n", r.Driver.Error, r.Driver.Fix)
	}
	if r.InitError != "" {
		fmt.Fprintf(&b, "%-8s cuInit: %s\n", "FAILED", r.InitError)
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(&b, "%-8s GPU %d: %s, %.1f GiB, compute %d.%d, %d SMs\n", "ok", g.Ordinal, g.Name, float64(g.TotalMem)/(1<<30), g.CCMajor, g.CCMinor, g.SMs)
	}
	if r.Driver.Found && r.InitError == "" && len(r.GPUs) == 0 {
		fmt.Fprintf(&b, "%-8s no CUDA device visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)\n", "MISSING")
	}
	for _, l := range r.Libraries {
		fmt.Fprintf(&b, "%-8s %s", mark(l.Found), l.Name)
		if l.Found {
			fmt.Fprintf(&b, ": %s\n", l.Path)
		} else {
			fmt.Fprintf(&b, " (tried %d places)\n         fix: %s\n", len(l.Tried), l.Fix)
		}
	}
	if r.Kernels.Found {
		fmt.Fprintf(&b, "%-8s kernels: %d bytes (%s", "ok", r.Kernels.Bytes, r.Kernels.Source)
		if r.Kernels.NVCC != "" {
			fmt.Fprintf(&b, ", %s", r.Kernels.NVCC)
		}
		b.WriteString(")\n")
	} else {
		fmt.Fprintf(&b, "%-8s kernels: %s\n         fix: %s\n", "MISSING", r.Kernels.Error, r.Kernels.Fix)
	}
	if r.Usable {
		b.WriteString("\nThe CUDA backend can run here.\n")
	} else {
		b.WriteString("\nThe CUDA backend cannot run here; `treni-top serve --device auto` uses the CPU backend.\n")
	}
	return b.String()
}
