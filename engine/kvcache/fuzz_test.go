package kvcache

import (
	"slices"
	"testing"
)

// FuzzManagerOps drives a small manager through arbitrary sequences of the
// scheduler's calls (grow, compute and commit, attach a cached prefix, fork
// the boundary block, release) against a model of the KV contents. After
// every call each block must be in exactly one place with the right
// reference count; a position is only ever written in a block its sequence
// holds alone and that is not cached; and every block Match returns holds
// exactly the tokens it was matched for.
func FuzzManagerOps(f *testing.F) {
	f.Add([]byte{0, 1, 4, 2, 12, 3, 0x10, 5, 0x11, 6, 8, 7, 12, 9, 13, 10})
	f.Add([]byte{0x10, 0x21, 0x32, 0x43, 0x14, 0x25, 0x36, 0x47, 0x11, 0x22})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const bs, nb = 2, 8
		m, _ := New(nb, bs)
		content := make([][bs]int32, nb) // what the "backend" wrote
		toks := map[uint64][]int32{}
		computed := map[uint64]int{}
		for i := 0; i+1 < len(ops); i += 2 {
			seq := uint64(ops[i] & 3)
			arg := int(ops[i+1])
			switch ops[i] >> 2 % 5 {
			case 0: // append tokens (a tiny alphabet, so prefixes collide)
				n := 1 + arg%5
				grown := slices.Clone(toks[seq])
				for range n {
					grown = append(grown, int32(arg>>4&1))
				}
				if _, err := m.Ensure(seq, len(grown)); err == nil {
					toks[seq] = grown
				}
			case 1: // compute the new positions, then commit them
				tab := m.Table(seq)
				for p := computed[seq]; p < len(toks[seq]); p++ {
					b := tab[p/bs]
					if m.refs[b] != 1 || m.cached[b] != nil {
						t.Fatalf("op %d: sequence %d writes position %d into block %d (held %d times, cached %v)", i/2, seq, p, b, m.refs[b], m.cached[b] != nil)
					}
					content[b][p%bs] = toks[seq][p]
				}
				computed[seq] = len(toks[seq])
				m.Commit(seq, toks[seq], computed[seq])
			case 2: // release
				m.Release(seq)
				delete(toks, seq)
				delete(computed, seq)
			case 3: // a fresh sequence attaches its cached prefix
				if toks[seq] != nil {
					break
				}
				want := make([]int32, bs*(1+arg%4))
				for j := range want {
					want[j] = int32(arg >> (j % 4) & 1)
				}
				hit := m.Match(want)
				n, err := m.Attach(seq, hit)
				if err != nil || n != len(hit) {
					t.Fatalf("op %d: attach of a fresh match: %d of %d, %v", i/2, n, len(hit), err)
				}
				if n > 0 {
					toks[seq] = want[:n*bs]
					computed[seq] = n * bs
				}
			case 4: // fork the last block to write into it again
				tab := m.Table(seq)
				if len(tab) == 0 || len(toks[seq]) == 0 {
					break
				}
				last := len(tab) - 1
				if _, _, err := m.Fork(seq, last); err == nil {
					computed[seq] = min(computed[seq], last*bs)
				}
			}
			if err := m.checkConsistent(); err != nil {
				t.Fatalf("after op %d (%v): %v", i/2, ops[i:i+2], err)
			}
			if m.Used()+m.Free() != nb {
				t.Fatalf("used %d + free %d != %d", m.Used(), m.Free(), nb)
			}
			for _, tk := range toks {
				for j, b := range m.Match(tk) {
					if content[b] != [bs]int32(tk[j*bs:(j+1)*bs]) {
						t.Fatalf("op %d: block %d matched for %v holds %v", i/2, b, tk[j*bs:(j+1)*bs], content[b])
					}
				}
			}
		}
		for s := range toks {
			m.Release(s)
		}
		if err := m.CheckLeaks(); err != nil {
			t.Fatal(err)
		}
	})
}
