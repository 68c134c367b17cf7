// Package compare tells whether two small samples of timings differ: the
// Mann–Whitney U test (exact p-values for small samples, with ties), the
// Hodges–Lehmann estimate of the shift between them with its
// distribution-free confidence interval, and Holm's correction for a family
// of such tests. It is the statistics under `treni-top diff`; docs/DIFF.md
// says why these were chosen (a handful of cold starts per side, heavy
// tails, ties from coarse timers) and how diff turns them into verdicts.
//
// Every function is pure and deterministic: no resampling, no seeds.
package compare

import (
	"math"
	"slices"
)

// ExactLimit is the largest pooled sample size (base + new) whose p-value
// and interval come from the exact permutation distribution; larger ones
// use the normal approximation, which is accurate there (the exact
// computation costs about N⁴/2 additions: 6.5 million at 60).
const ExactLimit = 60

// maxPairs bounds the pairwise differences the Hodges–Lehmann estimate
// sorts (32 MiB of float64). Larger samples are thinned to evenly spaced
// order statistics first; diff never comes near it (one value per run).
const maxPairs = 1 << 22

// Result compares a base sample with a new one. Shift and its interval are
// new − base, in the samples' unit.
type Result struct {
	NBase int `json:"n_base"`
	NNew  int `json:"n_new"`
	// U counts the (base, new) pairs in which new is larger, a tie counting
	// one half: n_base·n_new when every new value is larger.
	U float64 `json:"u"`
	// P is the two-sided p-value of the Mann–Whitney U test.
	P float64 `json:"p"`
	// Exact says P (and the interval) come from the exact permutation
	// distribution rather than the normal approximation.
	Exact bool `json:"exact"`
	// MinP is the smallest p-value samples of these sizes can give (all
	// of one side above all of the other, no ties): when it exceeds the
	// significance level no outcome can be significant.
	MinP float64 `json:"min_p"`
	// Shift is the Hodges–Lehmann estimate: the median of every
	// difference new[j] − base[i].
	Shift float64 `json:"shift"`
	// Lo and Hi bound Shift with confidence Level (the level the sizes
	// achieve, at least the one asked for); Level is 0 when samples this
	// small cannot give an interval at the level asked.
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Level float64 `json:"level"`
}

// Compare runs the test and the estimate on base and new (finite values;
// neither is modified). level is the confidence asked of the interval
// (0.95). Either sample empty gives a Result with P = 1 and no interval.
func Compare(base, new []float64, level float64) Result {
	r := Result{NBase: len(base), NNew: len(new), P: 1, MinP: MinP(len(base), len(new))}
	if len(base) == 0 || len(new) == 0 {
		return r
	}
	r.U, r.P, r.Exact = MannWhitney(base, new)
	r.Shift, r.Lo, r.Hi, r.Level = HodgesLehmann(base, new, level)
	return r
}

// MannWhitney returns U (the pairs in which y is larger than x, ties
// counting one half) and the two-sided p-value of the Mann–Whitney U test
// of x against y. Up to ExactLimit values in all, p is exact: the share of
// the C(N, n) ways to split the pooled midranks into two groups of these
// sizes whose rank sum lies at least as far from its mean as the one
// observed (conditional on the ties, so it stays exact with ties). Beyond,
// the normal approximation with the tie correction of the variance and a
// continuity correction. Empty input gives p = 1.
func MannWhitney(x, y []float64) (u, p float64, exact bool) {
	if len(x) == 0 || len(y) == 0 {
		return 0, 1, false
	}
	r2, ties := doubledMidranks(x, y)
	n1, n2 := len(x), len(y)
	n := n1 + n2
	w2 := 0 // doubled rank sum of y
	for _, r := range r2[n1:] {
		w2 += r
	}
	u = float64(w2)/2 - float64(n2*(n2+1))/2
	if ties == n {
		// Every value equal: nothing to tell apart.
		return u, 1, n <= ExactLimit
	}
	if n <= ExactLimit {
		return u, exactP(r2, n2, w2), true
	}
	// Normal approximation.
	mu := float64(n1*n2) / 2
	var tieSum float64
	for _, t := range tieGroups(x, y) {
		tieSum += float64(t*t*t - t)
	}
	nf := float64(n)
	sigma := math.Sqrt(float64(n1*n2) / 12 * ((nf + 1) - tieSum/(nf*(nf-1))))
	if sigma == 0 {
		return u, 1, false
	}
	z := math.Max(0, math.Abs(u-mu)-0.5) / sigma
	return u, math.Min(1, math.Erfc(z/math.Sqrt2)), false
}

