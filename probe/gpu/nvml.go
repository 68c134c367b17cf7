//go:build linux && cgo

package gpu

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/treni-top/treni-top/trace"
)

// Sampler reads every NVIDIA device on each Sample. Create it with Open and
// Close it when done.
type Sampler struct {
	pids    func() []int
	devices []device
	status  string

	closeOnce sync.Once
}

// device is one GPU and the readings it does not support, so that a
// NOT_SUPPORTED answer (power on some boards, PCIe counters in a VM) is
// asked once, not every 10 ms.
type device struct {
	index       int
	h           nvml.Device
	unsupported map[string]bool
}

// Open initialises NVML and finds the devices. pids, which may be nil,
// returns the target's process tree (proc.Sampler.PIDs); the GPU memory
// those processes hold is reported per device as trace.MetricGPUProcMem.
// Without a driver it returns an error wrapping ErrNoGPU in well under a
// millisecond.
func Open(pids func() []int) (*Sampler, error) {
	if err := initNVML(); err != nil {
		return nil, err
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, &noGPU{reason: "NVML cannot count devices: " + nvml.ErrorString(ret)}
	}
	if n == 0 {
		nvml.Shutdown()
		return nil, &noGPU{reason: "the NVIDIA driver is loaded but sees no device"}
	}
	s := &Sampler{pids: pids}
	for i := 0; i < n; i++ {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // a device that fell off the bus; report the others
		}
		s.devices = append(s.devices, device{index: i, h: h, unsupported: map[string]bool{}})
	}
	if len(s.devices) == 0 {
		nvml.Shutdown()
		return nil, &noGPU{reason: fmt.Sprintf("NVML lists %d devices but none can be opened", n)}
	}
	s.status = fmt.Sprintf("%d NVIDIA GPU(s)", len(s.devices))
	return s, nil
}

// initNVML turns NVML's failure codes into ErrNoGPU with a reason.
func initNVML() error {
	ret := nvml.Init()
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return &noGPU{reason: "libnvidia-ml.so.1 not found"}
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return &noGPU{reason: "the NVIDIA kernel driver is not loaded"}
	case nvml.ERROR_NO_PERMISSION:
		return &noGPU{reason: "no permission to open the NVIDIA device files"}
	default:
		return &noGPU{reason: "NVML init failed: " + nvml.ErrorString(ret)}
	}
}

// Name is "gpu".
func (s *Sampler) Name() string { return "gpu" }

// Status describes the sampler's state for the UI: "2 NVIDIA GPU(s)".
func (s *Sampler) Status() string { return s.status }

// Close releases NVML. It is safe to call more than once.
func (s *Sampler) Close() error {
	s.closeOnce.Do(func() { nvml.Shutdown() })
	return nil
}

