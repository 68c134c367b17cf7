// attn_test runs the attention kernels of kernels.cu on the CPU emulator
// (cuda_emu.h) and compares them with a float64 reference: paged_attention
// (the emulator's own check: it passes on the GPU), and attn_mma with one
// KV split and with several (attn_combine merging them), for GQA groups of
// 1 to 5 heads, head dims 64 and 128, prefill chunks that span several
// tiles, decode tokens, causal masking inside a tile, and block tables
// whose logical and physical orders differ. Positions past each
// sequence's length and blocks no table uses hold NaN, so a read past the
// keys a row may see poisons the output. Exit status 1 on any error above
// the tolerance (the GPU test's: 4e-3 relative L2). Built and run by
// engine/cuda TestAttentionKernelsOnCPUEmulator. attn_mma runs as the
// backend launches it (attn_mma_w1 on the tiles that fit in a warp, the
// four-warp form on the rest) and, once, in the four-warp form on every tile.
#include "cuda_emu.h"
#include "../kernels.cu"

#include <cstdio>
#include <random>

namespace {

float bf(bf16 v) { return __uint_as_float((unsigned)v << 16); }

struct Chunk {
	int pos, len; // the step's tokens of one sequence: positions [pos, pos+len)
};

struct Case {
	const char *name;
	int nh, nkv, hd, bs;
	std::vector<Chunk> chunks;
};

double relErr(const std::vector<bf16> &got, const std::vector<double> &ref) {
	double num = 0, den = 0;
	for (size_t i = 0; i < ref.size(); i++) {
		double d = bf(got[i]) - ref[i];
		num += d * d;
		den += ref[i] * ref[i];
	}
	return std::sqrt(num / den);
}

bool run(const Case &c, std::mt19937 &rng) {
	const int nh = c.nh, nkv = c.nkv, hd = c.hd, bs = c.bs, S = (int)c.chunks.size();
	const int qstride = (nh + 2 * nkv) * hd;
	std::vector<int> nblk(S);
	int btStride = 1, NB = 3, T = 0;
	for (int s = 0; s < S; s++) {
		nblk[s] = (c.chunks[s].pos + c.chunks[s].len + bs - 1) / bs;
		btStride = max(btStride, nblk[s] + 1);
		NB += nblk[s];
		T += c.chunks[s].len;
	}
	std::vector<int> perm(NB);
	for (int i = 0; i < NB; i++) perm[i] = i;
	std::shuffle(perm.begin(), perm.end(), rng);
	const float nan = std::nanf("");
	// Table entries past a sequence's blocks point at an unused (NaN) block.
	std::vector<int> bt(S * btStride, perm[NB - 1]);
	int next = 0;
	for (int s = 0; s < S; s++)
		for (int j = 0; j < nblk[s]; j++) bt[s * btStride + j] = perm[next++];
	std::normal_distribution<float> nd(0.f, 1.f);
	size_t cacheN = (size_t)NB * nkv * bs * hd;
	std::vector<bf16> kc(cacheN, f2bf(nan)), vc(cacheN, f2bf(nan)), q((size_t)T * qstride);
	for (auto &x : q) x = f2bf(nd(rng));
	auto at = [&](int s, int j, int g) { return ((size_t)(bt[s * btStride + j / bs] * nkv + g) * bs + j % bs) * hd; };
	for (int s = 0; s < S; s++)
		for (int j = 0; j < c.chunks[s].pos + c.chunks[s].len; j++)
			for (int g = 0; g < nkv; g++)
				for (int d = 0; d < hd; d++) {
					kc[at(s, j, g) + d] = f2bf(nd(rng));
					vc[at(s, j, g) + d] = f2bf(nd(rng));
				}
	std::vector<int> tokSeq, pos;
	for (int s = 0; s < S; s++)
		for (int i = 0; i < c.chunks[s].len; i++) {
			tokSeq.push_back(s);
			pos.push_back(c.chunks[s].pos + i);
		}
	// Reference.
	const int G = nh / nkv;
	const double scale = 1 / std::sqrt((double)hd);
	std::vector<double> ref((size_t)T * nh * hd, 0.0);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < nh; h++) {
			int s = tokSeq[t], n = pos[t] + 1, g = h / G;
			std::vector<double> sc(n);
			double mx = -INFINITY, z = 0;
			for (int j = 0; j < n; j++) {
				double a = 0;
				for (int d = 0; d < hd; d++) a += (double)bf(q[(size_t)t * qstride + h * hd + d]) * bf(kc[at(s, j, g) + d]);
				sc[j] = a * scale;
				mx = std::max(mx, sc[j]);
			}
			for (int j = 0; j < n; j++) z += sc[j] = std::exp(sc[j] - mx);
			for (int j = 0; j < n; j++)
				for (int d = 0; d < hd; d++) ref[((size_t)t * nh + h) * hd + d] += sc[j] / z * bf(vc[at(s, j, g) + d]);
		}
	bool ok = true;
	auto report = [&](const char *what, const std::vector<bf16> &got) {
		double e = relErr(got, ref);
		bool pass = e <= 4e-3; // NaN fails
		std::printf("%-4s %-10s %-32s rel_l2 %.2e\n", pass ? "ok" : "FAIL", c.name, what, e);
		ok = ok && pass;
	};
	std::vector<bf16> out((size_t)T * nh * hd, f2bf(nan));
	emu::launch(dim3{(unsigned)T, (unsigned)nh, 1}, dim3{ATT_THREADS, 1, 1}, [&] {
		paged_attention(out.data(), q.data(), qstride, kc.data(), vc.data(), tokSeq.data(), pos.data(), bt.data(), btStride,
			nh, nkv, hd, bs, (float)scale);
	});
	report("paged_attention", out);
	// Tiles as the backend cuts them (engine/cuda stepMeta): runs of up to
	// tileTokens; those that fit in a warp (≤ 16/G tokens) first, then
	// those the mid form takes (≤ 4·16/G), then the rest.
	const int tileTokens = FA_WARPS * (FA_ROWS / G), warpTokens = 16 / G, midTokens = FA_WARPS * warpTokens;
	std::vector<int> small, mid, big;
	for (int s = 0, t = 0; s < S; t += c.chunks[s].len, s++)
		for (int j = 0; j < c.chunks[s].len; j += tileTokens) {
			int n = min(tileTokens, c.chunks[s].len - j);
			auto &dst = n <= warpTokens ? small : n <= midTokens ? mid : big;
			dst.push_back(t + j);
			dst.push_back(n);
		}
	std::vector<int> tiles = small;
	tiles.insert(tiles.end(), mid.begin(), mid.end());
	tiles.insert(tiles.end(), big.begin(), big.end());
	const unsigned nTiles = (unsigned)tiles.size() / 2, nWarp = (unsigned)small.size() / 2, nMid = (unsigned)mid.size() / 2;
	// The same tokens cut into mid-sized runs, for the mid form alone.
	std::vector<int> midTiles;
	for (int s = 0, t = 0; s < S; t += c.chunks[s].len, s++)
		for (int j = 0; j < c.chunks[s].len; j += midTokens) {
			midTiles.push_back(t + j);
			midTiles.push_back(min(midTokens, c.chunks[s].len - j));
		}
	// Runs: the four-warp kernel over every tile; the mid kernel over
	// every mid-sized run; then as the backend launches them (attn_mma_w1
	// over the warp tiles, attn_mma_mid over the mid ones, the four-warp
	// kernel over the rest) with one KV split, with three, and with each
	// launch split its own way over a scratch of the largest.
	enum Forms { BigOnly, MidOnly, Backend, Dec };
	// attn_dec takes the warp tiles where each holds one token, head dim
	// 128 and a group of 2 or 4.
	bool single = true;
	for (unsigned i = 0; i < small.size() / 2; i++) single = single && small[2 * i + 1] == 1;
	const bool dec = single && hd == 128 && (G == 2 || G == 4) && !small.empty();
	struct Run {
		Forms forms;
		int zw, zm, zb;
	};
	for (Run r : {Run{BigOnly, 1, 1, 1}, Run{MidOnly, 1, 1, 1}, Run{MidOnly, 1, 3, 1}, Run{Backend, 1, 1, 1}, Run{Backend, 3, 3, 3},
			 Run{Backend, 1, 3, 2}, Run{Backend, 3, 1, 2}, Run{Backend, 2, 2, 1}, Run{Dec, 1, 1, 1}, Run{Dec, 3, 3, 3}, Run{Dec, 5, 1, 2},
			 Run{Dec, 2, 3, 1}}) {
		if (r.forms == Dec && !dec) continue;
		const int Z = max(r.zw, max(r.zm, r.zb));
		std::fill(out.begin(), out.end(), f2bf(nan));
		// Stale partials of an earlier launch: (max, sum) = (0, 1), as if
		// some keys had been seen, over NaN outputs, so a split that left
		// its pair unwritten (one that held every key and wrote the row
		// itself, or one the row's launch does not have, must be marked
		// empty) merges NaN.
		std::vector<float> acc((size_t)T * nh * Z * hd, nan), ml((size_t)T * nh * Z * 2, 0.f);
		for (size_t i = 1; i < ml.size(); i += 2) ml[i] = 1.f;
		const float sl2 = (float)(scale * M_LOG2E);
		// launch runs one form over n tiles from tl with z splits.
		auto launch = [&](int form, const int *tl, unsigned n, int z) {
			if (n == 0) return;
			emu::launch(dim3{n, (unsigned)nkv, (unsigned)z}, dim3{form == 0 ? 32u : form == 3 ? DEC_WARPS * 32u : FA_WARPS * 32u, 1, 1}, [&] {
				auto f = form == 3 ? (G == 2 ? attn_dec_g2 : attn_dec_g4)
					: form == 0    ? (hd == 64 ? attn_mma_w1_hd64 : attn_mma_w1_hd128)
					: form == 1    ? (hd == 64 ? attn_mma_mid_hd64 : attn_mma_mid_hd128)
								   : (hd == 64 ? attn_mma_hd64 : attn_mma_hd128);
				f(out.data(), acc.data(), ml.data(), q.data(), qstride, kc.data(), vc.data(), tokSeq.data(), pos.data(),
					bt.data(), btStride, tl, nh, nkv, bs, sl2, Z);
			});
		};
		if (r.forms == BigOnly) launch(2, tiles.data(), nTiles, r.zb);
		if (r.forms == MidOnly) launch(1, midTiles.data(), (unsigned)midTiles.size() / 2, r.zm);
		if (r.forms == Backend || r.forms == Dec) {
			launch(r.forms == Dec ? 3 : 0, tiles.data(), nWarp, r.zw);
			launch(1, tiles.data() + 2 * nWarp, nMid, r.zm);
			launch(2, tiles.data() + 2 * (nWarp + nMid), nTiles - nWarp - nMid, r.zb);
		}
		if (Z > 1)
			// A grid with fewer warps than rows (96 threads: 3 warps a
			// block), so that warps walk several rows, as on the GPU.
			emu::launch(dim3{(unsigned)std::max(1, T * nh / 7), 1, 1}, dim3{96, 1, 1},
				[&] { attn_combine(out.data(), acc.data(), ml.data(), T * nh, hd, Z); });
		char what[64];
		std::snprintf(what, sizeof what, "attn_mma %s %d/%d/%d split%s",
			r.forms == BigOnly ? "4w" : r.forms == MidOnly ? "mid" : r.forms == Dec ? "dec+mid+4w" : "w1+mid+4w",
			r.zw, r.zm, r.zb, Z > 1 ? "s+combine" : "");
		report(what, out);
		if (Z > 1) { // how many rows were merged from several splits: the splits must be real
			int merged = 0;
			for (int row = 0; row < T * nh; row++) {
				int live = 0;
				for (int z = 0; z < Z; z++) live += ml[((size_t)row * Z + z) * 2 + 1] > 0.f;
				merged += live > 1;
			}
			std::printf("     %-10s %d of %d rows merged from several splits; tiles: %u on one warp, %u mid, %u of %u four-warp\n",
				c.name, merged, T * nh, nWarp, nMid, nTiles - nWarp - nMid, nTiles);
			int maxn = 0;
			for (const Chunk &ch : c.chunks) maxn = max(maxn, ch.pos + ch.len);
			if (r.zw == r.zm && r.zm == r.zb && maxn > FA_KEYS && merged == 0) { // a row past one key tile must have been split
				std::printf("FAIL %-10s no row's keys were split\n", c.name);
				ok = false;
			}
		}
	}
	return ok;
}

} // namespace

