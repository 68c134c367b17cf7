package kvcache

// ResetPrefix forgets every cached block, for a KV pool whose contents are
// about to be lost (a server's sleep): cached blocks no sequence holds go
// back to the free list, held ones stay with their sequences and become
// free when let go. It returns how many blocks it uncached.
func (m *Manager) ResetPrefix() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.byHash {
		if e.elem != nil {
			m.lru.Remove(e.elem)
			m.free = append(m.free, e.block)
		}
		m.uncache(e)
		n++
	}
	return n
}
