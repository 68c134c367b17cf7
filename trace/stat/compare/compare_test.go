package compare

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// Exact p-values checked by hand (and equal to scipy.stats.mannwhitneyu's
// method="exact"): complete separation of 5 and 5 is 2 of the C(10,5) =
// 252 splits; [1 2 4] against [3 5 6] has rank sum 14 for y, and 4 of the
// 20 splits of 1..6 into three lie as far from the mean 10.5 (sums 6, 7,
// 14, 15).
func TestMannWhitneyKnownValues(t *testing.T) {
	cases := []struct {
		name  string
		x, y  []float64
		u, p  float64
		exact bool
	}{
		{"5v5 separated", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 25, 2.0 / 252, true},
		{"5v5 separated, reversed", []float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 0, 2.0 / 252, true},
		{"3v3 interleaved", []float64{1, 2, 4}, []float64{3, 5, 6}, 8, 4.0 / 20, true},
		{"3v3 separated", []float64{1, 2, 3}, []float64{4, 5, 6}, 9, 2.0 / 20, true},
		{"2v2 separated", []float64{1, 2}, []float64{3, 4}, 4, 2.0 / 6, true},
		{"1v1", []float64{100}, []float64{300}, 1, 1, true},
		{"identical", []float64{5, 5, 5, 5}, []float64{5, 5, 5, 5}, 8, 1, true},
		// Ties across the sides: midranks 1, 2, 3.5, 3.5, 5, 6; y's sum
		// 3.5+5+6 = 14.5. Of the 20 splits (each tied value counted
		// separately), those with a sum ≥ 14.5 or ≤ 6.5 (mean 10.5 ± 4):
		// {3.5,5,6}×2 and {1,2,3.5}×2 → 4 of 20.
		{"3v3 with a tie", []float64{1, 2, 4}, []float64{4, 5, 6}, 8.5, 4.0 / 20, true},
	}
	for _, c := range cases {
		u, p, exact := MannWhitney(c.x, c.y)
		if u != c.u || !near(p, c.p, 1e-12) || exact != c.exact {
			t.Errorf("%s: U %v p %v exact %v, want %v %v %v", c.name, u, p, exact, c.u, c.p, c.exact)
		}
	}
}

// bruteP enumerates every split of the pooled sample into groups of the
// two sizes: an implementation of the exact p-value independent of the
// subset-sum table.
func bruteP(x, y []float64) float64 {
	pool := append(slices.Clone(x), y...)
	n, k := len(pool), len(y)
	rank := make([]float64, n)
	for i, v := range pool {
		less, equal := 0, 0
		for _, w := range pool {
			if w < v {
				less++
			} else if w == v {
				equal++
			}
		}
		rank[i] = float64(less) + float64(equal+1)/2
	}
	mean := float64(k*(n+1)) / 2
	var obs float64
	for i := len(x); i < n; i++ {
		obs += rank[i]
	}
	dev := math.Abs(obs - mean)
	hit, all := 0, 0
	for mask := 0; mask < 1<<n; mask++ {
		if popcount(mask) != k {
			continue
		}
		var s float64
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				s += rank[i]
			}
		}
		all++
		if math.Abs(s-mean) >= dev-1e-9 {
			hit++
		}
	}
	return float64(hit) / float64(all)
}

func popcount(v int) int {
	c := 0
	for ; v != 0; v &= v - 1 {
		c++
	}
	return c
}

// The subset-sum table agrees with enumeration on random small samples
// drawn from a coarse grid, so that ties are common (as with a timer that
// reports whole milliseconds).
func TestExactPMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n1, n2 := 1+rng.IntN(7), 1+rng.IntN(7)
		x, y := make([]float64, n1), make([]float64, n2)
		for i := range x {
			x[i] = float64(rng.IntN(6))
		}
		for i := range y {
			y[i] = float64(rng.IntN(6) + rng.IntN(3))
		}
		_, p, _ := MannWhitney(x, y)
		if want := bruteP(x, y); !near(p, want, 1e-12) {
			t.Fatalf("x %v y %v: p %v, enumeration %v", x, y, p, want)
		}
	}
}

// Just past ExactLimit the normal approximation takes over; there it must
// agree with the exact distribution it replaces where verdicts are made
// (p around 0.01–0.3; far in the tail its relative error grows, but a p of
// 0.0005 against 0.0007 decides nothing differently).
func TestNormalApproximationNearExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 5; trial++ {
		x, y := make([]float64, 31), make([]float64, 31)
		for i := range x {
			x[i] = rng.NormFloat64()
			y[i] = rng.NormFloat64() + 0.4
		}
		_, p, exact := MannWhitney(x, y)
		if exact {
			t.Fatal("62 values should use the approximation")
		}
		r2, _ := doubledMidranks(x, y)
		w2 := 0
		for _, r := range r2[len(x):] {
			w2 += r
		}
		want := exactP(r2, len(y), w2)
		if math.Abs(p-want) > 0.005 {
			t.Errorf("approximate p %v, exact %v", p, want)
		}
	}
}

func TestMinPAndSizeNeeded(t *testing.T) {
	for _, c := range []struct {
		n1, n2 int
		want   float64
	}{{1, 1, 1}, {2, 2, 1.0 / 3}, {3, 3, 0.1}, {4, 4, 2.0 / 70}, {5, 5, 2.0 / 252}, {3, 5, 2.0 / 56}, {0, 5, 1}} {
		if got := MinP(c.n1, c.n2); !near(got, c.want, 1e-15) {
			t.Errorf("MinP(%d,%d) = %v, want %v", c.n1, c.n2, got, c.want)
		}
	}
	for _, c := range []struct {
		level float64
		want  int
	}{{0.05, 4}, {0.05 / 6, 5}, {0.01, 5}, {0.001, 7}} {
		if got := SizeNeeded(c.level); got != c.want {
			t.Errorf("SizeNeeded(%v) = %d, want %d", c.level, got, c.want)
		}
	}
}

