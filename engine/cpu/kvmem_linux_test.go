//go:build linux

package cpu

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
)

func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// TestKVPoolLazy: a 1 GiB KV pool must not cost 1 GiB of RSS before it is
// written, and writing one block must make it resident only for that block.
func TestKVPoolLazy(t *testing.T) {
	m := tinyModel(testArches[0], 1)
	perBlock := int64(tBlockSize * tLayers * tKVHeads * testArches[0].headDim * 2 * 4)
	blocks := int((1 << 30) / perBlock)
	before := rssBytes(t)
	b := newTestBackend(t, m, blocks, 1)
	if b.KVBytes() < 1<<30-perBlock {
		t.Fatalf("KVBytes %d, want about 1 GiB", b.KVBytes())
	}
	logits := [][]float32{make([]float32, tVocab)}
	bt := sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: []int32{1, 2, 3}, Blocks: []int32{int32(blocks - 1)}, WantLogits: true}}}
	if err := b.Forward(context.Background(), &bt, logits); err != nil {
		t.Fatal(err)
	}
	if grew := rssBytes(t) - before; grew > 256<<20 {
		t.Errorf("RSS grew by %d MiB for a 1 GiB pool with one block written; the pool should be mapped lazily", grew>>20)
	}
}
