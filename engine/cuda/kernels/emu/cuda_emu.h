// cuda_emu.h runs treni-top's kernels on the CPU, for tests on machines
// without a GPU (and for check_host.sh's syntax check). Every CUDA thread
// of a block is an OS thread; __syncthreads is a barrier over the block,
// a shuffle or an mma a rendezvous of the warp's 32 threads. Blocks run
// one after another, so a kernel's __shared__ arrays (static locals here)
// are one block's shared memory. It is slow (a rendezvous costs tens of
// microseconds on a small machine): give it small shapes. It says nothing
// about performance or device code generation; nvcc and the GPU tests do.
#ifndef TRENI_CUDA_EMU_H
#define TRENI_CUDA_EMU_H

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
	unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

using std::max;
using std::min;

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }

namespace emu {

// Warp is the rendezvous point of one warp's lanes.
struct Warp {
	std::barrier<> bar{32};
	uint64_t xch[32];
	unsigned a[32][4], b[32][2];
	float c[32][4];
};

// Block is one launch's threads' shared state.
struct Block {
	explicit Block(int threads) : bar(threads), warps((threads + 31) / 32) {
		for (auto &w : warps) w = std::make_unique<Warp>();
	}
	std::barrier<> bar;
	std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local Block *block;
inline thread_local Warp *warp;
inline thread_local int lane;

template <class T> inline T shfl(T v, int src) {
	uint64_t u = 0;
	std::memcpy(&u, &v, sizeof(T));
	warp->xch[lane] = u;
	warp->bar.arrive_and_wait();
	uint64_t r = warp->xch[src & 31];
	warp->bar.arrive_and_wait(); // nobody overwrites xch before all have read
	T out;
	std::memcpy(&out, &r, sizeof(T));
	return out;
}

} // namespace emu

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

inline void __syncthreads() { emu::block->bar.arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) { return emu::shfl(v, emu::lane ^ o); }
inline int __shfl_xor_sync(unsigned, int v, int o) { return emu::shfl(v, emu::lane ^ o); }
inline int __shfl_sync(unsigned, int v, int src) { return emu::shfl(v, src); }

// treni_emu_mma_bf16_16816 is mma.sync.m16n8k16 (bf16 in, f32 accumulate)
// from the fragment layouts of common.cuh: every lane posts its
// fragments, then each computes its four outputs from all of them.
inline void treni_emu_mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2]) {
	emu::Warp *w = emu::warp;
	int l = emu::lane;
	std::memcpy(w->a[l], a, sizeof(w->a[l]));
	std::memcpy(w->b[l], b, sizeof(w->b[l]));
	w->bar.arrive_and_wait();
	auto half = [](unsigned r, int hi) { return __uint_as_float((hi ? r >> 16 : r & 0xffffu) << 16); };
	// A[row][k]: lane (row%8)*4 + (k%8)/2, register (row>=8) + 2(k>=8), half k&1.
	auto A = [&](int row, int k) { return half(w->a[(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k & 1); };
	// B[k][col]: lane col*4 + (k%8)/2, register k>=8, half k&1.
	auto B = [&](int k, int col) { return half(w->b[col * 4 + (k % 8) / 2][k >= 8], k & 1); };
	int g = l >> 2, c = l & 3;
	float out[4];
	for (int i = 0; i < 4; i++) {
		int row = g + 8 * (i >> 1), col = 2 * c + (i & 1);
		float s = d[i];
		for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
		out[i] = s;
	}
	w->bar.arrive_and_wait(); // every lane has read the fragments
	std::memcpy(d, out, sizeof(out));
}

namespace emu {

// launch runs kernel() (a lambda calling the __global__ function with its
// arguments) over grid × block threads, block.x threads per block.
template <class F> void launch(dim3 grid, dim3 blk, F kernel) {
	blockDim = blk;
	gridDim = grid;
	int n = (int)blk.x;
	Block b(n);
	std::vector<std::thread> ts;
	for (int t = 0; t < n; t++)
		ts.emplace_back([&, t] {
			block = &b;
			warp = b.warps[t / 32].get();
			lane = t % 32;
			threadIdx = dim3{(unsigned)t, 0, 0};
			for (unsigned z = 0; z < grid.z; z++)
				for (unsigned y = 0; y < grid.y; y++)
					for (unsigned x = 0; x < grid.x; x++) {
						blockIdx = dim3{x, y, z};
						kernel();
						b.bar.arrive_and_wait(); // the block is done: the next reuses shared memory
					}
		});
	for (auto &t : ts) t.join();
}

} // namespace emu

#endif
