package sched

import (
	"math"
	"math/rand/v2"
	"slices"
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

// rowOf is a row of small distinct logits with the given ones set.
func rowOf(n int, set map[int]float32) []float32 {
	row := make([]float32, n)
	for i := range row {
		row[i] = float32(i%7) / 10
	}
	for i, v := range set {
		row[i] = v
	}
	return row
}

// TestSampleRequestProcessors: each processor changes the draw as vLLM's
// does, and the caller's row is left as it was.
func TestSampleRequestProcessors(t *testing.T) {
	var s Sampler
	greedy := TokenChoice{}
	t.Run("logit_bias wins at temperature 0", func(t *testing.T) {
		row := rowOf(200, map[int]float32{3: 9})
		orig := append([]float32(nil), row...)
		if got := s.SampleRequest(row, greedy, Sampling{LogitBias: map[int32]float32{100: 100}}, nil); got != 100 {
			t.Fatalf("logit_bias {100: 100} at temperature 0 chose %d", got)
		}
		if got := s.SampleRequest(row, greedy, Sampling{LogitBias: map[int32]float32{3: -100}}, nil); got == 3 {
			t.Fatalf("logit_bias {3: -100} still chose 3")
		}
		if !slices.Equal(row, orig) {
			t.Fatal("SampleRequest changed the caller's row")
		}
	})
	t.Run("repetition_penalty divides positive, multiplies negative, once per token", func(t *testing.T) {
		// Token 5 at 4 appears three times: divided once by 2 it is 2,
		// still above token 7's 1.5 (three times would be 0.5).
		row := rowOf(20, map[int]float32{5: 4, 7: 1.5})
		p := Sampling{RepetitionPenalty: 2}
		if got := s.SampleRequest(row, greedy, p, []int32{5, 5, 5}); got != 5 {
			t.Fatalf("penalised once, 5 should stay ahead of 7; chose %d", got)
		}
		row = rowOf(20, map[int]float32{5: 2.5, 7: 1.5})
		if got := s.SampleRequest(row, greedy, p, []int32{1, 5}); got != 7 {
			t.Fatalf("5 (2.5) penalised by 2 is 1.25 < 7's 1.5; chose %d", got)
		}
		// All negative: the seen token's -1 becomes -2, below -1.5.
		row = make([]float32, 4)
		copy(row, []float32{-1, -1.5, -3, -4})
		if got := s.SampleRequest(row, greedy, p, []int32{0}); got != 1 {
			t.Fatalf("negative logit of a seen token multiplied by 2 (-2 < -1.5); chose %d", got)
		}
		if got := s.SampleRequest(row, greedy, Sampling{RepetitionPenalty: 0.5}, []int32{1}); got != 1 {
			t.Fatalf("a penalty below 1 favours the seen token (-0.75 > -1); chose %d", got)
		}
	})
	t.Run("min_p cuts relative to the most likely token, after temperature", func(t *testing.T) {
		// Relative probabilities 1, 0.5, 0.1, 0.05 at temperature 1;
		// their square roots (1, 0.71, 0.32, 0.22) at temperature 2.
		row := []float32{0, float32(math.Log(0.5)), float32(math.Log(0.1)), float32(math.Log(0.05))}
		for _, c := range []struct {
			temp, minP float64
			kept       []int32
		}{
			{1, 0.2, []int32{0, 1}},
			{1, 0.08, []int32{0, 1, 2}},
			{2, 0.2, []int32{0, 1, 2, 3}},
			{2, 0.25, []int32{0, 1, 2}},
		} {
			seen := map[int32]int{}
			for step := range uint64(2000) {
				seen[s.SampleRequest(row, TokenChoice{Temperature: float32(c.temp), Seed: 3, Step: step}, Sampling{Temperature: c.temp, MinP: c.minP}, nil)]++
			}
			for tok := range seen {
				if !slices.Contains(c.kept, tok) {
					t.Errorf("temperature %v, min_p %v: drew %d, which min_p drops", c.temp, c.minP, tok)
				}
			}
			for _, tok := range c.kept {
				if seen[tok] == 0 {
					t.Errorf("temperature %v, min_p %v: never drew %d in 2000 draws, which min_p keeps", c.temp, c.minP, tok)
				}
			}
		}
		// min_p leaves a greedy choice alone.
		if got := s.SampleRequest(row, greedy, Sampling{MinP: 1}, nil); got != 0 {
			t.Fatalf("greedy with min_p chose %d", got)
		}
	})
}
