package cuda

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// stagingRing is page-aligned host memory cut into slots, mapped
// anonymously (never Go heap: it is page-locked for the copy engine).
type stagingRing struct {
	mem       []byte
	slotBytes int
}

// newStagingRing maps and pre-faults slots × slotBytes bytes (transparent
// huge pages where the kernel offers them, so pre-faulting and page-locking
// walk 512× fewer pages). It makes no CUDA call, so it can run while the
// driver initialises.
func newStagingRing(slots, slotBytes int) (*stagingRing, error) {
	n := slots * slotBytes
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map a %d MiB staging ring: %w", n>>20, err)
	}
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // advisory
	// Fault the pages in on several threads: the kernel zeroes them, which
	// is the ring's real cost.
	var wg sync.WaitGroup
	for s := 0; s < slots; s++ {
		wg.Add(1)
		go func(b []byte) {
			defer wg.Done()
			for i := 0; i < len(b); i += 4096 {
				b[i] = 0
			}
		}(mem[s*slotBytes : (s+1)*slotBytes])
	}
	wg.Wait()
	return &stagingRing{mem: mem, slotBytes: slotBytes}, nil
}

func (r *stagingRing) slots() int        { return len(r.mem) / r.slotBytes }
func (r *stagingRing) slot(i int) []byte { return r.mem[i*r.slotBytes : (i+1)*r.slotBytes] }

func (r *stagingRing) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}
