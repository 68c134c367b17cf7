// Package sched is the built-in engine's continuous-batching scheduler: it
// admits requests, splits long prompts into prefill chunks, mixes prefill and
// decode in one step, samples, and frees KV blocks when a request ends. It
// drives any Backend (CPU now, CUDA later) through the interface below.
package sched

import "context"

// SeqChunk is one sequence's share of a forward step.
type SeqChunk struct {
	// SeqID identifies the sequence across steps.
	SeqID uint64
	// Tokens are the new tokens this step: a prefill chunk, or the one token
	// sampled by the previous decode step.
	Tokens []int32
	// Pos is the position of Tokens[0] in the sequence; positions
	// [0, Pos) are already in the KV cache.
	Pos int
	// Blocks is the sequence's block table: Blocks[i] holds positions
	// [i*BlockSize, (i+1)*BlockSize). It covers at least Pos+len(Tokens).
	Blocks []int32
	// WantLogits asks for the logits of the last token of this chunk (the
	// end of a prefill, or a decode step).
	WantLogits bool
}

// Batch is everything one forward step processes.
type Batch struct {
	Seqs []SeqChunk
}

// Tokens is the number of new tokens in the batch.
func (b *Batch) Tokens() int {
	n := 0
	for _, s := range b.Seqs {
		n += len(s.Tokens)
	}
	return n
}

// Backend runs the model. Implementations own the weights and the KV cache
// storage (NumBlocks × BlockSize positions for every layer); the scheduler
// owns which block belongs to which sequence.
type Backend interface {
	// Forward runs one step. For every Seqs[i] with WantLogits it writes the
	// logits of that chunk's last token into logits[i], which the caller
	// sized to VocabSize (entries for chunks without WantLogits are nil and
	// left alone). It writes the chunk's K and V into the sequence's blocks.
	Forward(ctx context.Context, b *Batch, logits [][]float32) error
	// VocabSize is the length of a logits row.
	VocabSize() int
	// BlockSize is the number of positions per KV block.
	BlockSize() int
	// NumBlocks is the number of KV blocks the backend allocated.
	NumBlocks() int
	// Name is a short label for logs and /metrics ("cpu", "cuda").
	Name() string
	// Close releases weights and KV storage.
	Close() error
}
