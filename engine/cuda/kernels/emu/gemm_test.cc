// gemm_test runs gemm_skinny (kernels.cu) on the CPU emulator (cuda_emu.h)
// against a float64 reference of the same bf16 inputs: every token-tile
// width (m8, m16, m32, m64) at row counts that fill a tile and that leave
// it partly empty, K that fills the unrolled loop exactly and that leaves
// a tail for the single-chunk loop, the three output modes (bf16, f32,
// f32 +=), the 8-feature form of m8 (gemm_skinny_n8_m8), and the two fused
// operand forms of m8: RMSNorm of an f32
// residual (against the reference within bf16 rounding) and SwiGLU of
// gate|up (bit for bit against the swiglu kernel followed by plain m8).
// X rows at and past M hold NaN and Y rows past M a sentinel, so a read
// or a write outside the M rows shows up. Exit status 1 on any error
// above the tolerance. Built and run by engine/cuda
// TestGemmKernelOnCPUEmulator.
#include "cuda_emu.h"
#include "../kernels.cu"

#include <cstdio>
#include <random>

namespace {

float bf(bf16 v) { return __uint_as_float((unsigned)v << 16); }

bf16 tobf(float f) {
	unsigned u = __float_as_uint(f);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}

enum XForm { XBF16, XNORM, XSWIGLU };

struct Case {
	int M, N, K, mode;
	XForm xf = XBF16;
	bool n8 = false; // gemm_skinny_n8_m8 (8-feature blocks) instead of m8
};

bool run(const Case &c, std::mt19937 &rng) {
	const int M = c.M, N = c.N, K = c.K;
	const int MT = M <= 8 ? 1 : M <= 16 ? 2 : M <= 32 ? 4 : 8, rows = 8 * MT;
	std::normal_distribution<float> nd(0.f, 1.f);
	const bf16 nan = 0x7fc0;
	const float fnan = __uint_as_float(0x7fc00000u);
	// The operand as the kernel reads it (x; the residual xf with its norm
	// weight nw; gate|up gu) and the X it stands for (xd, in double).
	std::vector<bf16> x((size_t)rows * K), gu((size_t)rows * 2 * K), w((size_t)N * K);
	std::vector<float> xf((size_t)rows * K), nw(K);
	std::vector<double> xd((size_t)M * K);
	const float eps = 1e-6f;
	for (int k = 0; k < K; k++) nw[k] = 1.f + 0.1f * nd(rng);
	for (int m = 0; m < rows; m++) {
		double ss = 0;
		for (int k = 0; k < K; k++) {
			size_t i = (size_t)m * K + k;
			x[i] = m < M ? tobf(nd(rng)) : nan;
			xf[i] = m < M ? 3.f * nd(rng) : fnan;
			gu[(size_t)m * 2 * K + k] = m < M ? tobf(2.f * nd(rng)) : nan;
			gu[(size_t)m * 2 * K + K + k] = m < M ? tobf(nd(rng)) : nan;
			ss += (double)xf[i] * xf[i];
		}
		if (m >= M) continue;
		double scale = 1 / std::sqrt(ss / K + eps);
		for (int k = 0; k < K; k++) {
			size_t i = (size_t)m * K + k;
			double g = bf(gu[(size_t)m * 2 * K + k]), u = bf(gu[(size_t)m * 2 * K + K + k]);
			xd[i] = c.xf == XBF16 ? bf(x[i]) : c.xf == XNORM ? xf[i] * scale * nw[k] : g / (1 + std::exp(-g)) * u;
		}
	}
	for (auto &v : w) v = tobf(nd(rng) * 0.05f);
	std::vector<double> ref((size_t)M * N);
	std::vector<float> init((size_t)rows * N);
	for (auto &v : init) v = nd(rng);
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			double s = c.mode == 2 ? init[(size_t)m * N + n] : 0;
			for (int k = 0; k < K; k++) s += xd[(size_t)m * K + k] * bf(w[(size_t)n * K + k]);
			ref[(size_t)m * N + n] = s;
		}
	const float sentinel = 12345.f;
	std::vector<float> yf((size_t)rows * N, sentinel);
	std::vector<bf16> yb((size_t)rows * N, tobf(sentinel));
	if (c.mode == 2)
		for (int i = 0; i < M * N; i++) yf[i] = init[i];
	// For the SwiGLU form, its unfused twin: the swiglu kernel, then m8.
	std::vector<float> twinf = yf;
	std::vector<bf16> twinb = yb;
	void *y = c.mode == 0 ? (void *)yb.data() : (void *)yf.data();
	auto kernel = [&] {
		switch (c.xf == XBF16 ? MT : 0) {
		case 0:
			if (c.xf == XNORM) gemm_skinny_m8_norm(y, xf.data(), w.data(), M, N, K, c.mode, nw.data(), eps);
			else gemm_skinny_m8_swiglu(y, gu.data(), w.data(), M, N, K, c.mode, nullptr, 0.f);
			break;
		case 1: gemm_skinny_m8(y, x.data(), w.data(), M, N, K, c.mode, nullptr, 0.f); break;
		case 2: gemm_skinny_m16(y, x.data(), w.data(), M, N, K, c.mode, nullptr, 0.f); break;
		case 4: gemm_skinny_m32(y, x.data(), w.data(), M, N, K, c.mode, nullptr, 0.f); break;
		default: gemm_skinny_m64(y, x.data(), w.data(), M, N, K, c.mode, nullptr, 0.f);
		}
	};
	if (c.n8)
		emu::launch(dim3{(unsigned)(N / 8), 1, 1}, dim3{GS_WARPS * 32, 1, 1},
			[&] { gemm_skinny_n8_m8(y, x.data(), w.data(), M, N, K, c.mode, nullptr, 0.f); });
	else
		emu::launch(dim3{(unsigned)(N / 16), 1, 1}, dim3{GS_WARPS * 32, 1, 1}, kernel);
	bool twin = true;
	if (c.xf == XSWIGLU) {
		std::vector<bf16> act((size_t)rows * K, nan);
		emu::launch(dim3{(unsigned)M, 2, 1}, dim3{64, 1, 1}, [&] { swiglu(act.data(), gu.data(), K); });
		void *ty = c.mode == 0 ? (void *)twinb.data() : (void *)twinf.data();
		emu::launch(dim3{(unsigned)(N / 16), 1, 1}, dim3{GS_WARPS * 32, 1, 1},
			[&] { gemm_skinny_m8(ty, act.data(), w.data(), M, N, K, c.mode, nullptr, 0.f); });
		twin = c.mode == 0 ? std::memcmp(twinb.data(), yb.data(), yb.size() * 2) == 0 : std::memcmp(twinf.data(), yf.data(), yf.size() * 4) == 0;
	}
	double num = 0, den = 0;
	bool untouched = true;
	for (int m = 0; m < rows; m++)
		for (int n = 0; n < N; n++) {
			size_t i = (size_t)m * N + n;
			double got = c.mode == 0 ? bf(yb[i]) : yf[i];
			if (m >= M) {
				untouched = untouched && got == (c.mode == 0 ? bf(tobf(sentinel)) : sentinel);
				continue;
			}
			double d = got - ref[i];
			num += d * d;
			den += ref[i] * ref[i];
		}
	double rel = std::sqrt(num / den);
	// bf16 output rounds each value (relative 2^-9), and so does a fused
	// operand form (the kernel rounds its X to bf16, the reference does
	// not); f32 output of a bf16 X only sums differently from the float64
	// reference.
	double tol = c.mode == 0 || c.xf != XBF16 ? 4e-3 : 1e-5;
	bool ok = rel <= tol && untouched && twin && std::isfinite(rel);
	static const char *forms[] = {"bf16", "norm", "swiglu"};
	std::printf("%s M=%-2d N=%-3d K=%-4d mode=%d x=%-6s%s rel_l2=%.2e%s%s\n", ok ? "ok  " : "FAIL", M, N, K, c.mode, forms[c.xf],
		c.n8 ? " n8" : "   ", rel, untouched ? "" : " (wrote rows past M)", twin ? "" : " (differs from swiglu + m8)");
	return ok;
}

} // namespace

