//go:build !(linux && cgo)

package gpu

import (
	"context"
	"errors"

	"github.com/treni-top/treni-top/trace"
)

// Sampler is unavailable in this build: NVML is reached through cgo on
// Linux only.
type Sampler struct{}

var errNoCgo = &noGPU{reason: "this treni-top was built without cgo or not for Linux, so it cannot load NVML; rebuild with CGO_ENABLED=1"}

// Open always fails with ErrNoGPU in this build.
func Open(pids func() []int) (*Sampler, error) { return nil, errNoCgo }

// Inventory always fails with ErrNoGPU in this build.
func Inventory() ([]DeviceInfo, error) { return nil, errNoCgo }

// Name is "gpu".
func (s *Sampler) Name() string { return "gpu" }

// Status says why there is no GPU sampler.
func (s *Sampler) Status() string { return errNoCgo.Error() }

// Close does nothing.
func (s *Sampler) Close() error { return nil }

// Sample always fails: there is no sampler in this build.
func (s *Sampler) Sample(ctx context.Context) ([]trace.Sample, error) {
	return nil, errors.Unwrap(errNoCgo)
}

// MostlyWaits is true, as in the NVML build (probe.Waiter).
func (s *Sampler) MostlyWaits() bool { return true }
