package cuda

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Floors are the machine's physical limits that the built-in engine's cold
// start and decode are measured against (docs/BENCHMARKS.md, "Floors").
type Floors struct {
	Device          string  `json:"device"`
	CuInitMS        float64 `json:"cu_init_ms"`
	CtxRetainMS     float64 `json:"ctx_retain_ms"`
	PageableH2DGBps float64 `json:"pageable_h2d_gb_per_s"`
	PinnedH2DGBps   float64 `json:"pinned_h2d_gb_per_s"`
	// PinnedD2HGBps is the way back (a level-1 sleep's copy of the
	// weights into page-locked host memory).
	PinnedD2HGBps  float64 `json:"pinned_d2h_gb_per_s"`
	RegisteredGBps float64 `json:"registered_h2d_gb_per_s"`
	HostRegisterMS float64 `json:"host_register_ms"` // cuMemHostRegister of Bytes
	HostAllocMS    float64 `json:"host_alloc_ms"`    // cuMemHostAlloc of Bytes
	D2DGBps        float64 `json:"d2d_gb_per_s"`     // bytes read + written
	Bytes          int     `json:"bytes"`
	// Gemm is cuBLASLt's bf16 matrix rate (gemmfloor.go): a workload's
	// prefill is bounded by its FLOPs over it. Nil when it could not be
	// measured; GemmError then says why.
	Gemm      *GemmFloor `json:"gemm_bf16,omitempty"`
	GemmError string     `json:"gemm_bf16_error,omitempty"`
	// PageCacheRead is the host's half of the staged upload's floor
	// (hostfloor.go): reader threads copying a resident file out of the
	// page cache, for 1, half and all of the upload's reader count.
	PageCacheRead []PageCacheRead `json:"page_cache_read,omitempty"`
	// RegisteredFile is the copy engine reading the same file's page-cache
	// pages in place (the mapped upload's way), alone and beside the
	// upload's readers.
	RegisteredFile *RegisteredFileCopy `json:"registered_file,omitempty"`
}

// MeasureFloors times cuInit, primary-context retain, and copies of n bytes
// (pageable, pinned, registered host → device; device → device) on device
// 0, cuBLASLt's bf16 matrix rate (Gemm; a missing cuBLASLt is recorded in
// GemmError, not returned, so the copy floors still print), then how fast
// the staged upload's reader threads can copy a resident file of up to
// 1 GiB (written to os.TempDir) out of the page cache, alone
// and beside pinned copies (PageCacheRead), and how fast the copy engine
// reads that file registered in place (RegisteredFile). It must be the
// first CUDA work of the process for cuInit to be meaningful, and runs
// everything on its own locked thread.
func MeasureFloors(ctx context.Context, n int) (Floors, error) {
	f := Floors{Bytes: n}
	r := NewRunner()
	defer r.Close()
	err := r.Do(ctx, func() error {
		d, err := LoadDriver()
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := d.Init(); err != nil {
			return err
		}
		f.CuInitMS = msSince(t0)
		info, err := d.Device(0)
		if err != nil {
			return err
		}
		f.Device = info.Name
		t0 = time.Now()
		c, err := d.RetainPrimary(0)
		if err != nil {
			return err
		}
		defer c.Release()
		f.CtxRetainMS = msSince(t0)
		dev, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(dev)
		dev2, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(dev2)
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		// h2d copies n bytes at src to dev on s and waits for them.
		h2d := func(src unsafe.Pointer, n int) error {
			if err := s.CopyHtoDAsync(dev, src, n); err != nil {
				return err
			}
			return s.Synchronize()
		}

		// Pageable: anonymous memory that is not registered, like a plain
		// read buffer or a non-registered mmap.
		pageable, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return fmt.Errorf("map %d bytes: %w", n, err)
		}
		defer unix.Munmap(pageable)
		for i := 0; i < n; i += 4096 {
			pageable[i] = byte(i)
		}
		if f.PageableH2DGBps, err = bestOf(3, n, func() error { return c.CopyHtoD(dev, unsafe.Pointer(&pageable[0]), n) }); err != nil {
			return err
		}

		t0 = time.Now()
		if err := c.HostRegister(unsafe.Pointer(&pageable[0]), n, false); err != nil {
			return err
		}
		f.HostRegisterMS = msSince(t0)
		f.RegisteredGBps, err = bestOf(3, n, func() error { return h2d(unsafe.Pointer(&pageable[0]), n) })
		c.HostUnregister(unsafe.Pointer(&pageable[0]))
		if err != nil {
			return err
		}

		t0 = time.Now()
		pinned, err := c.HostAlloc(n)
		if err != nil {
			return err
		}
		f.HostAllocMS = msSince(t0)
		defer c.FreeHost(pinned)
		if f.PinnedH2DGBps, err = bestOf(3, n, func() error { return h2d(pinned.Ptr, n) }); err != nil {
			return err
		}
		if f.PinnedD2HGBps, err = bestOf(3, n, func() error {
			if err := s.CopyDtoHAsync(pinned.Ptr, dev, n); err != nil {
				return err
			}
			return s.Synchronize()
		}); err != nil {
			return err
		}
		d2d, err := bestOf(5, n, func() error {
			if err := s.CopyDtoDAsync(dev2, dev, n); err != nil {
				return err
			}
			return s.Synchronize()
		})
		f.D2DGBps = 2 * d2d // each byte is read and written
		if err != nil {
			return err
		}
		if g, err := measureGemm(c, s); err != nil {
			f.GemmError = err.Error()
		} else {
			f.Gemm = &g
		}
		pc, err := newPageCacheFile(os.TempDir(), min(n, 1<<30))
		if err != nil {
			return err
		}
		defer pc.Close()
		// Copies of the upload's slot size, as the staged upload makes.
		piece := min(n, stagingSlotBytes)
		copyPinned := func() error { return h2d(pinned.Ptr, piece) }
		readers := maxReaders()
		for _, t := range []int{1, readers / 2, readers} {
			if t < 1 || (len(f.PageCacheRead) > 0 && f.PageCacheRead[len(f.PageCacheRead)-1].Threads >= t) {
				continue
			}
			r, err := pc.readFloor(t, piece, 700*time.Millisecond, copyPinned)
			if err != nil {
				return err
			}
			f.PageCacheRead = append(f.PageCacheRead, r)
		}
		register := func(p unsafe.Pointer, n int) error { return c.HostRegister(p, n, true) }
		rf, err := pc.registeredCopyFloor(register, c.HostUnregister, readers, 700*time.Millisecond, h2d)
		if err != nil {
			return err
		}
		f.RegisteredFile = &rf
		return nil
	})
	return f, err
}

