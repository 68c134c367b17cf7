package sched

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Sampling chooses how the next token is drawn from the logits.
type Sampling struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float64
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP; 0 or 1 keeps all.
	TopP float64
	// Seed makes a temperature-sampled request reproducible when Seeded is
	// set: the same prompt, parameters and seed give the same tokens.
	Seed int64
	// Seeded says Seed was given; otherwise the scheduler picks one.
	Seeded bool
}

// Greedy reports whether the parameters reduce to argmax.
func (p Sampling) Greedy() bool { return p.Temperature == 0 || p.TopK == 1 }

// Validate rejects parameters no sampler can honour.
func (p Sampling) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || p.Temperature < 0 || p.Temperature > 100:
		return fmt.Errorf("temperature %v is outside [0, 100]; use 0 for greedy decoding", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d is negative; use 0 to keep every token", p.TopK)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v is outside [0, 1]", p.TopP)
	}
	return nil
}

// newRNG returns the per-request generator: one stream per request, so the
// tokens of a seeded request do not depend on what else is in the batch.
func newRNG(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x7472656e69)) // "treni"
}

// sampler holds scratch space reused across steps by the scheduler
// goroutine (never shared between goroutines).
type sampler struct {
	h     idxHeap
	probs []float64
}

// sample draws one token. NaN logits are never chosen; a row of only NaNs
// yields token 0 rather than a panic (the backend is reporting garbage and
// the output will show it).
func (s *sampler) sample(logits []float32, p Sampling, rng *rand.Rand) int32 {
	if len(logits) == 0 {
		return 0
	}
	if p.Greedy() || rng == nil {
		return argmax(logits)
	}
	maxL := float32(math.Inf(-1))
	for _, l := range logits {
		if l > maxL {
			maxL = l
		}
	}
	if math.IsInf(float64(maxL), -1) {
		return argmax(logits)
	}
	invT := 1 / p.Temperature
	weight := func(l float32) float64 {
		if l != l { // NaN
			return 0
		}
		return math.Exp(float64(l-maxL) * invT)
	}
	topP := p.TopP
	if topP <= 0 || topP >= 1 {
		topP = 1
	}
	if p.TopK <= 0 && topP == 1 {
		// Plain temperature sampling: one pass for the sum, one to draw.
		var z float64
		for _, l := range logits {
			z += weight(l)
		}
		u := rng.Float64() * z
		var acc float64
		last := int32(0)
		for i, l := range logits {
			w := weight(l)
			if w == 0 {
				continue
			}
			acc += w
			last = int32(i)
			if acc > u {
				return int32(i)
			}
		}
		return last
	}
	// Top-k / top-p: only the head of the distribution matters, so select
	// it with a bounded heap instead of sorting the whole vocabulary (151k
	// entries for Qwen, every step, for every sequence).
	var zAll float64
	if p.TopK <= 0 {
		for _, l := range logits {
			zAll += weight(l)
		}
	}
	k := p.TopK
	if k <= 0 || k > len(logits) {
		k = min(64, len(logits))
	}
	for {
		idx := s.top(logits, k)
		z := zAll
		s.probs = s.probs[:0]
		var zk float64
		for _, i := range idx {
			w := weight(logits[i])
			s.probs = append(s.probs, w)
			zk += w
		}
		if p.TopK > 0 {
			z = zk // top-k renormalises over the kept tokens
		}
		cut := len(idx)
		if topP < 1 {
			var acc float64
			cut = -1
			for j, w := range s.probs {
				acc += w
				if acc >= topP*z {
					cut = j + 1
					break
				}
			}
			if cut < 0 {
				if p.TopK <= 0 && k < len(logits) {
					k = min(k*4, len(logits))
					continue // the nucleus is wider than the head we took
				}
				cut = len(idx)
			}
		}
		var zc float64
		for _, w := range s.probs[:cut] {
			zc += w
		}
		u := rng.Float64() * zc
		var acc float64
		for j, w := range s.probs[:cut] {
			acc += w
			if acc > u {
				return idx[j]
			}
		}
		return idx[cut-1]
	}
}

// argmax returns the first index of the largest non-NaN logit.
func argmax(logits []float32) int32 {
	best := -1
	for i, l := range logits {
		if l != l {
			continue
		}
		if best < 0 || l > logits[best] {
			best = i
		}
	}
	if best < 0 {
		return 0
	}
	return int32(best)
}

// top returns the indices of the k largest logits, largest first, ties by
// lower index (so the result is deterministic).
func (s *sampler) top(logits []float32, k int) []int32 {
	s.h = idxHeap{logits: logits, idx: s.h.idx[:0]}
	for i, l := range logits {
		if l != l {
			continue
		}
		if len(s.h.idx) < k {
			heap.Push(&s.h, int32(i))
			continue
		}
		if s.h.less(s.h.idx[0], int32(i)) {
			s.h.idx[0] = int32(i)
			heap.Fix(&s.h, 0)
		}
	}
	out := s.h.idx
	sort.Slice(out, func(a, b int) bool { return s.h.less(out[b], out[a]) })
	return out
}

// idxHeap is a min-heap of token ids by logit (the weakest kept token on top).
type idxHeap struct {
	logits []float32
	idx    []int32
}

// less orders a before b when a is the weaker token.
func (h *idxHeap) less(a, b int32) bool {
	if h.logits[a] != h.logits[b] {
		return h.logits[a] < h.logits[b]
	}
	return a > b
}

func (h *idxHeap) Len() int           { return len(h.idx) }
func (h *idxHeap) Less(i, j int) bool { return h.less(h.idx[i], h.idx[j]) }
func (h *idxHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *idxHeap) Push(x any)         { h.idx = append(h.idx, x.(int32)) }
func (h *idxHeap) Pop() any {
	n := len(h.idx) - 1
	x := h.idx[n]
	h.idx = h.idx[:n]
	return x
}
