//go:build !unix

package cpu

// kvMem is the KV pool's storage. Off unix it is a Go slice: the runtime
// takes large zeroed allocations straight from fresh OS pages, so untouched
// blocks still cost little RSS, but the GC owns the memory.
type kvMem struct {
	f []float32
}

func allocKV(n int64) (*kvMem, error) {
	return &kvMem{f: make([]float32, n)}, nil
}

func (m *kvMem) free() error {
	if m != nil {
		m.f = nil
	}
	return nil
}