// The interval of 5 against 5 at 95% is [D(3), D(23)] of the 25 sorted
// differences (Hollander & Wolfe's table: P(U ≤ 2) = 4/252 ≤ 0.025 <
// P(U ≤ 3) = 7/252), with confidence 1 − 8/252.
func TestHodgesLehmannKnownInterval(t *testing.T) {
	shift, lo, hi, level := HodgesLehmann([]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 0.95)
	// Differences 5 + (j − i): 1×1, 2×2, 3×3, 4×4, 5×5, 6×4, 7×3, 8×2, 9×1.
	if shift != 5 || lo != 2 || hi != 8 || !near(level, 1-8.0/252, 1e-12) {
		t.Fatalf("shift %v [%v, %v] at %v", shift, lo, hi, level)
	}
	// Three per side cannot give 95% (P(U = 0) = 1/20 > 0.025): no
	// interval, the estimate alone.
	shift, lo, hi, level = HodgesLehmann([]float64{1, 2, 3}, []float64{11, 12, 13}, 0.95)
	if shift != 10 || lo != 10 || hi != 10 || level != 0 {
		t.Fatalf("3v3: shift %v [%v, %v] at %v", shift, lo, hi, level)
	}
	// … but 90% it can: [D(1), D(9)].
	_, lo, hi, level = HodgesLehmann([]float64{1, 2, 3}, []float64{11, 12, 13}, 0.90)
	if lo != 8 || hi != 12 || !near(level, 0.9, 1e-12) {
		t.Fatalf("3v3 at 90%%: [%v, %v] at %v", lo, hi, level)
	}
}

// One outlier moves the mean difference by ~200 but the Hodges–Lehmann
// shift not at all: the median of the 25 differences is 10 (worked out
// by hand in the comment of the differences).
func TestHodgesLehmannIgnoresOutlier(t *testing.T) {
	// Differences for y = 20..23 run 6..13 (20 of them, the 13th smallest
	// is 10); the five of y = 1000 are 986..990.
	shift, lo, hi, _ := HodgesLehmann([]float64{10, 11, 12, 13, 14}, []float64{20, 21, 22, 23, 1000}, 0.95)
	if shift != 10 || lo > 10 || hi < 10 {
		t.Fatalf("shift %v [%v, %v]", shift, lo, hi)
	}
}

func TestHolm(t *testing.T) {
	got := Holm([]float64{0.01, 0.04, 0.03, 0.005})
	// Sorted 0.005·4, 0.01·3, 0.03·2, 0.04·1 → 0.02, 0.03, 0.06, max(0.06, 0.04).
	want := []float64{0.03, 0.06, 0.06, 0.02}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Fatalf("Holm = %v, want %v", got, want)
		}
	}
	if got := Holm([]float64{0.9, 0.8}); got[0] != 1 || got[1] != 1 {
		t.Fatalf("capped at 1: %v", got)
	}
}

// The test's size and the interval's coverage, by simulation with a fixed
// seed (so the counts are the same on every run): with no difference,
// 5 against 5 calls p ≤ 0.05 at most at the exact rate 8/252 of U ≤ 2 or
// U ≥ 23; with a known shift under heavy-tailed (lognormal) noise, the
// interval contains it at least as often as its achieved level says, less
// the simulation's own error.
func TestSizeAndCoverageBySimulation(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	draw := func(n int, shift float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 300*math.Exp(0.3*rng.NormFloat64()) + shift
		}
		return v
	}
	const trials = 4000
	falsePos, covered := 0, 0
	var level float64
	for i := 0; i < trials; i++ {
		if r := Compare(draw(5, 0), draw(5, 0), 0.95); r.P <= 0.05 {
			falsePos++
		}
		r := Compare(draw(5, 0), draw(5, 60), 0.95)
		level = r.Level
		if r.Lo <= 60 && 60 <= r.Hi {
			covered++
		}
	}
	// Binomial standard error at 4000 trials: ~0.3% around 3.2%, ~0.3%
	// around 96.8%.
	if rate := float64(falsePos) / trials; rate > 8.0/252+0.01 {
		t.Errorf("false positive rate %.3f above the exact size %.3f", rate, 8.0/252)
	}
	if cov := float64(covered) / trials; cov < level-0.01 {
		t.Errorf("coverage %.3f below the achieved level %.3f", cov, level)
	}
}

func TestCompareEdges(t *testing.T) {
	if r := Compare(nil, []float64{1}, 0.95); r.P != 1 || r.Level != 0 || r.MinP != 1 {
		t.Fatalf("empty base: %+v", r)
	}
	r := Compare([]float64{200}, []float64{900}, 0.95)
	if r.P != 1 || r.Shift != 700 || r.Level != 0 || r.MinP != 1 {
		t.Fatalf("1v1: %+v", r)
	}
	// thin keeps the extremes and the order.
	v := make([]float64, 5000)
	for i := range v {
		v[i] = float64(4999 - i)
	}
	th := thin(v)
	if len(th) != 2048 || th[0] != 0 || th[len(th)-1] != 4999 || !slices.IsSorted(th) {
		t.Fatalf("thin: %d values, %v … %v", len(th), th[0], th[len(th)-1])
	}
}
