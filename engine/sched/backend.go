// Package sched is the built-in engine's continuous-batching scheduler: it
// admits requests, starts them after the KV blocks of any prefix already in
// the prefix cache, splits long prompts into prefill chunks, mixes prefill
// and decode in one step under a token budget (decodes first), samples (or
// lets a TokenBackend sample on the device), and frees KV blocks when a
// request ends. It drives any Backend (CPU, CUDA) through the interfaces
// below.
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

// TokenChoice says how a backend that samples on the device picks the next
// token of one chunk (see TokenBackend). It carries the request's Sampling
// reduced to what a kernel needs, plus a counter-based generator's inputs so
// that a seeded request draws the same tokens whatever else is in the batch.
type TokenChoice struct {
	// Temperature 0 (or TopK 1) is greedy: the argmax, no random draw.
	Temperature float32
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int32
	// TopP keeps the smallest most-likely set reaching TopP; 0 or 1 keeps all.
	TopP float32
	// Seed is the request's seed; Step is the index of the token being drawn
	// in that request's output (0 for the first). The pair names the random
	// number, so a replayed request draws the same one.
	Seed uint64
	Step uint64
}

// TokenBackend is a Backend that can choose tokens itself, on the device,
// so that only token ids cross to the host after a step (a row of logits is
// VocabSize × 4 bytes; a token id is 4). The scheduler uses ForwardTokens
// instead of Forward when its backend implements it.
type TokenBackend interface {
	Backend
	// ForwardTokens runs one step like Forward. For every Seqs[i] with
	// WantLogits it writes the token chosen by choice[i] into tokens[i];
	// when logits[i] is non-nil (a request that asked for logprobs) it also
	// writes that row's logits there. tokens and choice have len(b.Seqs)
	// entries; entries of chunks without WantLogits are left alone.
	ForwardTokens(ctx context.Context, b *Batch, choice []TokenChoice, tokens []int32, logits [][]float32) error
}

// BlockCopier is a Backend that can copy whole KV blocks (every layer, K and
// V). With it the scheduler can share a cached prefix's last block
// copy-on-write: the block is copied before a sequence writes into it.
type BlockCopier interface {
	// CopyBlocks makes block dst[i] hold block src[i]'s contents, for every
	// i, before the next Forward runs. len(src) == len(dst).
	CopyBlocks(ctx context.Context, src, dst []int32) error
}
