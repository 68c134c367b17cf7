package cuda

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/treni-top/treni-top/engine/sched"
)

// Device-side token choice (sched.TokenBackend) and KV block copies
// (sched.BlockCopier). After a step's LM head the logits stay on the
// device: argmax_f32 (every row greedy) or sample_f32 picks a token per
// row and only the token ids, 4 bytes a row, come back to the host; a
// row's logits (VocabSize × 4 bytes) cross only when the caller asks for
// them. Before this, a 64-stream decode step of a Qwen3-shaped model
// copied 64 × 151,936 × 4 B = 39 MB to the host and sampled there.

var (
	_ sched.TokenBackend = (*Backend)(nil)
	_ sched.BlockCopier  = (*Backend)(nil)
)

// stepOut is where a step's results go. With choice nil (Forward) every
// wanted row's logits are copied into logits; otherwise (ForwardTokens) a
// token per wanted row is chosen on the device into tokens, and logits
// rows come back only where logits[i] is non-nil.
type stepOut struct {
	logits [][]float32
	choice []sched.TokenChoice
	tokens []int32
}

// logitsRow is out.logits[i], nil when absent.
func (o *stepOut) logitsRow(i int) []float32 {
	if i < len(o.logits) {
		return o.logits[i]
	}
	return nil
}

// ForwardTokens runs one step like Forward and chooses each wanted row's
// next token on the device (sched.TokenBackend): choice[i] says how
// (greedy, or temperature with top-k and top-p from the counter-based
// generator keyed by Seed and Step), tokens[i] receives it, and logits[i],
// when non-nil, also receives the row's logits. logits may be shorter than
// the batch (missing entries count as nil). Decode steps replay the same
// CUDA graphs as Forward; the sampling kernel runs after the graph.
func (b *Backend) ForwardTokens(ctx context.Context, bt *sched.Batch, choice []sched.TokenChoice, tokens []int32, logits [][]float32) error {
	if bt == nil {
		return fmt.Errorf("%w: nil batch", ErrBadBatch)
	}
	if err := checkChoices(bt, choice, tokens, logits, b.cfg.VocabSize); err != nil {
		return err
	}
	return b.step(ctx, bt, &stepOut{logits: logits, choice: choice, tokens: tokens})
}

// checkChoices refuses a ForwardTokens call whose outputs or sampling
// parameters cannot be honoured, before any device work.
func checkChoices(bt *sched.Batch, choice []sched.TokenChoice, tokens []int32, logits [][]float32, V int) error {
	n := len(bt.Seqs)
	if len(choice) < n || len(tokens) < n {
		return fmt.Errorf("%w: %d choices and %d token slots for %d sequences", ErrBadBatch, len(choice), len(tokens), n)
	}
	if len(logits) > n {
		return fmt.Errorf("%w: %d logits rows for %d sequences", ErrBadBatch, len(logits), n)
	}
	for i := range bt.Seqs {
		s := &bt.Seqs[i]
		if !s.WantLogits {
			continue
		}
		c := choice[i]
		switch {
		case !(c.Temperature >= 0) || math.IsInf(float64(c.Temperature), 1):
			return fmt.Errorf("%w: sequence %d temperature %v is not a finite value ≥ 0 (0 is greedy)", ErrBadBatch, s.SeqID, c.Temperature)
		case c.TopK < 0:
			return fmt.Errorf("%w: sequence %d top_k %d is negative (0 keeps every token)", ErrBadBatch, s.SeqID, c.TopK)
		case !(c.TopP >= 0 && c.TopP <= 1):
			return fmt.Errorf("%w: sequence %d top_p %v is outside [0, 1]", ErrBadBatch, s.SeqID, c.TopP)
		}
		if i < len(logits) && logits[i] != nil && len(logits[i]) < V {
			return fmt.Errorf("%w: sequence %d logits row has %d entries, vocabulary has %d", ErrBadBatch, s.SeqID, len(logits[i]), V)
		}
	}
	return nil
}