// Sample reads every device. A reading a device does not support is left
// out of its sample; any other failed reading is left out of this sample
// only. It fails only when no device gives any reading.
func (s *Sampler) Sample(ctx context.Context) ([]trace.Sample, error) {
	var want map[uint32]bool
	if s.pids != nil {
		if ps := s.pids(); len(ps) > 0 {
			want = make(map[uint32]bool, len(ps))
			for _, p := range ps {
				want[uint32(p)] = true
			}
		}
	}
	out := make([]trace.Sample, 0, len(s.devices))
	var firstErr error
	for i := range s.devices {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := &s.devices[i]
		v, err := d.read(want)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if len(v) > 0 {
			out = append(out, trace.Sample{Source: trace.GPUSource(d.index), Values: v})
		}
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// read takes one device's readings.
func (d *device) read(want map[uint32]bool) (map[string]float64, error) {
	v := make(map[string]float64, 9)
	var firstErr error
	// check records a reading's outcome: NOT_SUPPORTED is remembered so the
	// call is not repeated.
	check := func(metric string, ret nvml.Return) bool {
		switch ret {
		case nvml.SUCCESS:
			return true
		case nvml.ERROR_NOT_SUPPORTED:
			d.unsupported[metric] = true
		default:
			if firstErr == nil {
				firstErr = fmt.Errorf("gpu%d %s: %s", d.index, metric, nvml.ErrorString(ret))
			}
		}
		return false
	}
	if !d.unsupported[trace.MetricGPUMemUsed] {
		if m, ret := d.h.GetMemoryInfo(); check(trace.MetricGPUMemUsed, ret) {
			v[trace.MetricGPUMemUsed] = float64(m.Used)
			v[trace.MetricGPUMemTotal] = float64(m.Total)
		}
	}
	if !d.unsupported[trace.MetricGPUUtil] {
		if u, ret := d.h.GetUtilizationRates(); check(trace.MetricGPUUtil, ret) {
			v[trace.MetricGPUUtil] = float64(u.Gpu)
		}
	}
	if !d.unsupported[trace.MetricGPUPower] {
		if mw, ret := d.h.GetPowerUsage(); check(trace.MetricGPUPower, ret) {
			v[trace.MetricGPUPower] = float64(mw) / 1000
		}
	}
	if !d.unsupported[trace.MetricGPUSMClock] {
		if mhz, ret := d.h.GetClockInfo(nvml.CLOCK_SM); check(trace.MetricGPUSMClock, ret) {
			v[trace.MetricGPUSMClock] = float64(mhz)
		}
	}
	// NVML samples each PCIe counter over ~20 ms inside the call: this is
	// the slow part of a GPU reading (wall time, not CPU). KB/s → bytes/s.
	if !d.unsupported[trace.MetricPCIeRX] {
		if kb, ret := d.h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); check(trace.MetricPCIeRX, ret) {
			v[trace.MetricPCIeRX] = float64(kb) * 1024
		}
	}
	if !d.unsupported[trace.MetricPCIeTX] {
		if kb, ret := d.h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); check(trace.MetricPCIeTX, ret) {
			v[trace.MetricPCIeTX] = float64(kb) * 1024
		}
	}
	if want != nil && !d.unsupported[trace.MetricGPUProcMem] {
		// A process with both a compute and a graphics context is listed
		// twice with the same memory; count each PID once. PIDs are the
		// host's: inside a container with its own PID namespace nothing
		// matches and the metric reads 0.
		seen := map[uint32]uint64{}
		ok := false
		if ps, ret := d.h.GetComputeRunningProcesses(); check(trace.MetricGPUProcMem, ret) {
			ok = true
			for _, p := range ps {
				if want[p.Pid] && p.UsedGpuMemory != notAvailable {
					seen[p.Pid] = max(seen[p.Pid], p.UsedGpuMemory)
				}
			}
		}
		if ps, ret := d.h.GetGraphicsRunningProcesses(); ret == nvml.SUCCESS {
			ok = true
			for _, p := range ps {
				if want[p.Pid] && p.UsedGpuMemory != notAvailable {
					seen[p.Pid] = max(seen[p.Pid], p.UsedGpuMemory)
				}
			}
		}
		if ok {
			var sum uint64
			for _, b := range seen {
				sum += b
			}
			v[trace.MetricGPUProcMem] = float64(sum)
		}
	}
	return v, firstErr
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE, which NVML puts in
// UsedGpuMemory where it cannot tell (vGPU, some containers).
const notAvailable = ^uint64(0)

// Inventory lists the GPUs for the session header. Without a driver it
// returns an error wrapping ErrNoGPU.
func Inventory() ([]DeviceInfo, error) {
	if err := initNVML(); err != nil {
		return nil, err
	}
	defer nvml.Shutdown()
	driver, _ := nvml.SystemGetDriverVersion()
	var cuda string
	if v, ret := nvml.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &noGPU{reason: "NVML cannot count devices: " + nvml.ErrorString(ret)}
	}
	if n == 0 {
		return nil, &noGPU{reason: "the NVIDIA driver is loaded but sees no device"}
	}
	out := make([]DeviceInfo, 0, n)
	for i := 0; i < n; i++ {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		info := DeviceInfo{Index: i, Driver: driver, CUDA: cuda}
		info.Name, _ = h.GetName()
		info.UUID, _ = h.GetUUID()
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			info.MemoryTotal = m.Total
		}
		if p, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			info.PCIeBusID = busID(p.BusId[:])
		}
		out = append(out, info)
	}
	return out, nil
}

// busID turns NVML's NUL-terminated C string into a Go string.
func busID(b []uint8) string {
	buf := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		buf = append(buf, c)
	}
	return string(buf)
}

// MostlyWaits is true: NVML samples each PCIe counter over a ~20 ms window
// inside the call, so a reading's wall time is not CPU time
// (probe.Waiter).
func (s *Sampler) MostlyWaits() bool { return true }
