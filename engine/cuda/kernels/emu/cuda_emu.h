// cuda_emu.h runs treni-top's kernels on the CPU, for tests on machines
// without a GPU (and for check_host.sh's syntax check). Every CUDA thread
// of a block is a fiber (ucontext) on one OS thread, switched only where
// CUDA threads meet: __syncthreads is a barrier over the block, a shuffle
// or an mma a rendezvous of the warp's 32 fibers. One OS thread, no
// preemption: a run does the same thing on any host, busy or idle, and
// a busy host only slows it down in proportion. Blocks run one after
// another, so a kernel's __shared__ arrays (static locals here) are one
// block's shared memory. It says nothing about performance or device code
// generation; nvcc and the GPU tests do.
#ifndef TRENI_CUDA_EMU_H
#define TRENI_CUDA_EMU_H

// Fibers switch by _setjmp/_longjmp between stacks (see yield), which
// glibc's fortified longjmp refuses; this header comes first in every
// emulator test, ahead of any libc header.
#undef _FORTIFY_SOURCE

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <setjmp.h>
#include <ucontext.h>
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
struct uint2 {
	unsigned x, y;
};
inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
struct float2 {
	float x, y;
};
struct float4 {
	float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

using std::max;
using std::min;

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }

namespace emu {

// AsyncCopy is one cp.async the thread issued and has not waited for.
struct AsyncCopy {
	void *dst;
	const void *src;
	bool valid;
	void land() const {
		if (valid) std::memcpy(dst, src, 16);
		else std::memset(dst, 0, 16);
	}
};

// Fiber is one CUDA thread of the running launch.
struct Fiber {
	ucontext_t ctx; // its first entry (makecontext)
	jmp_buf jb;     // where it yielded
	bool started = false;
	// The stack, left uninitialised: a zero-filled one cost every launch
	// of 1,024 threads 256 MB of page faults.
	std::unique_ptr<char[]> stack;
	dim3 tid, bid;
	bool done = false;
	std::vector<AsyncCopy> open;               // cp.async issued since the last commit
	std::vector<std::vector<AsyncCopy>> groups; // committed groups, oldest first
	// flushAsync lands every copy still in flight (the block is ending).
	void flushAsync() {
		for (auto &g : groups)
			for (auto &c : g) c.land();
		for (auto &c : open) c.land();
		groups.clear();
		open.clear();
	}
};

// Sched runs a launch's fibers round-robin on the calling thread.
struct Sched {
	jmp_buf main; // the scheduler, while a fiber runs
	std::vector<Fiber> fibers;
	int cur = -1;
	std::function<void()> kernel;
	dim3 grid;
};

inline Sched *sched; // the launch in progress (launches do not nest)

// yield hands the OS thread back to the scheduler, which resumes the next
// fiber that is not done. Switches are _setjmp/_longjmp, which (unlike
// swapcontext) make no system call to save the signal mask: a launch of
// 1,024 threads switches millions of times.
inline void yield() {
	if (_setjmp(sched->fibers[sched->cur].jb) == 0) _longjmp(sched->main, 1);
}

// Barrier releases its n participants once all have arrived; the fibers
// that arrive early yield until then.
struct Barrier {
	explicit Barrier(int n) : n(n) {}
	void arrive_and_wait() {
		unsigned g = gen;
		if (++arrived == n) {
			arrived = 0;
			gen++;
			return;
		}
		while (gen == g) yield();
	}
	int n, arrived = 0;
	unsigned gen = 0;
};

// Warp is the rendezvous point of one warp's lanes.
struct Warp {
	Barrier bar{32};
	uint64_t xch[32];
	const void *rows[32];
	unsigned a[32][4], b[32][2];
};

// Block is one launch's threads' shared state.
struct Block {
	explicit Block(int threads) : bar(threads), warps((threads + 31) / 32) {}
	Barrier bar;
	std::vector<Warp> warps;
};

inline Block *block;
inline Warp *warp;
inline int lane;

template <class T> inline T shfl(T v, int src) {
	uint64_t u = 0;
	std::memcpy(&u, &v, sizeof(T));
	Warp *w = warp;
	int l = lane;
	w->xch[l] = u;
	w->bar.arrive_and_wait();
	uint64_t r = w->xch[src & 31];
	w->bar.arrive_and_wait(); // nobody overwrites xch before all have read
	T out;
	std::memcpy(&out, &r, sizeof(T));
	return out;
}

} // namespace emu

// The running fiber's indices: the scheduler sets them before resuming it.
inline dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

