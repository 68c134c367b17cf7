// Shared helpers for treni-top's kernels. bf16 values are carried as raw
// unsigned short and converted by bit operations, so the sources need no
// CUDA header beyond the compiler's built-ins (and can be syntax-checked by
// a host compiler with stubs, see check_host.sh).
#ifndef TRENI_KERNELS_COMMON_CUH
#define TRENI_KERNELS_COMMON_CUH

typedef unsigned short bf16;

// -inf without math.h's INFINITY.
#define NEG_INF __int_as_float(0xff800000)

// bf16 is the top half of an IEEE float32.
__device__ __forceinline__ float bf2f(bf16 v) { return __uint_as_float(((unsigned int)v) << 16); }

// Round to nearest even, NaN kept quiet: the same rounding torch uses.
__device__ __forceinline__ bf16 f2bf(float f) {
	unsigned int u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)0x7fc0;
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}

// Programmatic dependent launch (sm_90 on). The Go side launches every
// kernel with programmatic stream serialization allowed (PDL on, ops.go),
// so a kernel may be resident before the one ahead of it in the stream
// has finished. KERNEL_ENTRY is therefore the first statement of every
// kernel: griddepcontrol.wait blocks until the grids it depends on have
// completed and their writes are visible (it returns at once for a grid
// launched without PDL), then launch_dependents lets the next kernel in
// the stream be scheduled, to wait in its own KERNEL_ENTRY instead of
// being launched after this one ends. Reads of memory no kernel writes
// (the weights) may come before it: gemm_skinny starts its weight stream
// there while the previous kernel finishes.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KERNEL_ENTRY()                                                                                             \
	do {                                                                                                           \
		asm volatile("griddepcontrol.wait;" ::: "memory");                                                        \
		asm volatile("griddepcontrol.launch_dependents;" ::: "memory");                                           \
	} while (0)
#else
#define KERNEL_ENTRY() \
	do {               \
	} while (0)
#endif

// swiglu1 is SwiGLU of one column, silu(g)·u rounded to bf16; swiglu2 of
// the two columns of a bf16x2 word; swiglu8 of the 8 columns at g and u
// (16-byte aligned). The swiglu kernel's two forms and gemm_skinny's
// SwiGLU operand use these, so they round alike.
__device__ __forceinline__ bf16 swiglu1(bf16 g, bf16 u) {
	float a = bf2f(g);
	return f2bf(a / (1.f + expf(-a)) * bf2f(u));
}
__device__ __forceinline__ unsigned int swiglu2(unsigned int g, unsigned int u) {
	return (unsigned int)swiglu1((bf16)(g & 0xffffu), (bf16)(u & 0xffffu)) |
		((unsigned int)swiglu1((bf16)(g >> 16), (bf16)(u >> 16)) << 16);
}
__device__ __forceinline__ uint4 swiglu8(const bf16 *g, const bf16 *u) {
	uint4 gv = *(const uint4 *)g, uv = *(const uint4 *)u;
	return make_uint4(swiglu2(gv.x, uv.x), swiglu2(gv.y, uv.y), swiglu2(gv.z, uv.z), swiglu2(gv.w, uv.w));
}

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum reduces over the whole block (blockDim.x a multiple of 32, at
// most 1024). red must hold 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float *red) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	v = warp_sum(v);
	__syncthreads(); // red may still be read by a previous reduction
	if (lane == 0) red[w] = v;
	__syncthreads();
	v = lane < nw ? red[lane] : 0.f;
	return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *red) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) red[w] = v;
	__syncthreads();
	v = lane < nw ? red[lane] : NEG_INF;
	return warp_max(v);
}

__device__ __forceinline__ int warp_max_int(int v) {
	for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// pack_bf16x2 rounds two floats to bf16 and packs them as an mma operand
// register: lo in the low half (the lower column or row index). On the
// device one cvt.rn.bf16x2.f32 does it: the same round to nearest even as
// f2bf for every finite value and infinity (a NaN comes out as 0x7fff
// rather than f2bf's 0x7fc0), in one instruction instead of about twelve
// integer ones, which left attn_mma's softmax bound on the ALU (ncu,
// docs/BENCHMARKS.md).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned int pack_bf16x2(float lo, float hi) {
	unsigned int r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}
#else
__device__ __forceinline__ unsigned int pack_bf16x2(float lo, float hi) {
	return (unsigned int)f2bf(lo) | ((unsigned int)f2bf(hi) << 16);
}
#endif