int main() {
	std::mt19937 rng(7);
	const Case cases[] = {
		// Qwen3-4B's group (4 heads per KV head): a prefill chunk over three
		// tiles (32 + 32 + 6 tokens) beside two decode tokens, one long
		// enough for several key tiles.
		{"gqa4-hd128", 8, 2, 128, 16, {{40, 70}, {150, 1}, {3, 1}}},
		// Decode only, long contexts: each split has keys (the combine's case).
		{"gqa4-decode", 4, 1, 128, 16, {{300, 1}, {200, 1}, {129, 1}}},
		// Qwen3-0.6B's group (2): a chunk from position 0 over two tiles,
		// causal within tiles.
		{"gqa2-hd128", 4, 2, 128, 16, {{0, 80}}},
		// Qwen2-like: 3 heads per KV head (a warp holds 10 tokens, 30 of
		// its 32 rows; a one-warp tile 5 tokens), head dim 64, small blocks.
		{"gqa3-hd64", 6, 2, 64, 4, {{10, 45}, {70, 1}}},
		// 5 heads per group (Qwen3-14B's 40/8): 6 tokens per warp (3 on
		// one warp alone), two tiles.
		{"gqa5-hd64", 5, 1, 64, 16, {{0, 30}, {90, 1}}},
		// Multi-head attention: 32 tokens per warp, a 128-token tile of
		// which three warps have rows.
		{"mha-hd64", 2, 2, 64, 8, {{5, 70}}},
		// A block size that is not a power of two: keys find their block by
		// division, not by shift.
		{"gqa4-bs12", 8, 2, 128, 12, {{40, 40}, {150, 1}}},
		// Decode only, the 0.6B's group: contexts that end inside a key
		// tile and inside a warp's 8 keys, one shorter than a tile.
		{"gqa2-decode", 8, 4, 128, 16, {{250, 1}, {77, 1}, {5, 1}, {64, 1}}},
	};
	bool ok = true;
	for (const Case &c : cases) ok = run(c, rng) && ok;
	std::printf(ok ? "PASS\n" : "FAIL\n");
	return ok ? 0 : 1;
}
