package sched

import (
	"math"
	"testing"
)

func TestSamplerDistributionAndFilters(t *testing.T) {
	var s sampler
	rng := newRNG(1)
	// Two live tokens with probabilities 1/3 and 2/3 at temperature 1.
	logits := []float32{0, float32(math.Log(2)), float32(math.Inf(-1)), float32(math.NaN())}
	counts := make([]int, 4)
	const n = 6000
	for range n {
		counts[s.sample(logits, Sampling{Temperature: 1}, rng)]++
	}
	if p := float64(counts[1]) / n; math.Abs(p-2.0/3) > 0.04 {
		t.Fatalf("P(token 1) = %.3f, want 0.667 (counts %v)", p, counts)
	}
	if counts[2]+counts[3] != 0 {
		t.Fatalf("sampled -Inf or NaN logits: %v", counts)
	}
	wide := make([]float32, 1000)
	for i := range wide {
		wide[i] = float32(i%100) / 10
	}
	for range 300 {
		tok := s.sample(wide, Sampling{Temperature: 5, TopK: 20}, rng)
		if wide[tok] < 9.9-0.05 { // the top 20 are the ten 9.9s and ten 9.8s
			if wide[tok] < 9.8-0.05 {
				t.Fatalf("top_k=20 sampled token %d with logit %v", tok, wide[tok])
			}
		}
	}
	// A tiny nucleus keeps only the single best token: greedy.
	best := argmax(wide)
	for range 200 {
		if tok := s.sample(wide, Sampling{Temperature: 1, TopP: 1e-9}, rng); tok != best {
			t.Fatalf("top_p=1e-9 sampled %d, want %d", tok, best)
		}
	}
	// A wide nucleus (needing more than the first 64 candidates) still
	// samples beyond the head.
	flat := make([]float32, 1000)
	seen := map[int32]bool{}
	for range 300 {
		seen[s.sample(flat, Sampling{Temperature: 1, TopP: 0.9}, rng)] = true
	}
	if len(seen) < 150 {
		t.Fatalf("top_p=0.9 over a flat distribution hit only %d tokens", len(seen))
	}
	if tok := s.sample([]float32{float32(math.NaN()), float32(math.NaN())}, Sampling{Temperature: 1}, rng); tok != 0 {
		t.Fatalf("all-NaN row gave %d", tok)
	}
	if tok := s.sample([]float32{1, 3, 3, 2}, Sampling{}, nil); tok != 1 {
		t.Fatalf("greedy tie gave %d, want the first maximum", tok)
	}
}

func BenchmarkSampleTopP(b *testing.B) {
	var s sampler
	rng := newRNG(1)
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(i%977) / 100
	}
	b.ResetTimer()
	for range b.N {
		s.sample(logits, Sampling{Temperature: 0.7, TopP: 0.9}, rng)
	}
}

// BenchmarkSampleTopPPeaked is the common case: a peaked distribution whose
// nucleus lies inside the first candidates.
func BenchmarkSampleTopPPeaked(b *testing.B) {
	var s sampler
	rng := newRNG(1)
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32((i*7919)%151936) / 151936 * 4
	}
	for i := range 20 {
		logits[i*1000] = 20 - float32(i)
	}
	b.ResetTimer()
	for range b.N {
		s.sample(logits, Sampling{Temperature: 0.7, TopP: 0.9}, rng)
	}
}