// MinP is the smallest two-sided p-value the exact test can give for
// samples of sizes n1 and n2: 2 ÷ C(n1+n2, n1), at most 1. One value per
// side gives 1, two per side 1/3, three 1/10, four 1/35, five 1/126.
func MinP(n1, n2 int) float64 {
	if n1 == 0 || n2 == 0 {
		return 1
	}
	return math.Min(1, 2/binomial(n1+n2, n1))
}

// SizeNeeded is the smallest n such that n values on each side can reach a
// two-sided p-value ≤ level (MinP(n, n) ≤ level): 4 for 0.05, 5 for
// 0.05/6.
func SizeNeeded(level float64) int {
	if level <= 0 {
		return 0
	}
	for n := 1; n < 1000; n++ {
		if MinP(n, n) <= level {
			return n
		}
	}
	return 0
}

// HodgesLehmann returns the Hodges–Lehmann estimate of the shift y − x
// (the median of all pairwise differences y[j] − x[i]) and the
// distribution-free confidence interval [D(k), D(M+1−k)] of the sorted
// differences D, with k the largest rank such that P(U ≤ k−1) ≤ (1−level)/2
// under no difference (Hollander & Wolfe, Nonparametric Statistical
// Methods, §4.3). achieved is that interval's confidence, 1 − 2·P(U ≤ k−1),
// at least level; it is 0 (and lo = hi = shift) when the samples are too
// small for any interval at that level (three per side cannot give 95%).
// Past ExactLimit values, k comes from the normal approximation and
// achieved is level.
func HodgesLehmann(x, y []float64, level float64) (shift, lo, hi, achieved float64) {
	if len(x) == 0 || len(y) == 0 {
		return 0, 0, 0, 0
	}
	xs, ys := x, y
	if len(x)*len(y) > maxPairs {
		xs, ys = thin(x), thin(y)
	}
	diffs := make([]float64, 0, len(xs)*len(ys))
	for _, b := range xs {
		for _, a := range ys {
			diffs = append(diffs, a-b)
		}
	}
	slices.Sort(diffs)
	m := len(diffs)
	if m%2 == 1 {
		shift = diffs[m/2]
	} else {
		shift = (diffs[m/2-1] + diffs[m/2]) / 2
	}
	k, achieved := intervalRank(len(xs), len(ys), level)
	if k < 1 {
		return shift, shift, shift, 0
	}
	return shift, diffs[k-1], diffs[m-k], achieved
}

// intervalRank is the k of HodgesLehmann and the confidence it achieves;
// k = 0 when no interval reaches level.
func intervalRank(n1, n2 int, level float64) (int, float64) {
	tail := (1 - level) / 2
	if n1+n2 <= ExactLimit {
		// The null distribution of U without ties: rank sums of 1..N,
		// doubled to stay integers like the midranks.
		r2 := make([]int, n1+n2)
		for i := range r2 {
			r2[i] = 2 * (i + 1)
		}
		counts := rankSumCounts(r2, n2)
		var total float64
		for _, c := range counts {
			total += c
		}
		// U = W − n2(n2+1)/2; W2 = 2W starts at n2(n2+1).
		start := n2 * (n2 + 1)
		k, cum, below := 0, 0.0, 0.0
		for u := 0; start+2*u < len(counts); u++ {
			cum += counts[start+2*u]
			if cum/total > tail+1e-12 { // (1 − 0.9)/2 is 0.04999…
				break
			}
			k, below = u+1, cum // P(U ≤ k−1) = below ÷ total
		}
		if k < 1 {
			return 0, 0
		}
		return k, 1 - 2*below/total
	}
	z := math.Sqrt2 * math.Erfinv(level)
	nf := float64(n1 + n2)
	k := int(math.Floor(float64(n1*n2)/2 - z*math.Sqrt(float64(n1*n2)*(nf+1)/12)))
	if k < 1 {
		return 0, 0
	}
	return k, level
}

