// Package gpu samples NVIDIA GPUs through NVML (go-nvml): per device memory,
// utilisation, power, SM clock and PCIe throughput, and the GPU memory held
// by the target's process tree.
//
// Most machines that run treni-top in CI have no NVIDIA driver. That is a
// normal state, not an error to repeat: Open and Inventory return ErrNoGPU
// once, with a message for the user, and callers show Status() instead of a
// GPU panel.
package gpu

import (
	"errors"
	"fmt"
)

// ErrNoGPU means NVML could not be used: no driver library, no driver
// loaded, no device, or a binary built without cgo. Check with errors.Is;
// the wrapping error says which.
var ErrNoGPU = errors.New("no NVIDIA GPU")

// noGPU wraps ErrNoGPU with the reason and what the user can do about it.
type noGPU struct{ reason string }

// Error says what is missing and what to do.
func (e *noGPU) Error() string {
	return "no NVIDIA GPU: " + e.reason + " (GPU panels stay empty; install the NVIDIA driver, or ignore this on a CPU-only machine)"
}

// Unwrap makes errors.Is(err, ErrNoGPU) true.
func (e *noGPU) Unwrap() error { return ErrNoGPU }

// DeviceInfo describes one GPU for the session header.
type DeviceInfo struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	UUID        string `json:"uuid,omitempty"`
	MemoryTotal uint64 `json:"memory_total_bytes"`
	Driver      string `json:"driver,omitempty"`      // driver version, e.g. 580.159
	CUDA        string `json:"cuda,omitempty"`        // highest CUDA version the driver supports, e.g. 13.0
	PCIeBusID   string `json:"pcie_bus_id,omitempty"` // e.g. 00000000:18:00.0
}

// String is a one-line description: "0: NVIDIA H200, 141 GiB, driver 580.159".
func (d DeviceInfo) String() string {
	return fmt.Sprintf("%d: %s, %.0f GiB, driver %s", d.Index, d.Name, float64(d.MemoryTotal)/(1<<30), d.Driver)
}

// StatusOf turns Open's or Inventory's error into the one line a UI shows in
// place of the GPU panel.
func StatusOf(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
