package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
		// Plain temperature sampling: the weights are kept from the
		// pass that sums them (exp is most of the cost), then drawn.
		s.probs = s.probs[:0]
		var z float64
		for _, l := range logits {
			w := weight(l)
			s.probs = append(s.probs, w)
			z += w
		}
		u := rng.Float64() * z
		var acc float64
		last := int32(0)
		for i, w := range s.probs {
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
					k *= 8
					if k*4 > len(logits) {
						k = len(logits) // selecting most of it: take all
					}
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
// lower index (so the result is deterministic). It keeps a bounded min-heap
// of the best k seen so far: O(V log k) without allocating.
func (s *sampler) top(logits []float32, k int) []int32 {
	h := &s.h
	h.logits, h.idx = logits, h.idx[:0]
	for i, l := range logits {
		if l != l {
			continue
		}
		if k >= len(logits) {
			h.idx = append(h.idx, int32(i)) // everything: sort below
			continue
		}
		if len(h.idx) < k {
			h.idx = append(h.idx, int32(i))
			h.up(len(h.idx) - 1)
			continue
		}
		if h.less(h.idx[0], int32(i)) {
			h.idx[0] = int32(i)
			h.down(0)
		}
	}
	out := h.idx
	slices.SortFunc(out, func(a, b int32) int {
		if h.less(b, a) {
			return -1
		}
		if a == b {
			return 0
		}
		return 1
	})
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

func (h *idxHeap) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !h.less(h.idx[j], h.idx[p]) {
			return
		}
		h.idx[j], h.idx[p] = h.idx[p], h.idx[j]
		j = p
	}
}

func (h *idxHeap) down(j int) {
	n := len(h.idx)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(h.idx[r], h.idx[l]) {
			m = r
		}
		if !h.less(h.idx[m], h.idx[j]) {
			return
		}
		h.idx[j], h.idx[m] = h.idx[m], h.idx[j]
		j = m
	}
}
