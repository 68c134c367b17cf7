package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
)

const manifestFix = "run make kernels on a machine with nvcc (or scripts/gpu-cuda-check.sh on the GPU machine) and commit kernels.fatbin and manifest.json"

// TestKernelManifestMatchesSources keeps the committed fatbin honest: every
// .cu/.cuh source must hash to what manifest.json recorded when the fatbin
// was built, and the embedded fatbin must be the one the manifest names.
func TestKernelManifestMatchesSources(t *testing.T) {
	m, err := EmbeddedManifest()
	if err != nil {
		t.Fatal(err)
	}
	var srcs []string
	for _, pat := range []string{"kernels/*.cu", "kernels/*.cuh"} {
		ms, _ := filepath.Glob(pat)
		srcs = append(srcs, ms...)
	}
	sort.Strings(srcs)
	if len(srcs) == 0 {
		t.Fatal("no kernel sources under engine/cuda/kernels")
	}
	seen := map[string]bool{}
	for _, p := range srcs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		name := filepath.Base(p)
		seen[name] = true
		if want, ok := m.Sources[name]; !ok {
			t.Errorf("%s is not in kernels/manifest.json: %s", name, manifestFix)
		} else if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s has sha256 %s, manifest says %s: the fatbin is stale; %s", name, got, want, manifestFix)
		}
	}
	for name := range m.Sources {
		if !seen[name] {
			t.Errorf("manifest lists %s, which no longer exists: %s", name, manifestFix)
		}
	}
	if !strings.Contains(m.NVCC, "release") {
		t.Errorf("manifest's nvcc line %q does not look like nvcc --version output: %s", m.NVCC, manifestFix)
	}
	if _, err := KernelImage(); err != nil && os.Getenv(FatbinEnv) == "" {
		t.Errorf("embedded fatbin: %v", err)
	}
}

// TestKernelNamesExist checks that every kernel the Go side binds is an
// extern "C" __global__ of kernels.cu, so a rename fails here, not at load.
func TestKernelNamesExist(t *testing.T) {
	src, err := os.ReadFile("kernels/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range KernelNames() {
		if !regexp.MustCompile(`__global__ void (__launch_bounds__\([^)]*\) )?` + n + `\(`).Match(src) {
			t.Errorf("kernels.cu has no __global__ void %s(", n)
		}
	}
	// The attention kernels picked by head dim are among the bound ones
	// (Kernels.fn has no other).
	for _, hd := range []int{64, 128} {
		w1, mid, w4 := flashKernels(hd)
		names := []string{w1, mid, w4}
		slices.Sort(names)
		if len(slices.Compact(names)) != 3 || !slices.Contains(KernelNames(), w1) || !slices.Contains(KernelNames(), mid) || !slices.Contains(KernelNames(), w4) {
			t.Errorf("head dim %d: attention kernels %q, %q, %q", hd, w1, mid, w4)
		}
	}
}