int main() {
	std::mt19937 rng(42);
	// K = 1024: 32 chunks, one full unrolled pass per warp (4 × 8 warps);
	// K = 1056: one more chunk for the single-chunk loop; K = 96: only it.
	std::vector<Case> cases = {
		{1, 48, 1024, 0}, {1, 32, 1056, 1}, {1, 16, 96, 2},
		// A long K: 129 chunks, four unrolled passes and a tail chunk.
		{2, 16, 4128, 2},
		{5, 32, 1056, 2}, {8, 16, 1024, 0},
		{9, 16, 1056, 0}, {16, 32, 96, 1},
		{17, 16, 1056, 2}, {32, 16, 1024, 1},
		{33, 16, 1056, 0}, {52, 32, 1056, 2}, {64, 16, 1024, 1},
		// The fused operand forms (m8 only): one row, rows that leave
		// warps without a row, a full tile; both K loops.
		{1, 48, 1024, 0, XNORM}, {3, 32, 1056, 2, XNORM}, {8, 16, 96, 1, XNORM}, {5, 16, 1024, 2, XNORM},
		{1, 32, 1056, 2, XSWIGLU}, {6, 16, 1024, 0, XSWIGLU}, {8, 16, 96, 2, XSWIGLU},
		// The 8-feature form: N a multiple of 8 only, both K loops (an
		// unrolled pass is 8 chunks × 8 warps: K = 2,048), partly filled
		// token rows.
		{1, 40, 2048, 0, XBF16, true}, {5, 24, 2080, 2, XBF16, true}, {8, 8, 96, 1, XBF16, true}, {3, 16, 4128, 2, XBF16, true},
	};
	int bad = 0;
	for (const auto &c : cases) bad += !run(c, rng);
	if (bad) {
		std::printf("%d of %zu cases failed\n", bad, cases.size());
		return 1;
	}
	std::printf("all %zu cases ok\n", cases.size());
	return 0;
}
