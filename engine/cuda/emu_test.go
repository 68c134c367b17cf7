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
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	path, err := exec.LookPath(cxx)
	if err != nil {
		t.Skipf("no C++ compiler (%s): the kernels' CPU emulation needs one (install g++ or set CXX)", cxx)
	}
	bin := filepath.Join(t.TempDir(), "attn_test")
	build := exec.Command(path, "-std=c++20", "-O2", "-fno-strict-aliasing", "-o", bin, "kernels/emu/attn_test.cc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the emulated attention test with %s: %v\n%s", cxx, err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("emulated attention kernels:\n%s", out)
	if err != nil {
		t.Fatalf("emulated attention kernels against the float64 reference: %v", err)
	}
}
