package sched

import (
	"fmt"
	"math"
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

// choice is the TokenChoice for the token at index step of a request's
// output under these parameters and the request's effective seed.
func (p Sampling) choice(seed, step uint64) TokenChoice {
	return TokenChoice{
		Temperature: float32(p.Temperature),
		TopK:        int32(min(p.TopK, math.MaxInt32)),
		TopP:        float32(p.TopP),
		Seed:        seed,
		Step:        step,
	}
}

// Greedy reports whether c reduces to argmax: no positive temperature, or
// top-k of one.
func (c TokenChoice) Greedy() bool { return !(c.Temperature > 0) || c.TopK == 1 }

// Sampler draws tokens from rows of logits on the host, by the same rule as
// the device kernel (sample_f32 in engine/cuda/kernels): temperature, then
// a top-k threshold (ties at the k-th logit kept), then the top-p nucleus
// renormalised over the top-k survivors (ties at the cut kept), then one
// uniform draw from SampleUniform(Seed, Step) walked over the kept tokens
// in index order. A backend without device sampling gets the same tokens as
// one with it, up to float rounding at a boundary. A Sampler keeps scratch
// space between calls; it is not safe for concurrent use.
type Sampler struct {
	h    idxHeap
	kept []int32
	w    []float64
}

// Sample draws the token c chooses from logits. NaN logits are never
// chosen; a row of only NaNs or -Infs yields argmax's answer rather than a
// panic (the backend is reporting garbage and the output will show it).
func (s *Sampler) Sample(logits []float32, c TokenChoice) int32 {
	V := len(logits)
	if V == 0 {
		return 0
	}
	if c.Greedy() {
		return argmax(logits)
	}
	maxL := math.Inf(-1)
	for _, l := range logits {
		if float64(l) > maxL {
			maxL = float64(l)
		}
	}
	if math.IsInf(maxL, -1) {
		return argmax(logits)
	}
	invT := 1 / float64(c.Temperature)
	weight := func(l float32) float64 { return math.Exp((float64(l) - maxL) * invT) }
	// Tokens with a logit >= tau are kept (a NaN compares false: never).
	tau := float32(math.Inf(-1))
	k := int(c.TopK)
	topK := k > 0 && k < V
	topP := float64(c.TopP)
	if topP <= 0 || topP >= 1 {
		topP = 1
	}
	if topK || topP < 1 {
		// Only the head of the distribution matters, so select it with a
		// bounded heap instead of sorting the whole vocabulary (151k
		// entries for Qwen, every step, for every sequence).
		h := k
		if !topK {
			h = min(64, V)
		}
		for {
			idx := s.top(logits, h)
			if len(idx) == 0 {
				return argmax(logits)
			}
			if topK {
				tau = logits[idx[len(idx)-1]]
			}
			if topP == 1 {
				break
			}
			var z float64
			for _, l := range logits {
				if l >= tau {
					z += weight(l)
				}
			}
			need := topP * z
			var acc float64
			cut, found := tau, false
			for _, i := range idx {
				acc += weight(logits[i])
				if acc >= need {
					cut, found = logits[i], true
					break
				}
			}
			if !found && !topK && h < V {
				h *= 8
				if h*4 > V {
					h = V // selecting most of it: take all
				}
				continue // the nucleus is wider than the head we took
			}
			tau = max(tau, cut)
			break
		}
	}
	s.kept, s.w = s.kept[:0], s.w[:0]
	var total float64
	for i, l := range logits {
		if !(l >= tau) {
			continue
		}
		if w := weight(l); w > 0 {
			s.kept = append(s.kept, int32(i))
			s.w = append(s.w, w)
			total += w
		}
	}
	if len(s.kept) == 0 {
		return argmax(logits)
	}
	target := float64(SampleUniform(c.Seed, c.Step)) * total
	var acc float64
	for j, w := range s.w {
		acc += w
		if acc > target {
			return s.kept[j]
		}
	}
	return s.kept[len(s.kept)-1] // rounding pushed the target past the end
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
func (s *Sampler) top(logits []float32, k int) []int32 {
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

// logprob is the natural-log probability of token tok under the softmax of
// row (temperature 1, no filters: what OpenAI's logprobs report). NaN
// entries count as absent.
func logprob(row []float32, tok int32) float32 {
	if tok < 0 || int(tok) >= len(row) {
		return float32(math.NaN())
	}
	maxL := math.Inf(-1)
	for _, l := range row {
		if float64(l) > maxL {
			maxL = float64(l)
		}
	}
	var z float64
	for _, l := range row {
		if l == l {
			z += math.Exp(float64(l) - maxL)
		}
	}
	return float32(float64(row[tok]) - maxL - math.Log(z))
}
