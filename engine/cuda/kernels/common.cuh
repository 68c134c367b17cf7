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

#endif
