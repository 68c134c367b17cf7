// sample_test runs the token-choice kernels of kernels.cu (sample_part,
// then sample_pick, as ops.go's Sample launches them) on the CPU emulator
// (cuda_emu.h) against a float64 reference of the same rule: greedy rows
// must give the argmax (lowest index on ties), rows sampled at a
// temperature must give the token where u · (the row's mass) falls when
// the kept tokens are walked in index order (u from the same counter-based
// splitmix64 draw; a pick that differs is accepted only where the target
// lies within float rounding of a token boundary), rows with top-k or
// top-p must stay inside their set (one vocabulary: their emulation is slow), every draw must advance the row's
// counter by one, and two rows with the same logits, seed and counter must
// draw the same token. Vocabularies of 8 (most segments empty), 33 and
// 50,001 tokens (not a multiple of the segment count); rows whose mass
// sits in one token near the end, rows of −inf, and rows with −inf runs
// spanning whole segments. Exit status 1 on any failure. Built and run by
// engine/cuda TestSampleKernelsOnCPUEmulator.
#include "cuda_emu.h"
#include "../kernels.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

namespace {

struct Row {
	float temp;
	int topK;
	float topP;
	unsigned long long seed;
	int shape; // 0 random, 1 one heavy token near the end, 2 all −inf, 3 −inf runs
};

// reference is the token the rule picks for row (temperature only), and
// the fraction of the mass from the target to the nearest boundary of
// the device's pick got.
int reference(const std::vector<float> &row, float temp, float u, int got, double &slack) {
	double mx = -INFINITY;
	for (float v : row) mx = std::max(mx, (double)v);
	std::vector<double> cum(row.size());
	double total = 0;
	for (size_t i = 0; i < row.size(); i++) {
		total += std::isinf(row[i]) ? 0.0 : std::exp(((double)row[i] - mx) / temp);
		cum[i] = total;
	}
	const double target = u * total;
	int want = (int)row.size() - 1;
	for (size_t i = 0; i < row.size(); i++)
		if (cum[i] > target) {
			want = (int)i;
			break;
		}
	slack = INFINITY;
	if (got >= 0 && got < (int)row.size()) {
		const double lo = got ? cum[got - 1] : 0.0, hi = cum[got];
		slack = target < lo ? (lo - target) / total : target >= hi ? (target - hi) / total : 0.0;
	}
	return want;
}

// allowed is the top-k (ties kept) then top-p (plus one for float slack)
// set, as the GPU test computes it.
std::set<int> allowed(const std::vector<float> &row, float temp, int k, float p) {
	const int V = (int)row.size();
	std::vector<int> idx(V);
	for (int i = 0; i < V; i++) idx[i] = i;
	std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return row[a] > row[b]; });
	int keep = V;
	if (k > 0 && k < V) {
		keep = k;
		while (keep < V && row[idx[keep]] == row[idx[k - 1]]) keep++;
	}
	if (p < 1.f) {
		const double mx = row[idx[0]];
		double z = 0;
		std::vector<double> w(keep);
		for (int i = 0; i < keep; i++) z += w[i] = std::exp(((double)row[idx[i]] - mx) / temp);
		double acc = 0;
		int n = 0;
		while (n < keep) {
			acc += w[n++];
			if (acc >= p * z) break;
		}
		keep = std::min(keep, n + 1);
	}
	return std::set<int>(idx.begin(), idx.begin() + keep);
}