func TestGemmLayouts(t *testing.T) {
	// Y[7,96] = X[7,64]·W[96,64]ᵀ: A is W as column-major [64,96]
	// transposed, B is X as column-major [64,7], D is Yᵀ [96,7].
	ta, tb, a, b, c := gemmLayouts(GemmShape{M: 7, N: 96, K: 64, In: BF16, Out: F32})
	if ta != 1 || tb != 0 {
		t.Fatalf("trans %d %d", ta, tb)
	}
	if a != (layoutSpec{BF16, 64, 96, 64}) || b != (layoutSpec{BF16, 64, 7, 64}) || c != (layoutSpec{F32, 96, 7, 96}) {
		t.Fatalf("layouts %+v %+v %+v", a, b, c)
	}
	for _, bad := range []GemmShape{{M: 0, N: 1, K: 1, In: BF16, Out: BF16}, {M: 1, N: 1, K: 1, In: F32, Out: F32}, {M: 1, N: 1, K: 1, In: BF16}} {
		if bad.validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	// The plan cache keys on the whole shape: output type matters.
	k1 := GemmShape{M: 1, N: 2, K: 3, In: BF16, Out: BF16}
	k2 := k1
	k2.Out = F32
	if k1 == k2 {
		t.Fatal("plan keys collide")
	}
}

func TestSampleUniformIsStable(t *testing.T) {
	// Pinned values: sample_f32's splitmix64 must produce the stream the
	// host sampler draws (engine/sched/rng.go).
	a, b := sched.SampleUniform(42, 0), sched.SampleUniform(42, 1)
	if a == b || a < 0 || a >= 1 || b < 0 || b >= 1 {
		t.Fatal(a, b)
	}
	if sched.SplitMix64(0) != 0xe220a8397b1dcdaf {
		t.Fatalf("SplitMix64(0) = %#x", sched.SplitMix64(0))
	}
}

// TestKernelConstantsMatch: the launch shapes and limits the Go side
// assumes are the ones kernels.cu is written for (a mismatch would launch
// a kernel with a grid or split count it does not cover, and nothing
// would fail loudly: attn_combine, for one, reads FA_MAX_SPLITS splits at
// most).
func TestKernelConstantsMatch(t *testing.T) {
	b, err := os.ReadFile("kernels/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"FA_MAX_SPLITS": flashMaxSplit, "FA_WARPS": flashWarps, "FA_ROWS": flashRows,
		"FA_KEYS": flashKeys, "GS_WARPS": skinnyThreads / 32, "SAMPLE_THREADS": sampleThreads, "SAMPLE_SEGS": sampleSegs,
		"SAMPLE_PART_THREADS": samplePartThreads} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)`).FindSubmatch(b)
		if m == nil {
			t.Errorf("kernels.cu defines no %s", name)
		} else if got := string(m[1]); got != strconv.Itoa(want) {
			t.Errorf("kernels.cu: %s is %s, the Go side assumes %d", name, got, want)
		}
	}
	// The four-warp attn_mma's dynamic shared memory, as flashSharedBytes
	// works it out: a launch with less would let the kernel write past it.
	const smem = "#define FA_SMEM_BYTES(HD) ((FA_WARPS * FA_ROWS + 2 * FA_KEYS) * ((HD) + 8) * 2)"
	if !strings.Contains(string(b), smem+"\n") {
		t.Errorf("kernels.cu: FA_SMEM_BYTES is not %q, which flashSharedBytes computes", smem)
	}
	if got := flashSharedBytes(128); got != (4*32+2*32)*136*2 {
		t.Errorf("flashSharedBytes(128) = %d", got)
	}
}

func TestAttnShapeValidate(t *testing.T) {
	if (AttnShape{16, 8, 128, 16}).validate() != nil {
		t.Fatal("valid shape refused")
	}
	for _, a := range []AttnShape{{16, 5, 128, 16}, {16, 8, 512, 16}, {16, 8, 127, 16}, {0, 8, 128, 16}} {
		if a.validate() == nil {
			t.Errorf("%+v accepted", a)
		}
	}
}

// TestKernelsWaitForTheirPredecessor: with programmatic dependent launch a
// kernel may run while the one ahead of it in the stream finishes, so
// every kernel must reach KERNEL_ENTRY (griddepcontrol.wait) before it
// touches anything another kernel writes. This holds each __global__ of
// kernels.cu to starting with KERNEL_ENTRY(), or to being a one-line
// forward to a *_body function (or template) that contains it, or a choice
// between two such forwards on a condition that reads no memory (kernel
// arguments only: no [, *, -> or . in it).
func TestKernelsWaitForTheirPredecessor(t *testing.T) {
	b, err := os.ReadFile("kernels/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	kernel := regexp.MustCompile(`__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(`)
	bodyCall := regexp.MustCompile(`^(\w+_body)[<(]`)
	choice := regexp.MustCompile(`^if \(([^;{}]*)\) (\w+_body)[<(][^;]*;\s*else (\w+_body)[<(]`)
	n := 0
	for _, m := range kernel.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		open := strings.Index(src[m[1]:], ") {")
		if open < 0 {
			t.Fatalf("%s: no body found", name)
		}
		first := strings.TrimSpace(src[m[1]+open+3:])
		n++
		if strings.HasPrefix(first, "KERNEL_ENTRY();") {
			continue
		}
		var bodies []string
		if call := bodyCall.FindStringSubmatch(first); call != nil {
			bodies = []string{call[1]}
		} else if c := choice.FindStringSubmatch(first); c != nil && !strings.ContainsAny(c[1], "[*.") && !strings.Contains(c[1], "->") {
			bodies = c[2:]
		} else {
			t.Errorf("kernel %s does not start with KERNEL_ENTRY() (kernels/common.cuh)", name)
			continue
		}
		for _, body := range bodies {
			def := strings.Index(src, "void "+body+"(")
			end := strings.Index(src[max(def, 0):], "\n}\n")
			if def < 0 || end < 0 || !strings.Contains(src[def:def+end], "KERNEL_ENTRY();") {
				t.Errorf("kernel %s forwards to %s, which has no KERNEL_ENTRY() (kernels/common.cuh)", name, body)
			}
		}
	}
	if n < len(KernelNames()) {
		t.Errorf("found %d kernels in kernels.cu, KernelNames lists %d", n, len(KernelNames()))
	}
}
