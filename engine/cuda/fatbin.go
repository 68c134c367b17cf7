package cuda

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// The kernels are compiled by nvcc on a machine with the CUDA toolkit
// (make kernels, or scripts/gpu-cuda-check.sh on the GPU machine) and the
// fatbin is committed, so that building treni-top needs no toolkit.

//go:embed kernels/kernels.fatbin
var embeddedFatbin []byte

//go:embed kernels/manifest.json
var embeddedManifest []byte

// FatbinEnv names a variable pointing at a kernels.fatbin to load instead of
// the embedded one (for testing a freshly built fatbin before committing it).
const FatbinEnv = "TRENI_CUDA_FATBIN"

// Manifest describes how the embedded fatbin was built.
type Manifest struct {
	// NVCC is the release line of `nvcc --version`.
	NVCC string `json:"nvcc"`
	// Command is the nvcc command line.
	Command string `json:"command"`
	// FatbinSHA256 is the hex sha256 of kernels.fatbin.
	FatbinSHA256 string `json:"fatbin_sha256"`
	// Sources maps each .cu/.cuh file name to its hex sha256.
	Sources map[string]string `json:"sources"`
}

// EmbeddedManifest parses the manifest committed next to the fatbin.
func EmbeddedManifest() (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(embeddedManifest, &m); err != nil {
		return m, fmt.Errorf("engine/cuda/kernels/manifest.json is malformed (rebuild it with make kernels): %w", err)
	}
	return m, nil
}

// ErrNoKernels means the binary carries no compiled kernels.
var ErrNoKernels = errors.New("no compiled CUDA kernels in this build")

// KernelImage returns the fatbin to load: the file named by FatbinEnv when
// set, else the embedded one. It checks the embedded image against the
// manifest's sha256 so that a stale or truncated commit is caught.
func KernelImage() ([]byte, error) {
	if p := os.Getenv(FatbinEnv); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read kernels from %s=%s: %w", FatbinEnv, p, err)
		}
		return b, nil
	}
	if len(embeddedFatbin) == 0 {
		return nil, fmt.Errorf("%w: engine/cuda/kernels/kernels.fatbin is empty; run make kernels on a machine with nvcc, or set %s", ErrNoKernels, FatbinEnv)
	}
	m, err := EmbeddedManifest()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(embeddedFatbin)
	if got := hex.EncodeToString(sum[:]); got != m.FatbinSHA256 {
		return nil, fmt.Errorf("%w: embedded kernels.fatbin has sha256 %s but manifest.json says %q; run make kernels on a machine with nvcc and commit both", ErrNoKernels, got, m.FatbinSHA256)
	}
	return embeddedFatbin, nil
}