// msSince is the time since t in milliseconds.
func msSince(t time.Time) float64 { return durMS(time.Since(t)) }

// durMS is d in milliseconds, the unit of every duration attribute.
func durMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// gbPerS is n bytes over d in GB/s (10⁹ bytes a second).
func gbPerS(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

// bestOf runs copy k times and returns the best throughput in GB/s.
func bestOf(k, n int, copy func() error) (float64, error) {
	best := 0.0
	for i := 0; i < k; i++ {
		t0 := time.Now()
		if err := copy(); err != nil {
			return 0, err
		}
		if g := gbPerS(int64(n), time.Since(t0)); g > best {
			best = g
		}
	}
	return best, nil
}

// Text renders the floors as a table.
func (f Floors) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %s, copies of %.2f GiB\n", f.Device, float64(f.Bytes)/(1<<30))
	fmt.Fprintf(&b, "cuInit                      %8.1f ms\n", f.CuInitMS)
	fmt.Fprintf(&b, "primary context retain      %8.1f ms\n", f.CtxRetainMS)
	fmt.Fprintf(&b, "H2D pageable                %8.1f GB/s\n", f.PageableH2DGBps)
	fmt.Fprintf(&b, "H2D cuMemHostRegister'd     %8.1f GB/s\n", f.RegisteredGBps)
	fmt.Fprintf(&b, "H2D pinned (cuMemHostAlloc) %8.1f GB/s\n", f.PinnedH2DGBps)
	fmt.Fprintf(&b, "D2H pinned (cuMemHostAlloc) %8.1f GB/s\n", f.PinnedD2HGBps)
	fmt.Fprintf(&b, "cuMemHostRegister           %8.1f ms\n", f.HostRegisterMS)
	fmt.Fprintf(&b, "cuMemHostAlloc              %8.1f ms\n", f.HostAllocMS)
	fmt.Fprintf(&b, "D2D (read + write)          %8.0f GB/s\n", f.D2DGBps)
	if g := f.Gemm; g != nil {
		fmt.Fprintf(&b, "GEMM bf16 %dx%dx%d          %8.0f TFLOP/s (median of %d batches; %.0f–%.0f)\n",
			g.M, g.N, g.K, g.TFLOPS, gemmFloorBatches, g.MinTFLOPS, g.MaxTFLOPS)
	} else if f.GemmError != "" {
		fmt.Fprintf(&b, "GEMM bf16: not measured: %s\n", f.GemmError)
	}
	for _, r := range f.PageCacheRead {
		fmt.Fprintf(&b, "page cache → memory, %2d threads %6.1f GB/s alone, %.1f beside a pinned H2D copy (which then ran at %.1f)\n",
			r.Threads, r.GBps, r.BesideH2DGBps, r.H2DBesideGBps)
	}
	if r := f.RegisteredFile; r != nil {
		fmt.Fprintf(&b, "the file registered in place: %.1f ms for %.2f GiB; H2D from it %.1f GB/s alone, %.1f beside %d readers (which then read %.1f)\n",
			r.RegisterMS, float64(r.Bytes)/(1<<30), r.GBps, r.BesideReadGBps, r.Threads, r.ReadsBesideGBps)
		fmt.Fprintf(&b, "  a fresh mapping of it populated first: %.1f ms on %d threads, then registered in %.1f ms\n",
			r.PopulateMS, populateThreads, r.RegisterPopulatedMS)
	}
	return b.String()
}
