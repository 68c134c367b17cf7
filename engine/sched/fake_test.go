package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// fakeBackend is a real Backend whose "model" is a hash of the token
// history read back from its own paged KV storage: if the scheduler hands
// it a wrong block table, wrong positions, or a block another sequence
// overwrote (a shared prefix block written to, a block handed out twice),
// the generated tokens change or Forward fails.
type fakeBackend struct {
	vocab, blockSize, numBlocks int
	delay                       time.Duration
	// gate, when set, holds every step until it is closed: a test queues
	// all its requests first, so the load it means to induce does not
	// depend on how fast this host runs the submitting goroutines.
	gate chan struct{}

	mu      sync.Mutex
	slots   [][]slot // [block][offset]
	steps   []stepRecord
	failAt  int // fail the step with this 1-based number (0 = never)
	forward int
}

type slot struct {
	seq   uint64 // the sequence that wrote it
	pos   int    // the position it was written for
	tok   int32
	valid bool
}

// stepRecord is what one Forward saw, for tests of batch composition.
type stepRecord struct {
	chunks map[uint64]int // seq → tokens in this step
}

func newFake(vocab, blockSize, numBlocks int) *fakeBackend {
	f := &fakeBackend{vocab: vocab, blockSize: blockSize, numBlocks: numBlocks}
	f.slots = make([][]slot, numBlocks)
	for i := range f.slots {
		f.slots[i] = make([]slot, blockSize)
	}
	return f
}

func (f *fakeBackend) VocabSize() int { return f.vocab }
func (f *fakeBackend) BlockSize() int { return f.blockSize }
func (f *fakeBackend) NumBlocks() int { return f.numBlocks }
func (f *fakeBackend) Name() string   { return "fake" }
func (f *fakeBackend) Close() error   { return nil }

func (f *fakeBackend) Forward(ctx context.Context, b *Batch, logits [][]float32) error {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forward++
	if f.failAt == f.forward {
		return errors.New("injected failure")
	}
	rec := stepRecord{chunks: map[uint64]int{}}
	for i, c := range b.Seqs {
		rec.chunks[c.SeqID] = len(c.Tokens)
		if need := (c.Pos + len(c.Tokens) + f.blockSize - 1) / f.blockSize; len(c.Blocks) < need {
			return fmt.Errorf("seq %d: %d blocks for %d positions", c.SeqID, len(c.Blocks), c.Pos+len(c.Tokens))
		}
		for j, t := range c.Tokens {
			p := c.Pos + j
			f.slots[c.Blocks[p/f.blockSize]][p%f.blockSize] = slot{seq: c.SeqID, pos: p, tok: t, valid: true}
		}
		if !c.WantLogits {
			continue
		}
		if len(logits[i]) != f.vocab {
			return fmt.Errorf("logits row %d has %d entries", i, len(logits[i]))
		}
		hist := make([]int32, c.Pos+len(c.Tokens))
		for p := range hist {
			s := f.slots[c.Blocks[p/f.blockSize]][p%f.blockSize]
			if !s.valid || s.pos != p {
				return fmt.Errorf("seq %d position %d: KV slot holds seq %d's position %d (valid %v)", c.SeqID, p, s.seq, s.pos, s.valid)
			}
			hist[p] = s.tok
		}
		next := fakeNext(hist, f.vocab)
		row := logits[i]
		for v := range row {
			row[v] = float32((v*7)%11) / 11 // a spread of small logits
		}
		row[next] = 5
	}
	f.steps = append(f.steps, rec)
	return nil
}

// fakeNext is the fake model: the greedy next token after hist.
func fakeNext(hist []int32, vocab int) int32 {
	var h uint64 = 1469598103934665603
	for _, t := range hist {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return int32(h % uint64(vocab))
}

// reference is the greedy continuation of prompt under the fake model.
func reference(prompt []int32, n, vocab int) []int32 {
	hist := append([]int32(nil), prompt...)
	var out []int32
	for range n {
		t := fakeNext(hist, vocab)
		out = append(out, t)
		hist = append(hist, t)
	}
	return out
}

func (f *fakeBackend) records() []stepRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]stepRecord(nil), f.steps...)
}