// sampleParams is one row's arguments of sample_f32, in the kernel's
// conventions: temperature ≤ 0 is greedy (TopK 1 is too), top_k ≤ 0
// keeps all, top_p ≥ 1 keeps all (sched's 0 means the same), and the
// counter is the request's Step, so a replayed request draws the same
// number whatever batch it is in.
func sampleParams(c sched.TokenChoice) (temp float32, topK int32, topP float32, seed, counter uint64) {
	temp, topK, topP = c.Temperature, c.TopK, c.TopP
	if c.Greedy() {
		temp = 0
	}
	if topP <= 0 || topP > 1 {
		topP = 1
	}
	return temp, topK, topP, c.Seed, c.Step
}

// Sampling scratch: for capRows rows, six arrays in one device buffer and
// its pinned host twin, then (on the device only) sample_part's scratch.
// The 8-byte arrays come after the 4-byte ones; capRows is a multiple of
// 8, so every array starts 8-byte aligned.
const sampleBytesPerRow = 4 + 4 + 4 + 4 + 8 + 8 // out, temp, top_k, top_p, seed, counter

// sampleDeviceBytesPerRow is the device buffer's share of a row.
const sampleDeviceBytesPerRow = sampleBytesPerRow + SamplePartBytesPerRow

type sampleLayout struct{ out, temp, topK, topP, seed, counter, part int }

func sampleOffsets(capRows int) sampleLayout {
	return sampleLayout{out: 0, temp: 4 * capRows, topK: 8 * capRows, topP: 12 * capRows, seed: 16 * capRows, counter: 24 * capRows,
		part: sampleBytesPerRow * capRows}
}

// fillSampleHost writes the parameters of rows (row j is sequence rowSeq[j])
// into the host buffer laid out for capRows rows and reports whether every
// row is greedy (argmax_f32 then suffices).
func fillSampleHost(host unsafe.Pointer, capRows int, rowSeq []int, choice []sched.TokenChoice) (allGreedy bool) {
	lay := sampleOffsets(capRows)
	n := len(rowSeq)
	temps := unsafe.Slice((*float32)(unsafe.Add(host, lay.temp)), n)
	ks := unsafe.Slice((*int32)(unsafe.Add(host, lay.topK)), n)
	ps := unsafe.Slice((*float32)(unsafe.Add(host, lay.topP)), n)
	seeds := unsafe.Slice((*uint64)(unsafe.Add(host, lay.seed)), n)
	ctrs := unsafe.Slice((*uint64)(unsafe.Add(host, lay.counter)), n)
	allGreedy = true
	for j, i := range rowSeq {
		temps[j], ks[j], ps[j], seeds[j], ctrs[j] = sampleParams(choice[i])
		if temps[j] > 0 {
			allGreedy = false
		}
	}
	return allGreedy
}