// split_bf16x2 writes a and b as hi + lo pairs of bf16 (hi = bf16(x),
// lo = bf16(x − hi)), packed like pack_bf16x2: an mma operand with about
// 16 significant bits, in two products.
__device__ __forceinline__ void split_bf16x2(float a, float b, unsigned int &hi, unsigned int &lo) {
	hi = pack_bf16x2(a, b);
	lo = pack_bf16x2(a - __uint_as_float(hi << 16), b - __uint_as_float(hi & 0xffff0000u));
}

// mma_bf16_16816: d += a·b on the tensor cores, one warp, shape m16n8k16,
// bf16 inputs and fp32 accumulators. Fragment layouts (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"), with
// g = lane/4 and c = lane%4:
//   a[0] = A[g][2c..2c+1]    a[1] = A[g+8][2c..2c+1]
//   a[2] = A[g][2c+8..+9]    a[3] = A[g+8][2c+8..+9]
//   b[0] = B[2c..2c+1][g]    b[1] = B[2c+8..2c+9][g]
//   d[0..1] = D[g][2c..2c+1] d[2..3] = D[g+8][2c..2c+1]
// Off the device (the host syntax check, the CPU emulator in emu/) it is
// treni_emu_mma_bf16_16816, which computes the same thing from the same
// fragments.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void mma_bf16_16816(float d[4], const unsigned int a[4], const unsigned int b[2]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		: "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#else
void treni_emu_mma_bf16_16816(float d[4], const unsigned int a[4], const unsigned int b[2]);
__device__ __forceinline__ void mma_bf16_16816(float d[4], const unsigned int a[4], const unsigned int b[2]) {
	treni_emu_mma_bf16_16816(d, a, b);
}
#endif

// DYNAMIC_SHARED(name) declares the block's dynamic shared memory (the
// launch's sharedMem bytes) as a 16-byte-aligned byte array: what a block
// needs beyond the 48 KB it may declare statically. In the CPU emulator
// (no __CUDACC__) it is a static array of 128 KB.
#if defined(__CUDACC__)
#define DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#else
#define DYNAMIC_SHARED(name) static __align__(16) unsigned char name[1 << 17]
#endif

// ldmatrix_x4 loads four 8×8 matrices of 16-bit elements from shared
// memory, one warp together: lane l gives the address of row l%8 of matrix
// l/8 (16 contiguous bytes, 16-byte aligned), and lane t receives in r[j]
// the elements (t/4, 2(t%4)) and (t/4, 2(t%4)+1) of matrix j — the mma
// B-fragment layout of a matrix stored with the n index on rows. The
// .trans form gives (2(t%4), t/4) and (2(t%4)+1, t/4) instead: for a
// matrix stored with the k index on rows. One instruction replaces eight
// 32-bit (or sixteen 16-bit) shared loads and the packing of their halves.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void ldmatrix_x4(unsigned int r[4], const void *p) {
	unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int r[4], const void *p) {
	unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
#else
void treni_emu_ldmatrix_x4(unsigned int r[4], const void *p, bool trans);
__device__ __forceinline__ void ldmatrix_x4(unsigned int r[4], const void *p) { treni_emu_ldmatrix_x4(r, p, false); }
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int r[4], const void *p) { treni_emu_ldmatrix_x4(r, p, true); }
#endif

// cp_async16 copies 16 bytes from global to shared memory without passing
// through registers (cp.async.cg, Ampere and later): the copy runs while
// the thread goes on, and is only known to have landed after
// cp_async_wait<N> (every committed group but the newest N is done) and,
// for other threads' copies, a __syncthreads after it. valid = false
// fills the 16 bytes with zeros (src-size 0) and reads nothing; src must
// still be a mapped address. cp_async_commit closes the group of copies
// issued since the last commit. In the CPU emulator each copy is made when
// its thread waits for its group (the latest moment the hardware allows),
// so a read before the wait sees stale shared memory there too.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
	unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#else
void treni_emu_cp_async16(void *dst, const void *src, bool valid);
void treni_emu_cp_async_commit();
void treni_emu_cp_async_wait(int n);
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) { treni_emu_cp_async16(dst, src, valid); }
__device__ __forceinline__ void cp_async_commit() { treni_emu_cp_async_commit(); }
template <int N> __device__ __forceinline__ void cp_async_wait() { treni_emu_cp_async_wait(N); }
#endif

// ld_stream16 loads 16 bytes of global memory that the kernel reads once
// (weights streamed through a GEMV): read-only path, no L1 allocation,
// and a 256-byte L2 prefetch, since neighbouring lanes and warps read the
// rest of the row's neighbourhood right after. p must be 16-byte aligned.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint4 ld_stream16(const void *p) {
	uint4 r;
	asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
		: "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
	return r;
}
#else
__device__ __forceinline__ uint4 ld_stream16(const void *p) { return *(const uint4 *)p; }
#endif

#endif