// Holm returns Holm's step-down adjusted p-values of a family of tests, in
// the order given: the i-th smallest p becomes max over j ≤ i of
// (m − j + 1)·p_(j), at most 1. A test is significant at family-wise level
// α when its adjusted p is ≤ α; the chance of any false positive in the
// family is then at most α, whatever the tests' dependence.
func Holm(ps []float64) []float64 {
	m := len(ps)
	idx := make([]int, m)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case ps[a] < ps[b]:
			return -1
		case ps[a] > ps[b]:
			return 1
		}
		return 0
	})
	out := make([]float64, m)
	running := 0.0
	for rank, i := range idx {
		running = math.Max(running, math.Min(1, float64(m-rank)*ps[i]))
		out[i] = running
	}
	return out
}

// doubledMidranks ranks the pooled sample (x then y) with midranks for
// ties, doubled so that they stay integers, and returns the largest tie
// group's size.
func doubledMidranks(x, y []float64) ([]int, int) {
	n := len(x) + len(y)
	vals := make([]float64, 0, n)
	vals = append(append(vals, x...), y...)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case vals[a] < vals[b]:
			return -1
		case vals[a] > vals[b]:
			return 1
		}
		return 0
	})
	r2 := make([]int, n)
	largest := 0
	for i := 0; i < n; {
		j := i
		for j+1 < n && vals[idx[j+1]] == vals[idx[i]] {
			j++
		}
		// Positions i..j (0-based) share the midrank (i+1 + j+1)/2.
		for k := i; k <= j; k++ {
			r2[idx[k]] = i + j + 2
		}
		largest = max(largest, j-i+1)
		i = j + 1
	}
	return r2, largest
}

// tieGroups returns the sizes of the groups of equal values in the pooled
// sample (groups of one included; they add nothing to the tie correction).
func tieGroups(x, y []float64) []int {
	vals := append(slices.Clone(x), y...)
	slices.Sort(vals)
	var groups []int
	for i := 0; i < len(vals); {
		j := i
		for j+1 < len(vals) && vals[j+1] == vals[i] {
			j++
		}
		groups = append(groups, j-i+1)
		i = j + 1
	}
	return groups
}

// exactP is the two-sided permutation p-value of the doubled rank sum w2 of
// a group of k among the doubled ranks r2: the share of the C(N, k) groups
// whose sum lies at least as far from the mean k(N+1) as w2.
func exactP(r2 []int, k, w2 int) float64 {
	counts := rankSumCounts(r2, k)
	mean := k * (len(r2) + 1) // doubled mean rank sum
	dev := abs(w2 - mean)
	var total, tail float64
	for s, c := range counts {
		if c == 0 {
			continue
		}
		total += c
		if abs(s-mean) >= dev {
			tail += c
		}
	}
	return math.Min(1, tail/total)
}

// rankSumCounts counts, for every doubled sum s, the groups of k of the
// doubled ranks r2 that sum to s (a subset-sum table, k ≤ len(r2)).
func rankSumCounts(r2 []int, k int) []float64 {
	total := 0
	for _, r := range r2 {
		total += r
	}
	// c[j][s]: groups of j among the ranks seen so far summing to s.
	c := make([][]float64, k+1)
	for j := range c {
		c[j] = make([]float64, total+1)
	}
	c[0][0] = 1
	reach := 0 // largest sum reachable so far
	for i, r := range r2 {
		reach += r
		for j := min(i+1, k); j >= 1; j-- {
			prev, cur := c[j-1], c[j]
			for s := reach; s >= r; s-- {
				cur[s] += prev[s-r]
			}
		}
	}
	return c[k]
}

// thin reduces a sample to at most 2048 evenly spaced order statistics
// (2048² = maxPairs), for samples whose pairwise differences would exceed
// maxPairs.
func thin(v []float64) []float64 {
	const maxSide = 2048
	if len(v) <= maxSide {
		return v
	}
	s := slices.Clone(v)
	slices.Sort(s)
	out := make([]float64, maxSide)
	for i := range out {
		out[i] = s[i*(len(s)-1)/(maxSide-1)]
	}
	return out
}

// binomial is C(n, k) as a float64 (exact up to 2⁵³, then to float
// precision).
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	k = min(k, n-k)
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