// emit delivers the step's n logits rows, already computed into b.logitsD
// (row j belongs to sequence rowSeq[j]), to out, and waits for the step
// (runner thread).
func (b *Backend) emit(out *stepOut, rowSeq []int) error {
	V := b.cfg.VocabSize
	n := len(rowSeq)
	s := b.s
	b.prof.mark(s, "logits_or_tokens_to_host")
	defer b.prof.end(s)
	if out.choice == nil {
		if err := b.fetchLogits(n); err != nil {
			return err
		}
		host := unsafe.Slice((*float32)(b.logitsHost.Ptr), n*V)
		for j, i := range rowSeq {
			copy(out.logits[i][:V], host[j*V:(j+1)*V])
		}
		return nil
	}
	lay := sampleOffsets(b.capRows)
	greedy := fillSampleHost(b.sampleHost.Ptr, b.capRows, rowSeq, out.choice)
	dOut := b.sampleD + DevicePtr(lay.out)
	if greedy {
		if err := b.k.Argmax(s, dOut, b.logitsD, n, V, V); err != nil {
			return err
		}
	} else {
		// Parameters from temp to the end of the counters, one copy.
		if err := s.CopyHtoDAsync(b.sampleD+DevicePtr(lay.temp), unsafe.Add(b.sampleHost.Ptr, lay.temp), sampleBytesPerRow*b.capRows-lay.temp); err != nil {
			return err
		}
		if err := b.k.Sample(s, SampleArgs{Out: dOut, Logits: b.logitsD, V: V, Stride: V, Rows: n,
			Temperature: b.sampleD + DevicePtr(lay.temp), TopK: b.sampleD + DevicePtr(lay.topK), TopP: b.sampleD + DevicePtr(lay.topP),
			Seed: b.sampleD + DevicePtr(lay.seed), Counter: b.sampleD + DevicePtr(lay.counter), Part: b.sampleD + DevicePtr(lay.part)}); err != nil {
			return err
		}
	}
	if err := s.CopyDtoHAsync(b.sampleHost.Ptr, dOut, n*4); err != nil {
		return err
	}
	// Logits rows asked for land in consecutive host rows.
	want := 0
	for _, i := range rowSeq {
		if out.logitsRow(i) != nil {
			want++
		}
	}
	if err := b.hostLogits(want); err != nil {
		return err
	}
	k := 0
	for j, i := range rowSeq {
		if out.logitsRow(i) == nil {
			continue
		}
		if err := s.CopyDtoHAsync(unsafe.Add(b.logitsHost.Ptr, k*V*4), b.logitsD+DevicePtr(j*V*4), V*4); err != nil {
			return err
		}
		k++
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("cuda: forward: %w", err)
	}
	toks := unsafe.Slice((*int32)(b.sampleHost.Ptr), n)
	var host []float32
	if want > 0 {
		host = unsafe.Slice((*float32)(b.logitsHost.Ptr), want*V)
	}
	k = 0
	for j, i := range rowSeq {
		out.tokens[i] = toks[j]
		if row := out.logitsRow(i); row != nil {
			copy(row[:V], host[k*V:(k+1)*V])
			k++
		}
	}
	return nil
}

// checkBlockPairs refuses a CopyBlocks call with mismatched lists or
// blocks outside a pool of nb.
func checkBlockPairs(src, dst []int32, nb int) error {
	if len(src) != len(dst) {
		return fmt.Errorf("%w: %d source and %d destination KV blocks", ErrBadBatch, len(src), len(dst))
	}
	for i := range src {
		if src[i] < 0 || int(src[i]) >= nb || dst[i] < 0 || int(dst[i]) >= nb {
			return fmt.Errorf("%w: KV block copy %d is %d → %d, pool has %d blocks", ErrBadBatch, i, src[i], dst[i], nb)
		}
	}
	return nil
}

// CopyBlocks makes KV block dst[i] hold block src[i]'s contents, for every
// layer, K and V (sched.BlockCopier). A block is contiguous in each
// layer's K and V pool, so a pair is 2 × layers device-to-device copies,
// enqueued on the compute stream in order (a later pair sees an earlier
// one's result) ahead of any later step.
func (b *Backend) CopyBlocks(ctx context.Context, src, dst []int32) error {
	if err := checkBlockPairs(src, dst, b.opts.NumBlocks); err != nil {
		return err
	}
	release, err := b.acquire()
	if err != nil {
		return err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cuda: copy KV blocks: %w", err)
	}
	c := b.cfg
	blockBytes := int64(c.NumKVHeads) * int64(b.opts.BlockSize) * int64(c.HeadDim) * 2
	return b.r.Do(ctx, func() error {
		for i := range src {
			if src[i] == dst[i] {
				continue
			}
			so, do := DevicePtr(int64(src[i])*blockBytes), DevicePtr(int64(dst[i])*blockBytes)
			for li := range b.layers {
				l := &b.layers[li]
				if err := b.s.CopyDtoDAsync(l.k+do, l.k+so, int(blockBytes)); err != nil {
					return fmt.Errorf("cuda: copy KV block %d → %d: %w", src[i], dst[i], err)
				}
				if err := b.s.CopyDtoDAsync(l.v+do, l.v+so, int(blockBytes)); err != nil {
					return fmt.Errorf("cuda: copy KV block %d → %d: %w", src[i], dst[i], err)
				}
			}
		}
		if err := b.s.Synchronize(); err != nil {
			return fmt.Errorf("cuda: copy KV blocks: %w", err)
		}
		return nil
	})
}
