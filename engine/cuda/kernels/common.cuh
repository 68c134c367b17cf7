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
// register: lo in the low half (the lower column or row index).
__device__ __forceinline__ unsigned int pack_bf16x2(float lo, float hi) {
	return (unsigned int)f2bf(lo) | ((unsigned int)f2bf(hi) << 16);
}

// split_bf16x2 writes a and b as hi + lo pairs of bf16 (hi = bf16(x),
// lo = bf16(x − hi)), packed like pack_bf16x2: an mma operand with about
// 16 significant bits, in two products.
__device__ __forceinline__ void split_bf16x2(float a, float b, unsigned int &hi, unsigned int &lo) {
	bf16 ha = f2bf(a), hb = f2bf(b);
	hi = (unsigned int)ha | ((unsigned int)hb << 16);
	lo = pack_bf16x2(a - bf2f(ha), b - bf2f(hb));
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

#endif
