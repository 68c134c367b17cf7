package sched

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// The generator is pinned: the device kernel computes the same function,
// so any change here must change both.
func TestSampleUniformIsPinned(t *testing.T) {
	if got := SplitMix64(0); got != 0xe220a8397b1dcdaf {
		t.Fatalf("SplitMix64(0) = %#x, want 0xe220a8397b1dcdaf", got)
	}
	h := SplitMix64(42 ^ SplitMix64(7))
	if got, want := SampleUniform(42, 7), float32(h>>40)/16777216; got != want {
		t.Fatalf("SampleUniform(42, 7) = %v, want %v", got, want)
	}
	seen := map[float32]bool{}
	for c := range uint64(1000) {
		u := SampleUniform(9, c)
		if u < 0 || u >= 1 {
			t.Fatalf("SampleUniform(9, %d) = %v outside [0, 1)", c, u)
		}
		seen[u] = true
	}
	if len(seen) < 990 {
		t.Fatalf("1000 counters gave only %d distinct draws", len(seen))
	}
}

// keptSet is the device's rule written the slow, obvious way: sort, cut at
// the k-th logit (ties kept), then at the smallest nucleus reaching top_p of
// the top-k mass (ties kept).
func keptSet(row []float32, c TokenChoice) map[int32]bool {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
	tau := float32(math.Inf(-1))
	if k := int(c.TopK); k > 0 && k < len(row) {
		tau = row[idx[k-1]]
	}
	if p := float64(c.TopP); p > 0 && p < 1 {
		mx := float64(row[idx[0]])
		w := func(l float32) float64 { return math.Exp((float64(l) - mx) / float64(c.Temperature)) }
		var z float64
		for _, i := range idx {
			if row[i] >= tau {
				z += w(row[i])
			}
		}
		var acc float64
		for _, i := range idx {
			acc += w(row[i])
			if acc >= p*z {
				tau = max(tau, row[i])
				break
			}
		}
	}
	m := map[int32]bool{}
	for i, l := range row {
		if l >= tau {
			m[int32(i)] = true
		}
	}
	return m
}

// Every draw lands in the kept set, and over many draws every kept token of
// a small set shows up: the filters cut where the rule says, no further.
func TestSamplerKeepsTheDeviceRule(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s Sampler
	for trial := range 60 {
		row := make([]float32, 50+r.IntN(400))
		for i := range row {
			row[i] = float32(r.IntN(40)) / 8 // many ties
		}
		c := TokenChoice{Temperature: 0.3 + r.Float32()*2, Seed: uint64(trial)}
		switch trial % 3 {
		case 0:
			c.TopK = int32(1 + r.IntN(10))
		case 1:
			c.TopP = 0.05 + r.Float32()*0.5
		default:
			c.TopK, c.TopP = int32(2+r.IntN(30)), 0.1+r.Float32()*0.8
		}
		want := keptSet(row, c)
		got := map[int32]bool{}
		for step := range uint64(3000) {
			c.Step = step
			tok := s.Sample(row, c)
			if !want[tok] {
				t.Fatalf("trial %d %+v: drew %d (logit %v) outside the kept set of %d", trial, c, tok, row[tok], len(want))
			}
			got[tok] = true
		}
		if len(want) <= 8 && len(got) != len(want) {
			t.Errorf("trial %d %+v: drew %d distinct of %d kept tokens", trial, c, len(got), len(want))
		}
	}
}

func TestSamplerDistributionAndFilters(t *testing.T) {
	var s Sampler
	step := uint64(0)
	// ch is the n-th draw of one seeded stream.
	ch := func(p Sampling) TokenChoice { step++; return p.choice(1, step) }
	// Two live tokens with probabilities 1/3 and 2/3 at temperature 1.
	logits := []float32{0, float32(math.Log(2)), float32(math.Inf(-1)), float32(math.NaN())}
	counts := make([]int, 4)
	const n = 6000
	for range n {
		counts[s.Sample(logits, ch(Sampling{Temperature: 1}))]++
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
		tok := s.Sample(wide, ch(Sampling{Temperature: 5, TopK: 20}))
		if wide[tok] < 9.9-0.05 { // the top 20 are the ten 9.9s and ten 9.8s
			if wide[tok] < 9.8-0.05 {
				t.Fatalf("top_k=20 sampled token %d with logit %v", tok, wide[tok])
			}
		}
	}
	// A tiny nucleus keeps only the best logit (all ten tokens tied at it,
	// as the device does).
	best := wide[argmax(wide)]
	for range 200 {
		if tok := s.Sample(wide, ch(Sampling{Temperature: 1, TopP: 1e-9})); wide[tok] != best {
			t.Fatalf("top_p=1e-9 sampled %d with logit %v, want one tied at %v", tok, wide[tok], best)
		}
	}
	// A wide nucleus (needing more than the first 64 candidates) still
	// samples beyond the head.
	flat := make([]float32, 1000)
	seen := map[int32]bool{}
	for range 300 {
		seen[s.Sample(flat, ch(Sampling{Temperature: 1, TopP: 0.9}))] = true
	}
	if len(seen) < 150 {
		t.Fatalf("top_p=0.9 over a flat distribution hit only %d tokens", len(seen))
	}
	if tok := s.Sample([]float32{float32(math.NaN()), float32(math.NaN())}, ch(Sampling{Temperature: 1})); tok != 0 {
		t.Fatalf("all-NaN row gave %d", tok)
	}
	if tok := s.Sample([]float32{1, 3, 3, 2}, ch(Sampling{})); tok != 1 {
		t.Fatalf("greedy tie gave %d, want the first maximum", tok)
	}
}

func BenchmarkSampleTopP(b *testing.B) {
	var s Sampler
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(i%977) / 100
	}
	b.ResetTimer()
	for i := range b.N {
		s.Sample(logits, TokenChoice{Temperature: 0.7, TopP: 0.9, Seed: 1, Step: uint64(i)})
	}
}

// BenchmarkSampleTopPPeaked is the common case: a peaked distribution whose
// nucleus lies inside the first candidates.
func BenchmarkSampleTopPPeaked(b *testing.B) {
	var s Sampler
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32((i*7919)%151936) / 151936 * 4
	}
	for i := range 20 {
		logits[i*1000] = 20 - float32(i)
	}
	b.ResetTimer()
	for i := range b.N {
		s.Sample(logits, TokenChoice{Temperature: 0.7, TopP: 0.9, Seed: 1, Step: uint64(i)})
	}
}
