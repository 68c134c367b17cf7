//go:build unix

package cpu

import (
	"fmt"
	"syscall"
	"unsafe"
)

// kvMem is the KV pool's storage: an anonymous private mapping. The kernel
// backs a page only when it is first written, so a pool sized for the worst
// case costs RSS only for the blocks sequences actually use.
type kvMem struct {
	raw []byte
	f   []float32
}

func allocKV(n int64) (*kvMem, error) {
	if n <= 0 {
		return &kvMem{}, nil
	}
	raw, err := syscall.Mmap(-1, 0, int(n*4), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("cpu: mmap %d bytes of KV cache: %w", n*4, err)
	}
	return &kvMem{raw: raw, f: unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n)}, nil
}

func (m *kvMem) free() error {
	if m == nil || m.raw == nil {
		return nil
	}
	raw := m.raw
	m.raw, m.f = nil, nil
	if err := syscall.Munmap(raw); err != nil {
		return fmt.Errorf("cpu: munmap KV cache: %w", err)
	}
	return nil
}