bool run(int V, int draws, bool filters, std::mt19937 &rng) {
	std::vector<Row> rows = {
		{0.f, 0, 1.f, 1, 0},   {1.f, 0, 1.f, 2, 0},   {0.7f, 0, 1.f, 3, 0}, {1.3f, 0, 1.f, 4, 1},
		{1.f, 5, 1.f, 5, 0},   {0.9f, 0, 0.5f, 6, 0}, {1.f, 0, 1.f, 7, 2},  {1.f, 0, 1.f, 8, 3},
		{1.f, 0, 1.f, 2, 0},   {0.f, 1, 1.f, 9, 3},   {2.f, 0, 1.f, 10, 0},
	};
	if (!filters) // sample_filtered's many block-wide passes are slow to emulate: once is enough
		for (Row &w : rows) w.topK = w.topK == 1 ? 1 : 0, w.topP = 1.f;
	const int R = (int)rows.size();
	const int twin = 8; // row 8 repeats row 1's logits and seed
	std::normal_distribution<float> nd(0.f, 2.f);
	std::vector<float> logits((size_t)R * V), temp(R), topP(R);
	std::vector<int> topK(R), out(R, -7);
	std::vector<unsigned long long> seed(R), counter(R, 0);
	std::vector<float> part((size_t)R * SAMPLE_SEGS * 3, NAN);
	for (int r = 0; r < R; r++) {
		const Row &w = rows[r];
		temp[r] = w.temp, topK[r] = w.topK, topP[r] = w.topP, seed[r] = w.seed;
		for (int i = 0; i < V; i++) {
			float v = nd(rng);
			if (w.shape == 1) v = i == V - 3 ? 12.f : 0.1f * v;
			if (w.shape == 2) v = -INFINITY;
			if (w.shape == 3 && (i / std::max(1, V / 5)) % 2 == 0) v = -INFINITY;
			logits[(size_t)r * V + i] = v;
		}
	}
	std::copy(logits.begin() + (size_t)1 * V, logits.begin() + (size_t)2 * V, logits.begin() + (size_t)twin * V);
	// A tie for greedy row 0: its largest value again, later in the row.
	{
		float *r0 = &logits[0];
		const int at = (int)(std::max_element(r0, r0 + V) - r0);
		if (at + 1 < V) r0[V - 1] = r0[at];
	}
	int bad = 0, boundary = 0;
	std::vector<std::set<int>> distinct(R);
	for (int d = 0; d < draws; d++) {
		const std::vector<unsigned long long> before = counter;
		emu::launch(dim3{(unsigned)R, SAMPLE_SEGS, 1}, dim3{SAMPLE_PART_THREADS, 1, 1}, [&] {
			sample_part(part.data(), logits.data(), V, V, temp.data(), topK.data(), topP.data());
		});
		emu::launch(dim3{(unsigned)R, 1, 1}, dim3{SAMPLE_THREADS, 1, 1}, [&] {
			sample_pick(out.data(), part.data(), logits.data(), V, V, temp.data(), topK.data(), topP.data(), seed.data(),
				counter.data());
		});
		for (int r = 0; r < R; r++) {
			const Row &w = rows[r];
			const std::vector<float> row(logits.begin() + (size_t)r * V, logits.begin() + (size_t)(r + 1) * V);
			const int got = out[r];
			distinct[r].insert(got);
			if (counter[r] != before[r] + 1) {
				std::printf("  FAIL V=%d row %d: counter %llu after %llu\n", V, r, counter[r], before[r]);
				bad++;
			}
			if (got < 0 || got >= V) {
				std::printf("  FAIL V=%d row %d draw %d: token %d outside [0, %d)\n", V, r, d, got, V);
				bad++;
				continue;
			}
			const bool greedy = !(w.temp > 0.f) || w.topK == 1;
			const bool filtered = !greedy && ((w.topK > 0 && w.topK < V) || w.topP < 1.f);
			if (w.shape == 2) {
				if (got != 0) {
					std::printf("  FAIL V=%d row %d: a row of -inf drew %d, want 0\n", V, r, got);
					bad++;
				}
			} else if (greedy) {
				const int want = (int)(std::max_element(row.begin(), row.end()) - row.begin());
				if (got != want) {
					std::printf("  FAIL V=%d row %d: greedy %d, want %d\n", V, r, got, want);
					bad++;
				}
			} else if (filtered) {
				if (!allowed(row, w.temp, w.topK, w.topP).count(got)) {
					std::printf("  FAIL V=%d row %d: token %d outside the top-k/top-p set\n", V, r, got);
					bad++;
				}
			} else {
				const unsigned long long h = splitmix64(w.seed ^ splitmix64(before[r]));
				const float u = (float)(h >> 40) * (1.f / 16777216.f);
				double slack;
				const int want = reference(row, w.temp, u, got, slack);
				if (got != want) {
					if (slack > 1e-5) {
						std::printf("  FAIL V=%d row %d draw %d: token %d, want %d (target %.3g of the mass from it)\n", V, r, d,
							got, want, slack);
						bad++;
					} else
						boundary++;
				}
			}
		}
		if (out[twin] != out[1]) {
			std::printf("  FAIL V=%d: rows with the same logits, seed and counter drew %d and %d\n", V, out[1], out[twin]);
			bad++;
		}
	}
	std::printf("  V=%-6d %d draws of %d rows%s: %s; distinct tokens drawn per row:", V, draws, R, filters ? " (two with top-k or top-p)" : "", bad ? "FAILED" : "ok");
	for (int r = 0; r < R; r++) std::printf(" %zu", distinct[r].size());
	std::printf("; %d picks off by float rounding at a boundary\n", boundary);
	return bad == 0;
}

} // namespace

int main() {
	std::mt19937 rng(42);
	int bad = 0;
	bad += !run(8, 24, false, rng);
	bad += !run(33, 12, true, rng);
	bad += !run(4099, 8, false, rng);
	bad += !run(151936, 2, false, rng); // Qwen3's vocabulary
	if (bad) {
		std::printf("%d vocabulary sizes failed\n", bad);
		return 1;
	}
	std::printf("all vocabulary sizes ok\n");
	return 0;
}
