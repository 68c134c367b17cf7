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
	// LogitBias adds its value to the logit of each token id it names,
	// before anything else (logit_bias of OpenAI and vLLM). Submit refuses
	// ids outside the vocabulary.
	LogitBias map[int32]float32
	// MinP drops, after temperature, every token whose probability is
	// below MinP times the most likely token's (vLLM's min_p); 0 keeps
	// all. Like vLLM's, it leaves a greedy choice alone.
	MinP float64
	// RepetitionPenalty, unless 0 (unset) or 1, divides the positive
	// logits and multiplies the negative ones of every token already in
	// the prompt or the output (repetition_penalty of transformers and
	// vLLM): above 1 it discourages repeats, below 1 it favours them.
	RepetitionPenalty float64
}

// NeedsRow reports whether a draw under p needs the row of logits in host
// memory: logit_bias, min_p and repetition_penalty are applied by
// Sampler.SampleRequest on the host, on every backend, and never by a
// device's own sampler (TokenBackend).
func (p Sampling) NeedsRow() bool {
	return len(p.LogitBias) > 0 || p.MinP > 0 || (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1)
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
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("min_p %v is outside [0, 1]; use 0 to keep every token", p.MinP)
	case math.IsNaN(p.RepetitionPenalty) || math.IsInf(p.RepetitionPenalty, 0) || p.RepetitionPenalty < 0:
		return fmt.Errorf("repetition_penalty %v is not a positive number; use 1 to leave repeats alone", p.RepetitionPenalty)
	}
	for id, b := range p.LogitBias {
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return fmt.Errorf("logit_bias of token %d is %v, not a finite number", id, b)
		}
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
	// row is SampleRequest's copy of the logits; seen[t] == epoch marks
	// a token already penalised in the current call.
	row   []float32
	seen  []uint32
	epoch uint32
}

// SampleRequest draws the token c chooses from logits under the
// processors of p that a device sampler lacks (p.NeedsRow), in vLLM's
// order: logit_bias is added; repetition_penalty is applied once to each
// distinct token of history (the prompt and the output so far); then,
// unless c is greedy, min_p removes the tokens it cuts after temperature;
// then Sample's top-k, top-p and draw. logits is left as it was (logprobs
// are of the model's own distribution): the work is done on a copy.
func (s *Sampler) SampleRequest(logits []float32, c TokenChoice, p Sampling, history []int32) int32 {
	V := len(logits)
	s.row = append(s.row[:0], logits...)
	row := s.row
	for id, b := range p.LogitBias {
		if id >= 0 && int(id) < V {
			row[id] += b
		}
	}
	if rp := float32(p.RepetitionPenalty); rp != 0 && rp != 1 {
		if len(s.seen) < V {
			s.seen = make([]uint32, V)
		}
		s.epoch++
		if s.epoch == 0 { // wrapped: old marks could collide
			clear(s.seen)
			s.epoch = 1
		}
		for _, t := range history {
			if t < 0 || int(t) >= V || s.seen[t] == s.epoch {
				continue
			}
			s.seen[t] = s.epoch
			if row[t] > 0 {
				row[t] /= rp
			} else {
				row[t] *= rp
			}
		}
	}
	if p.MinP > 0 && !c.Greedy() {
		// A token's probability relative to the most likely one is
		// exp((l − max) / T): it is kept when that is at least MinP.
		maxL := math.Inf(-1)
		for _, l := range row {
			if float64(l) > maxL {
				maxL = float64(l)
			}
		}
		if !math.IsInf(maxL, -1) {
			cut := maxL + float64(c.Temperature)*math.Log(p.MinP)
			for i, l := range row {
				if float64(l) < cut {
					row[i] = float32(math.Inf(-1))
				}
			}
		}
	}
	return s.Sample(row, c)
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