inline void __syncthreads() { emu::block->bar.arrive_and_wait(); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline float __shfl_xor_sync(unsigned, float v, int o) { return emu::shfl(v, emu::lane ^ o); }
inline int __shfl_xor_sync(unsigned, int v, int o) { return emu::shfl(v, emu::lane ^ o); }
inline int __shfl_sync(unsigned, int v, int src) { return emu::shfl(v, src); }
inline float __shfl_sync(unsigned, float v, int src) { return emu::shfl(v, src); }
// __shfl_up_sync: lane l reads lane l − d's value, its own below d.
inline float __shfl_up_sync(unsigned, float v, int d) { return emu::shfl(v, emu::lane >= d ? emu::lane - d : emu::lane); }
inline int __shfl_up_sync(unsigned, int v, int d) { return emu::shfl(v, emu::lane >= d ? emu::lane - d : emu::lane); }
// __ballot_sync: bit l holds lane l's predicate.
inline unsigned __ballot_sync(unsigned, int pred) {
	unsigned m = 0;
	for (int l = 0; l < 32; l++) m |= (unsigned)(emu::shfl(pred ? 1 : 0, l) != 0) << l;
	return m;
}
inline int __ffs(unsigned v) { return v ? __builtin_ctz(v) + 1 : 0; }
inline int __clz(unsigned v) { return v ? __builtin_clz(v) : 32; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
// Atomics: one OS thread runs every fiber and switches only at a
// rendezvous, so a plain read-modify-write is atomic here.
inline int atomicMax(int *p, int v) {
	int old = *p;
	*p = old > v ? old : v;
	return old;
}
// __any_sync: every lane posts its predicate, then reads all 32.
inline int __any_sync(unsigned, int pred) {
	int any = 0;
	for (int l = 0; l < 32; l++) any |= emu::shfl(pred ? 1 : 0, l);
	return any;
}

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

// cp.async: a copy lands when its thread waits for its group, the latest
// moment the hardware allows (see common.cuh's cp_async16).
inline void treni_emu_cp_async16(void *dst, const void *src, bool valid) {
	emu::sched->fibers[emu::sched->cur].open.push_back(emu::AsyncCopy{dst, src, valid});
}
inline void treni_emu_cp_async_commit() {
	emu::Fiber &f = emu::sched->fibers[emu::sched->cur];
	f.groups.push_back(std::move(f.open));
	f.open.clear();
}
inline void treni_emu_cp_async_wait(int n) {
	emu::Fiber &f = emu::sched->fibers[emu::sched->cur];
	while ((int)f.groups.size() > n) {
		for (auto &c : f.groups.front()) c.land();
		f.groups.erase(f.groups.begin());
	}
}

// treni_emu_ldmatrix_x4 is ldmatrix.m8n8.x4(.trans).b16: every lane posts
// its row address, then each reads its four registers from the rows.
inline void treni_emu_ldmatrix_x4(unsigned r[4], const void *p, bool trans) {
	emu::Warp *w = emu::warp;
	int l = emu::lane;
	w->rows[l] = p;
	w->bar.arrive_and_wait();
	auto at = [&](int m, int row, int col) {
		uint16_t v;
		std::memcpy(&v, (const char *)w->rows[m * 8 + row] + 2 * col, 2);
		return (unsigned)v;
	};
	int g = l >> 2, c = l & 3;
	unsigned out[4];
	for (int m = 0; m < 4; m++)
		out[m] = trans ? at(m, 2 * c, g) | at(m, 2 * c + 1, g) << 16 : at(m, g, 2 * c) | at(m, g, 2 * c + 1) << 16;
	w->bar.arrive_and_wait(); // every lane has read the rows
	std::memcpy(r, out, sizeof(out));
}

namespace emu {

inline void resume(int i) {
	Fiber &f = sched->fibers[i];
	sched->cur = i;
	threadIdx = f.tid;
	blockIdx = f.bid;
	warp = &block->warps[f.tid.x / 32];
	lane = (int)f.tid.x % 32;
	if (_setjmp(sched->main) != 0) return; // the fiber yielded or finished
	if (!f.started) {
		f.started = true;
		setcontext(&f.ctx);
	}
	_longjmp(f.jb, 1);
}

// fiberMain runs one CUDA thread over every block of the grid in order.
inline void fiberMain() {
	Fiber &f = sched->fibers[sched->cur];
	dim3 g = sched->grid;
	for (unsigned z = 0; z < g.z; z++)
		for (unsigned y = 0; y < g.y; y++)
			for (unsigned x = 0; x < g.x; x++) {
				f.bid = dim3{x, y, z};
				blockIdx = f.bid;
				sched->kernel();
				f.flushAsync(); // copies in flight land before the block ends
				block->bar.arrive_and_wait(); // the block is done: the next reuses shared memory
			}
	f.done = true; // the fibers vector never moves while the launch runs
	_longjmp(sched->main, 1); // never return: the context makecontext set up has no caller
}

// launch runs kernel() (a lambda calling the __global__ function with its
// arguments) over grid × block threads, block.x threads per block.
template <class F> void launch(dim3 grid, dim3 blk, F kernel) {
	blockDim = blk;
	gridDim = grid;
	int n = (int)blk.x;
	Block b(n);
	Sched s;
	s.kernel = kernel;
	s.grid = grid;
	s.fibers.resize(n);
	block = &b;
	sched = &s;
	for (int t = 0; t < n; t++) {
		Fiber &f = s.fibers[t];
		f.tid = dim3{(unsigned)t, 0, 0};
		constexpr size_t stackBytes = 256 << 10;
		f.stack.reset(new char[stackBytes]);
		if (getcontext(&f.ctx) != 0) throw std::runtime_error("getcontext");
		f.ctx.uc_stack.ss_sp = f.stack.get();
		f.ctx.uc_stack.ss_size = stackBytes;
		f.ctx.uc_link = nullptr; // fiberMain never returns
		makecontext(&f.ctx, fiberMain, 0);
	}
	for (bool running = true; running;) {
		running = false;
		for (int t = 0; t < n; t++)
			if (!s.fibers[t].done) {
				resume(t);
				running = running || !s.fibers[t].done;
			}
	}
	sched = nullptr;
	block = nullptr;
}

} // namespace emu

#endif
