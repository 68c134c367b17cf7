package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAttentionKernelsOnCPUEmulator builds kernels/emu/attn_test.cc — the
// attention kernels of kernels.cu on a CPU emulator of CUDA threads,
// shuffles and mma.sync, against a float64 reference — with the host C++
// compiler and runs it, so the kernels' indexing, masking, tiling and
// split/combine logic are checked on every machine, GPU or not (the GPU
// tests check the same kernels on the device). It needs a C++20 compiler
// (g++ by default, CXX overrides) and skips without one.
func TestAttentionKernelsOnCPUEmulator(t *testing.T) {
	runEmulated(t, "attn_test", "attention kernels")
}

// TestGemmKernelOnCPUEmulator is the same for gemm_skinny
// (kernels/emu/gemm_test.cc): every token-tile width, partly filled tiles,
// both K loops, the three output modes, and no read or write outside the
// M rows.
func TestGemmKernelOnCPUEmulator(t *testing.T) {
	runEmulated(t, "gemm_test", "skinny GEMM kernel")
}

// TestSampleKernelsOnCPUEmulator is the same for the token choice
// (kernels/emu/sample_test.cc): sample_part then sample_pick against a
// float64 reference of the greedy and temperature rules, top-k and top-p
// rows inside their sets, the counters, and rows of −inf.
func TestSampleKernelsOnCPUEmulator(t *testing.T) {
	runEmulated(t, "sample_test", "sampling kernels")
}

// runEmulated builds kernels/emu/<name>.cc with the host C++ compiler and
// runs it; its exit status is the verdict.
func runEmulated(t *testing.T, name, what string) {
	t.Helper()
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	path, err := exec.LookPath(cxx)
	if err != nil {
		t.Skipf("no C++ compiler (%s): the kernels' CPU emulation needs one (install g++ or set CXX)", cxx)
	}
	// go test caches a passing result keyed on the files the test itself
	// opens; the compiler's reads are not among them, so open the sources
	// here: an edited kernel then runs the emulation again.
	for _, pattern := range []string{"kernels/*.cu", "kernels/*.cuh", "kernels/emu/*"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			if _, err := os.ReadFile(f); err != nil {
				t.Fatalf("read kernel source: %v", err)
			}
		}
	}
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command(path, "-std=c++20", "-O2", "-fno-strict-aliasing", "-o", bin, "kernels/emu/"+name+".cc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the emulated %s with %s: %v\n%s", what, cxx, err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("emulated %s:\n%s", what, out)
	if err != nil {
		t.Fatalf("emulated %s against the float64 reference: %v", what, err)
	}
}
