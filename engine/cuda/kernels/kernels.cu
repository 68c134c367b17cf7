// treni-top's CUDA kernels: everything in a decoder step but the GEMMs of
// many rows (cuBLASLt runs those; gemm_skinny runs the few-row ones).
// Storage is bf16 (weights, activations, KV cache) and the residual stream
// is fp32; all arithmetic is fp32. The element-wise kernels are simple
// (one block per row); attention and gemm_skinny run on the tensor cores.
// Every kernel is extern "C" so the Go side finds it by name in the fatbin.
//
// Shapes: T tokens in the step, H hidden size, nh query heads, nkv KV
// heads, hd head dim (even, at most 256), I intermediate size.
//
// Paged KV layout per layer, K and V separately:
//   cache[((block * nkv + kvHead) * blockSize + slot) * hd + d]
// A token's slot index is block*blockSize + pos%blockSize (computed on the
// host from the scheduler's block table); a negative slot is a padding
// token (graph-bucket padding) and stores nothing.
#include "common.cuh"

// ATT_THREADS threads per attention block, ATT_WARPS warps; a lane holds
// ATT_PAIRS pairs of a head's dims, so hd <= 64 * ATT_PAIRS = 256.
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_PAIRS 4
// Keys each warp loads before it scores them (memory-level parallelism).
#define ATT_KEYS 4

extern "C" {

// embed_bf16: x[t][:] = table[tokens[t]][:] widened to fp32 (the residual
// stream). grid (T), any block size.
__global__ void embed_bf16(float *x, const bf16 *table, const int *tokens, int H) {
	KERNEL_ENTRY();
	int t = blockIdx.x;
	const bf16 *row = table + (long long)tokens[t] * H;
	float *dst = x + (long long)t * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = bf2f(row[i]);
}

// rmsnorm: out[t] = x[r] / sqrt(mean(x[r]^2) + eps) * w with r = t, or
// r = rows[t] when rows is not null (the final norm of the rows that want
// logits, gathered for the LM head in the same pass), fp32 in, bf16 out
// (the next GEMM's input). grid (T, or rows' length), block a multiple of
// 32.
//
// The norm weight is no kernel's output, so each thread loads its share
// of it before KERNEL_ENTRY: under PDL that load's latency passes while
// the kernel ahead finishes, instead of after the sum of squares (a
// batch-1 decode step runs two of these a layer, ~2.5 µs each on the
// H100, docs/BENCHMARKS.md). Where the row is whole float4s and fits
// RMS_VEC of them a thread (the launcher sizes the block for two), each
// thread reads its part of the row once, with 16-byte loads all issued
// before the sum, and keeps it in registers for the output; other rows
// take the looping form, which reads the row twice.
#define RMS_VEC 4
#define RMS_PREFETCH 4
__device__ __forceinline__ void rmsnorm_body(bf16 *out, const float *x, const float *w, int H, float eps, const int *rows) {
	__shared__ float red[32];
	const int t = blockIdx.x, n4 = H >> 2;
	if ((H & 3) == 0 && n4 <= RMS_VEC * (int)blockDim.x && ((unsigned long long)x & 15) == 0 && ((unsigned long long)w & 15) == 0) {
		const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
		float4 wv[RMS_VEC], xv[RMS_VEC];
#pragma unroll
		for (int j = 0; j < RMS_VEC; j++) {
			int i = threadIdx.x + j * blockDim.x;
			wv[j] = i < n4 ? ((const float4 *)w)[i] : zero;
		}
		KERNEL_ENTRY();
		const float4 *xr = (const float4 *)(x + (long long)(rows ? rows[t] : t) * H);
		float ss = 0.f;
#pragma unroll
		for (int j = 0; j < RMS_VEC; j++) {
			int i = threadIdx.x + j * blockDim.x;
			xv[j] = i < n4 ? xr[i] : zero;
		}
#pragma unroll
		for (int j = 0; j < RMS_VEC; j++) ss += xv[j].x * xv[j].x + xv[j].y * xv[j].y + xv[j].z * xv[j].z + xv[j].w * xv[j].w;
		ss = block_sum(ss, red);
		const float scale = rsqrtf(ss / (float)H + eps);
		uint2 *o = (uint2 *)(out + (long long)t * H);
#pragma unroll
		for (int j = 0; j < RMS_VEC; j++) {
			int i = threadIdx.x + j * blockDim.x;
			if (i < n4)
				o[i] = make_uint2(pack_bf16x2(xv[j].x * scale * wv[j].x, xv[j].y * scale * wv[j].y),
					pack_bf16x2(xv[j].z * scale * wv[j].z, xv[j].w * scale * wv[j].w));
		}
		return;
	}
	float wv[RMS_PREFETCH];
#pragma unroll
	for (int j = 0; j < RMS_PREFETCH; j++) {
		int i = threadIdx.x + j * blockDim.x;
		wv[j] = i < H ? w[i] : 0.f;
	}
	KERNEL_ENTRY();
	const float *xr = x + (long long)(rows ? rows[t] : t) * H;
	float ss = 0.f;
	for (int i = threadIdx.x; i < H; i += blockDim.x) ss += xr[i] * xr[i];
	ss = block_sum(ss, red);
	float scale = rsqrtf(ss / (float)H + eps);
	bf16 *o = out + (long long)t * H;
#pragma unroll
	for (int j = 0; j < RMS_PREFETCH; j++) {
		int i = threadIdx.x + j * blockDim.x;
		if (i < H) o[i] = f2bf(xr[i] * scale * wv[j]);
	}
	for (int i = threadIdx.x + RMS_PREFETCH * blockDim.x; i < H; i += blockDim.x) o[i] = f2bf(xr[i] * scale * w[i]);
}
__global__ void __launch_bounds__(1024) rmsnorm(bf16 *out, const float *x, const float *w, int H, float eps, const int *rows) {
	rmsnorm_body(out, x, w, H, eps, rows);
}

// add_rmsnorm: x[t] += d[t] (residual add), then out[t] = RMSNorm(x[t]) * w.
// The add is fused with the norm that always follows it, so the residual
// row is read once. grid (T), block a multiple of 32.
__global__ void add_rmsnorm(float *x, const float *d, bf16 *out, const float *w, int H, float eps) {
	KERNEL_ENTRY();
	__shared__ float red[32];
	int t = blockIdx.x;
	float *xr = x + (long long)t * H;
	const float *dr = d + (long long)t * H;
	float ss = 0.f;
	for (int i = threadIdx.x; i < H; i += blockDim.x) {
		float v = xr[i] + dr[i];
		xr[i] = v;
		ss += v * v;
	}
	ss = block_sum(ss, red);
	float scale = rsqrtf(ss / (float)H + eps);
	bf16 *o = out + (long long)t * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] = f2bf(xr[i] * scale * w[i]);
}

// add_f32: x[i] += d[i] for n elements. grid ceil(n/block).
__global__ void add_f32(float *x, const float *d, int n) {
	KERNEL_ENTRY();
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] += d[i];
}

// bias_add_bf16: y[r][c] += b[c] (Qwen2's q/k/v biases when they are not
// folded into qk_norm_rope_store). grid (rows), any block size.
__global__ void bias_add_bf16(bf16 *y, const float *b, int cols) {
	KERNEL_ENTRY();
	bf16 *row = y + (long long)blockIdx.x * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] = f2bf(bf2f(row[c]) + b[c]);
}

// bias_add_f32: x[r][c] += b[c] on the f32 residual (Llama's o_proj bias
// after the GEMM accumulated into the residual). grid (rows), any block.
__global__ void bias_add_f32(float *x, const float *b, int cols) {
	KERNEL_ENTRY();
	float *row = x + (long long)blockIdx.x * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] += b[c];
}

// swiglu: out[t][i] = silu(gu[t][i]) * gu[t][I+i], where gu is the fused
// gate|up projection [T][2I]. grid (T, column blocks), any block size: a
// decode step of a few tokens spreads each row over many blocks (one
// block per row left a batch-1 step's 9,728 columns on one SM: 13% of
// the step on the H100). When I is a multiple of 8 each thread takes 8
// columns with 16-byte loads and stores (2-byte ones held a 256-token
// prefill's SwiGLU to a fifth of HBM bandwidth); the Go launcher sizes the
// grid for that.
__global__ void swiglu(bf16 *out, const bf16 *gu, int I) {
	KERNEL_ENTRY();
	int t = blockIdx.x;
	const bf16 *g = gu + (long long)t * 2 * I;
	const bf16 *u = g + I;
	bf16 *o = out + (long long)t * I;
	if ((I & 7) == 0) {
		for (int i = (blockIdx.y * blockDim.x + threadIdx.x) * 8; i < I; i += blockDim.x * gridDim.y * 8) {
			*(uint4 *)(o + i) = swiglu8(g + i, u + i);
		}
		return;
	}
	for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < I; i += blockDim.x * gridDim.y) o[i] = swiglu1(g[i], u[i]);
}

// rope_table: cs[t][i] = (cos, sin) of pos[t]·inv_freq[i] for i < half,
// the angles of a step's tokens, computed once per step in fp64 (so that
// long positions keep their precision) and read by every layer's
// qk_norm_rope_store. (Each layer computing its own held a 256-token
// prefill step to 36 × 655k fp64 sin/cos.) grid (T), any block size.
__global__ void rope_table(float *cs, const double *inv_freq, const int *pos, int half) {
	KERNEL_ENTRY();
	int t = blockIdx.x;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		double ang = (double)pos[t] * inv_freq[i];
		cs[((long long)t * half + i) * 2] = (float)cos(ang);
		cs[((long long)t * half + i) * 2 + 1] = (float)sin(ang);
	}
}

// qk_norm_rope_store works on one head of one token of the fused QKV
// projection qkv [T][(nh + 2 nkv) hd] (bf16, in place):
//   + bias (Qwen2; null for none),
//   per-head RMSNorm with qnorm/knorm (Qwen3; null for none) on q and k,
//   neox RoPE (rotate_half) on q and k with the step's cos/sin table cs
//   [T][hd/2][2] (rope_table),
// then writes q back in place and stores k and v at slots[t] of this
// layer's paged cache.
//
// One warp per head, ROPE_HEADS heads per block: lane l owns the rotary
// pairs (i, i+hd/2) for V consecutive i from V·l, then V·(l+32), …
// (hd ≤ 64·ROPE_PAIRS), and the head's norm is a warp reduction, with no
// barrier. V is 2 where hd is a multiple of 4 (every model here): a lane
// then moves two bf16 in one 4-byte load or store, its two norm weights and
// biases in one 8-byte load and its two (cos, sin) in one 16-byte load
// (one value at a time, a warp's accesses were 64 bytes: a 2 × 1,024
// prefill step's 36 calls took 1.58 ms against 1.41 on the H100). (A
// block of 128 threads per head, half of them idle and meeting at two
// barriers, held a 256-token prefill's call to 18 µs.)
// grid (T, ceil((nh + 2 nkv) / ROPE_HEADS)), block 32·ROPE_HEADS.
#define ROPE_HEADS 4
#define ROPE_PAIRS 4

} // extern "C"

// rope_ld_f32, rope_ld_bf16 and rope_st_bf16 move V consecutive values
// (V = 2: one vector access; the caller keeps it aligned).
template <int V>
__device__ __forceinline__ void rope_ld_f32(const float *p, float *o) {
	if constexpr (V == 2) {
		float2 v = *(const float2 *)p;
		o[0] = v.x;
		o[1] = v.y;
	} else o[0] = p[0];
}
template <int V>
__device__ __forceinline__ void rope_ld_bf16(const bf16 *p, float *o) {
	if constexpr (V == 2) {
		unsigned int u = *(const unsigned int *)p;
		o[0] = __uint_as_float(u << 16);
		o[1] = __uint_as_float(u & 0xffff0000u);
	} else o[0] = bf2f(p[0]);
}
template <int V>
__device__ __forceinline__ void rope_st_bf16(bf16 *p, const float *v) {
	if constexpr (V == 2) *(unsigned int *)p = (unsigned int)f2bf(v[0]) | ((unsigned int)f2bf(v[1]) << 16);
	else p[0] = f2bf(v[0]);
}

template <int V>
__device__ __forceinline__ void qk_norm_rope_store_body(bf16 *qkv, const float *bias, const float *qnorm,
	const float *knorm, const float *cs, const int *slots, bf16 *kcache, bf16 *vcache, int nh, int nkv, int hd,
	int block_size, float eps) {
	constexpr int K = ROPE_PAIRS / V; // steps of V pairs a lane takes
	int t = blockIdx.x, h = blockIdx.y * ROPE_HEADS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	int half = hd / 2;
	bool isq = h < nh, isk = !isq && h < nh + nkv;
	const float *b = bias && h < nh + 2 * nkv ? bias + h * hd : 0;
	const float *nw = isq ? qnorm : (isk ? knorm : 0);
	// The bias and the norm weights are no kernel's output: loaded before
	// KERNEL_ENTRY, their latency passes under PDL while the QKV GEMM
	// finishes (as rmsnorm's weight does).
	float blo[K][V], bhi[K][V], nlo[K][V], nhi[K][V];
#pragma unroll
	for (int k = 0; k < K; k++) {
		int i = V * (lane + 32 * k);
#pragma unroll
		for (int v = 0; v < V; v++) blo[k][v] = bhi[k][v] = nlo[k][v] = nhi[k][v] = 0.f;
		if (i < half) {
			if (b) {
				rope_ld_f32<V>(b + i, blo[k]);
				rope_ld_f32<V>(b + i + half, bhi[k]);
			}
			if (nw) {
				rope_ld_f32<V>(nw + i, nlo[k]);
				rope_ld_f32<V>(nw + i + half, nhi[k]);
			}
		}
	}
	KERNEL_ENTRY();
	if (h >= nh + 2 * nkv) return; // the last block's spare warps (no barrier below)
	int stride = (nh + 2 * nkv) * hd;
	bf16 *row = qkv + (long long)t * stride + h * hd;
	// Every load a lane needs is issued here, at once: its values, the
	// token's slot and its (cos, sin), so the warp waits out one round trip
	// to memory instead of three in a row (row, then slot, then table
	// after the norm).
	const int slot = slots[t];
	const bool rot = isq || isk;
	float lo[K][V], hi[K][V], r[K][2 * V];
#pragma unroll
	for (int k = 0; k < K; k++) {
		int i = V * (lane + 32 * k);
#pragma unroll
		for (int v = 0; v < V; v++) lo[k][v] = hi[k][v] = r[k][2 * v] = r[k][2 * v + 1] = 0.f;
		if (i < half) {
			rope_ld_bf16<V>(row + i, lo[k]);
			rope_ld_bf16<V>(row + i + half, hi[k]);
			if (rot) {
				// (cos, sin) of i … i+V−1: V pairs, one 16-byte load for two.
				const float *rp = cs + ((long long)t * half + i) * 2;
				if constexpr (V == 2) {
					float4 c4 = *(const float4 *)rp;
					r[k][0] = c4.x;
					r[k][1] = c4.y;
					r[k][2] = c4.z;
					r[k][3] = c4.w;
				} else {
					r[k][0] = rp[0];
					r[k][1] = rp[1];
				}
			}
		}
	}
	if (b)
#pragma unroll
		for (int k = 0; k < K; k++)
#pragma unroll
			for (int v = 0; v < V; v++) {
				// Round after the bias add as a bf16 linear layer would.
				lo[k][v] = bf2f(f2bf(lo[k][v] + blo[k][v]));
				hi[k][v] = bf2f(f2bf(hi[k][v] + bhi[k][v]));
			}
	if (nw) {
		float ss = 0.f;
#pragma unroll
		for (int k = 0; k < K; k++)
#pragma unroll
			for (int v = 0; v < V; v++) ss += lo[k][v] * lo[k][v] + hi[k][v] * hi[k][v];
		ss = warp_sum(ss);
		float scale = rsqrtf(ss / (float)hd + eps);
#pragma unroll
		for (int k = 0; k < K; k++)
#pragma unroll
			for (int v = 0; v < V; v++) {
				lo[k][v] = lo[k][v] * scale * nlo[k][v];
				hi[k][v] = hi[k][v] * scale * nhi[k][v];
			}
	}
	bf16 *dst = row;
	if (!isq) {
		if (slot < 0) return; // padding token: nothing to store
		int g = isk ? h - nh : h - nh - nkv;
		long long blk = slot / block_size, off = slot % block_size;
		dst = (isk ? kcache : vcache) + ((blk * nkv + g) * block_size + off) * hd;
	}
#pragma unroll
	for (int k = 0; k < K; k++) {
		int i = V * (lane + 32 * k);
		if (i >= half) continue;
		if (rot)
#pragma unroll
			for (int v = 0; v < V; v++) {
				float a = lo[k][v], c = hi[k][v], co = r[k][2 * v], sn = r[k][2 * v + 1];
				lo[k][v] = a * co - c * sn;
				hi[k][v] = c * co + a * sn;
			}
		rope_st_bf16<V>(dst + i, lo[k]);
		rope_st_bf16<V>(dst + i + half, hi[k]);
	}
}
extern "C" {

__global__ void __launch_bounds__(32 * ROPE_HEADS) qk_norm_rope_store(bf16 *qkv, const float *bias, const float *qnorm,
	const float *knorm, const float *cs, const int *slots, bf16 *kcache, bf16 *vcache, int nh, int nkv, int hd,
	int block_size, float eps) {
	if ((hd & 3) == 0) qk_norm_rope_store_body<2>(qkv, bias, qnorm, knorm, cs, slots, kcache, vcache, nh, nkv, hd, block_size, eps);
	else qk_norm_rope_store_body<1>(qkv, bias, qnorm, knorm, cs, slots, kcache, vcache, nh, nkv, hd, block_size, eps);
}

// paged_attention: causal grouped-query attention over the paged KV cache
// for prefill chunks and decode tokens alike: query token t (position
// pos[t] of sequence tok_seq[t]) attends to positions [0, pos[t]] through
// that sequence's block table. The K/V of every token of the step must
// already be stored. q has row stride q_stride (it may live inside the
// fused qkv buffer); out is [T][nh hd]. grid (T, nh), block ATT_THREADS.
//
// One block per (token, query head); each of its ATT_WARPS warps takes
// every ATT_WARPS-th key, ATT_KEYS at a time, and keeps its own online softmax
// (max, sum, output). A warp reads a key's K and V rows whole and
// coalesced (lane i holds dims 2i, 2i+1, 2i+64, ...), scores it with a
// warp reduction, and needs no barrier; the warps merge once at the end.
// The block table is read 32 entries at a time, one per lane, and handed
// out by shuffles. (The first version gave each thread a key and walked
// its 128 dims serially, reading the block table for every key in the V
// loop: 89% of a 64-sequence decode step on the H100.)
__global__ void paged_attention(bf16 *out, const bf16 *q, int q_stride, const bf16 *kcache, const bf16 *vcache,
	const int *tok_seq, const int *pos, const int *block_tables, int bt_stride,
	int nh, int nkv, int hd, int block_size, float scale) {
	KERNEL_ENTRY();
	__shared__ float wm[ATT_WARPS], wl[ATT_WARPS];
	__shared__ float wacc[ATT_WARPS][ATT_PAIRS * 64];
	int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int g = h / (nh / nkv);
	int n = pos[t] + 1;
	const int *bt = block_tables + (long long)tok_seq[t] * bt_stride;
	const bf16 *qr = q + (long long)t * q_stride + h * hd;
	float qv[2 * ATT_PAIRS], acc[2 * ATT_PAIRS];
#pragma unroll
	for (int k = 0; k < ATT_PAIRS; k++) {
		int d = 2 * lane + 64 * k;
		bool in = d < hd;
		qv[2 * k] = in ? bf2f(qr[d]) * scale : 0.f;
		qv[2 * k + 1] = in ? bf2f(qr[d + 1]) * scale : 0.f;
		acc[2 * k] = acc[2 * k + 1] = 0.f;
	}
	float m = NEG_INF, l = 0.f;
	long long gstride = (long long)block_size * hd; // one KV head of one block
	// Keys in spans of 32 blocks: lane i holds the span's i-th block id.
	int span = 32 * block_size;
	for (int c0 = 0; c0 < n; c0 += span) {
		int bi = c0 / block_size + lane;
		int myblk = (bi * block_size < n) ? bt[bi] : 0;
		int c1 = min(n, c0 + span);
		for (int j0 = c0 + w; j0 < c1; j0 += ATT_KEYS * ATT_WARPS) {
			// ATT_KEYS keys per warp per round, all loads issued first; a
			// key past c1 repeats key j0 and is given weight 0.
			unsigned int kk[ATT_KEYS][ATT_PAIRS], vv[ATT_KEYS][ATT_PAIRS];
#pragma unroll
			for (int u = 0; u < ATT_KEYS; u++) {
				int j = j0 + u * ATT_WARPS;
				j = j < c1 ? j : j0;
				int blk = __shfl_sync(0xffffffffu, myblk, (j - c0) / block_size);
				long long o = ((long long)blk * nkv + g) * gstride + (long long)(j % block_size) * hd;
				const unsigned int *kr = (const unsigned int *)(kcache + o), *vr = (const unsigned int *)(vcache + o);
#pragma unroll
				for (int k = 0; k < ATT_PAIRS; k++) {
					int d = 2 * lane + 64 * k;
					kk[u][k] = d < hd ? kr[d >> 1] : 0u;
					vv[u][k] = d < hd ? vr[d >> 1] : 0u;
				}
			}
			float sc[ATT_KEYS];
			float mn = m;
#pragma unroll
			for (int u = 0; u < ATT_KEYS; u++) {
				float s = 0.f;
#pragma unroll
				for (int k = 0; k < ATT_PAIRS; k++)
					s += qv[2 * k] * bf2f((bf16)(kk[u][k] & 0xffffu)) + qv[2 * k + 1] * bf2f((bf16)(kk[u][k] >> 16));
				s = warp_sum(s);
				sc[u] = j0 + u * ATT_WARPS < c1 ? s : NEG_INF;
				mn = fmaxf(mn, sc[u]); // finite: key j0 < c1 always counts
			}
			float corr = expf(m - mn);
			l *= corr;
#pragma unroll
			for (int k = 0; k < 2 * ATT_PAIRS; k++) acc[k] *= corr;
#pragma unroll
			for (int u = 0; u < ATT_KEYS; u++) {
				float p = expf(sc[u] - mn); // 0 for a key past the end
				l += p;
#pragma unroll
				for (int k = 0; k < ATT_PAIRS; k++) {
					acc[2 * k] += p * bf2f((bf16)(vv[u][k] & 0xffffu));
					acc[2 * k + 1] += p * bf2f((bf16)(vv[u][k] >> 16));
				}
			}
			m = mn;
		}
	}
	// Merge the warps: a warp that saw no key has m = -inf and weight 0.
	if (lane == 0) { wm[w] = m; wl[w] = l; }
#pragma unroll
	for (int k = 0; k < ATT_PAIRS; k++) {
		int d = 2 * lane + 64 * k;
		wacc[w][d] = acc[2 * k];
		wacc[w][d + 1] = acc[2 * k + 1];
	}
	__syncthreads();
	float M = NEG_INF;
#pragma unroll
	for (int i = 0; i < ATT_WARPS; i++) M = fmaxf(M, wm[i]);
	float L = 0.f, f[ATT_WARPS];
#pragma unroll
	for (int i = 0; i < ATT_WARPS; i++) {
		f[i] = wm[i] == NEG_INF ? 0.f : expf(wm[i] - M);
		L += wl[i] * f[i];
	}
	float inv = 1.f / L;
	bf16 *o = out + (long long)t * nh * hd + h * hd;
	for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
		float a = 0.f;
#pragma unroll
		for (int i = 0; i < ATT_WARPS; i++) a += wacc[i][d] * f[i];
		o[d] = f2bf(a * inv);
	}
}

} // extern "C"

// ---- tensor-core attention ----------------------------------------------
//
// attn_mma is the attention of every step shape (prefill chunks, decode
// tokens, both mixed) on the tensor cores. A block takes one tile — up to
// FA_WARPS·(FA_ROWS/G) consecutive tokens of one sequence, G = nh/nkv
// query heads per KV head — for one KV head, so the G heads of a GQA group
// and the tile's tokens share every K/V row it reads: each key tile
// (FA_KEYS keys) is read from the paged cache once into shared memory and
// used by up to 128 query rows (paged_attention reads it once per query
// head and token). In this (the four-warp) form warp w owns FA_ROWS query
// rows, row r = (token w·(FA_ROWS/G) + r/G, head r%G of the group), as two
// m-tiles of 16 that share each K and V fragment it loads; the one-warp
// and mid forms below give a warp one m-tile. S = Q·Kᵀ and O += P·V are
// mma.m16n8k16 (bf16 in, fp32 accumulate), the softmax is online in fp32
// (flash-attention 2), P enters the second product as a bf16 pair (hi +
// lo).
//
// Split-KV: gridDim.z = Z splits the tile's keys [0, n) into Z ranges of
// whole key tiles, for when tiles × KV heads alone would leave the GPU
// idle (decode of a few long sequences). Z = 1, or a split that covers
// all of a tile's keys, writes out directly; otherwise each split writes
// its unnormalised output and (max, sum) to part_acc and part_ml, and
// attn_combine merges them. Each tile divides its own key count, so a
// CUDA graph captured with a fixed Z stays right as contexts grow. The
// three forms of a step are three launches, each with its own Z (what
// fills a wave of its blocks), over one scratch of zs ≥ Z splits a row:
// a row's split-0 block marks its splits from Z to zs empty, so
// attn_combine (over zs) merges only what the row's launch wrote. A
// decode step's one-token tiles run on attn_dec (below) where the shape
// has it, with the same grid, splits and outputs.
//
// tiles holds (first token row, token count) per tile; grid (tiles, nkv,
// Z), block WARPS·32 (FA_WARPS, or 1 for attn_mma_w1_*, whose tiles hold
// at most 16/G tokens). HD (the head dim) is 64 or 128; G ≤ 16. The
// four-warp form takes FA_SMEM_BYTES(HD) of dynamic shared memory. Tiles
// of at most 64 rows (64/G tokens: a prompt's tail, a short chunk) run on
// attn_mma_mid_*: four warps of one m-tile (16 rows) each, Q in
// registers, 64-key tiles; on the two-m-tile form half its warps would
// idle and the other half do the work of all four (the 64-stream run on
// cached prompts, whose uncached tails are such tiles, went from 38.5 to
// 49 ms TTFT p50 on the H100).
//
// Two m-tiles a warp (FA_ROWS 32): with one (16 rows), each K fragment a
// warp loaded fed two mma and the warps stalled on dependent instructions
// (H100 Nsight Compute: no eligible warp 62% of cycles, 2 × 1,024 prefill
// attention at ~110 TFLOP/s; docs/BENCHMARKS.md).
#define FA_WARPS 4
#define FA_ROWS 32
// 32-key tiles: with 64 the two m-tiles' scores did not fit beside O in
// registers (300 bytes spilled) and prefill attention was slower than
// with 16 rows a warp.
#define FA_KEYS 32
#define FA_SMEM_BYTES(HD) ((FA_WARPS * FA_ROWS + 2 * FA_KEYS) * ((HD) + 8) * 2)
// The one-warp form (attn_mma_w1_*) for tiles that fit in a warp (decode
// tokens, short chunk ends): a four-warp block on such a tile computes on
// one warp while three only load, and holds the SM's registers and shared
// memory for all four. One warp per block with 32-key tiles (17 KB of
// shared memory) lets eight such blocks share an SM, eight warps computing.
#define FA1_KEYS 32
// The mid form's key tile (attn_mma_mid_*: 35 KB of static shared memory).
#define FA_MID_KEYS 64

// attn_load_tile issues the cp.async copies of KEYS keys from k0 of one
// KV head's paged cache (K or V) into dst, this thread's share of them;
// keys at and past ke are zero-filled (P = 0 must not meet NaN). POW2:
// block_size is 1 << bs_shift.
template <int HD, int WARPS, int KEYS, bool POW2>
__device__ __forceinline__ void attn_load_tile(bf16 (*dst)[HD + 8], const bf16 *cache, const int *bt, int k0, int ke, int block_size,
	int bs_shift, int nkv, int g) {
	constexpr int CH = HD / 8;                          // 16-byte chunks per key row
	constexpr int LPT = KEYS * CH / (WARPS * 32); // chunks of K (and of V) per thread per tile
	const long long gstride = (long long)block_size * HD;
#pragma unroll
	for (int u = 0; u < LPT; u++) {
		int c = threadIdx.x + u * WARPS * 32, key = c / CH, part = c % CH, j = k0 + key;
		bool ok = j < ke;
		const bf16 *src = cache;
		if (ok) {
			int bi = POW2 ? j >> bs_shift : j / block_size, bo = POW2 ? j & (block_size - 1) : j - bi * block_size;
			src += ((long long)bt[bi] * nkv + g) * gstride + (long long)bo * HD + part * 8;
		}
		cp_async16(&dst[key][part * 8], src, ok);
	}
}

// mark_split_empty writes split pr's (max, sum) as an empty split's, −inf
// and 0: weight zero in attn_combine. attn_mma_body marks a split so when
// it has no key, when a row's one split had them all (the row is written
// out directly), and for the splits of the scratch its launch lacks.
__device__ __forceinline__ void mark_split_empty(float *part_ml, long long pr) {
	part_ml[2 * pr] = NEG_INF;
	part_ml[2 * pr + 1] = 0.f;
}

template <int HD, int WARPS, int KEYS, int MT>
__device__ __forceinline__ void attn_mma_body(bf16 *out, float *part_acc, float *part_ml, const bf16 *q, int q_stride,
	const bf16 *kcache, const bf16 *vcache, const int *tok_seq, const int *pos, const int *block_tables, int bt_stride,
	const int *tiles, int nh, int nkv, int block_size, float scale_log2, int zs) {
	KERNEL_ENTRY();
	// Rows padded by 8 bf16 (16 bytes): the fragment reads of 8 rows at
	// one column then fall in 8 different bank quads. The one-warp and mid
	// forms keep Q in registers and K/V tiles in static shared memory; the
	// two-m-tile form has twice the rows a warp, and Q's fragments would
	// not fit beside them in registers, so Q waits in shared memory too:
	// more than the 48 KB a block may declare statically, so it is the
	// launch's dynamic shared memory (FA_SMEM_BYTES).
	bf16 (*sq)[HD + 8], (*sk)[HD + 8], (*sv)[HD + 8];
	if constexpr (MT == 1) {
		__shared__ __align__(16) bf16 k_tile[KEYS][HD + 8];
		__shared__ __align__(16) bf16 v_tile[KEYS][HD + 8];
		sq = nullptr;
		sk = k_tile;
		sv = v_tile;
	} else {
		DYNAMIC_SHARED(dyn);
		sq = (bf16 (*)[HD + 8])dyn;
		sk = sq + WARPS * 16 * MT;
		sv = sk + KEYS;
	}
	constexpr int NR = 2 * MT; // rows a thread holds: gid + 8·i of each of its warp's MT m-tiles
	const int G = nh / nkv, TPW = 16 * MT / G;
	// The grid is (tiles, nkv, Z) and blocks start in x-fastest order. The
	// four-warp form reads it KV-head-fastest instead, so the nkv blocks of
	// one tile start together and the tiles start in the order of the
	// list, longest first (stepMeta): the longest blocks start in the first
	// wave and the last wave holds short ones. Tile-fastest order started
	// every head's longest tiles last: 2 × 1,024 prefill attention took
	// 6.38 ms against 5.56 (H100, docs/BENCHMARKS.md). The one-warp form's
	// tiles (decode tokens) are alike in length, and there the division
	// cost registers the kernel does not have (it spilled).
	int tile = blockIdx.x, g = blockIdx.y;
	if (WARPS > 1) {
		const int lin = blockIdx.y * gridDim.x + blockIdx.x;
		tile = lin / gridDim.y;
		g = lin - tile * gridDim.y;
	}
	const int z = blockIdx.z, Z = gridDim.z;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
	const int t0 = tiles[2 * tile], cnt = tiles[2 * tile + 1];
	const int *bt = block_tables + (long long)tok_seq[t0] * bt_stride;
	const int n = pos[t0 + cnt - 1] + 1; // keys the tile's last token sees
	int per = (n + Z - 1) / Z;
	per = (per + KEYS - 1) / KEYS * KEYS;
	const int kb = z * per, ke = min(n, kb + per);
	const bool whole = kb == 0 && ke == n; // this split has every key

	// This thread's rows: i = 2·mt + h is row gid + 8h of m-tile mt, the
	// warp's row r = 16·mt + gid + 8h = (token w·TPW + r/G, head r%G).
	int rtok[NR], rhead[NR], rpos[NR];
#pragma unroll
	for (int i = 0; i < NR; i++) {
		int r = 16 * (i >> 1) + gid + 8 * (i & 1), lt = w * TPW + r / G;
		bool ok = r < TPW * G && lt < cnt;
		rtok[i] = t0 + (ok ? lt : 0);
		rhead[i] = g * G + r % G;
		rpos[i] = ok ? pos[rtok[i]] : -1;
	}
	if (kb >= n) {
		// An empty split: weight zero in the combine.
		if (tig == 0)
#pragma unroll
			for (int i = 0; i < NR; i++)
				if (rpos[i] >= 0) mark_split_empty(part_ml, ((long long)rtok[i] * nh + rhead[i]) * zs + z);
		return;
	}
	const bool active = w * TPW < cnt;
	int hi_pos = -1, lo_pos = 0x7fffffff;
#pragma unroll
	for (int i = 0; i < NR; i++) {
		hi_pos = max(hi_pos, rpos[i]);
		lo_pos = min(lo_pos, rpos[i] < 0 ? 0x7fffffff : rpos[i]);
	}
	const int wmax = warp_max_int(hi_pos); // the warp's last key
	// The smallest position among the warp's valid rows (rows past the
	// tile left out): the last key every one of them sees, so key tiles
	// that end by it and inside the split need no mask.
	const int wmin = -warp_max_int(-lo_pos);

	// Q: the one-warp form's A fragments in registers; the four-warp
	// form's rows copied into sq (zeros for rows past the tile), in the
	// first cp.async group with K(0).
	unsigned int qa[MT == 1 ? HD / 16 : 1][4];
	if constexpr (MT == 1) {
#pragma unroll
		for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
			for (int j = 0; j < 4; j++) {
				int i = j & 1, col = ks * 16 + tig * 2 + (j >> 1) * 8;
				const bf16 *qr = q + (long long)rtok[i] * q_stride + rhead[i] * HD + col;
				qa[ks][j] = rpos[i] >= 0 ? *(const unsigned int *)qr : 0u;
			}
	} else {
		constexpr int CH = HD / 8, R = 16 * MT;
		for (int c = threadIdx.x; c < WARPS * R * CH; c += WARPS * 32) {
			int row = c / CH, part = c % CH, r = row % R, lt = (row / R) * TPW + r / G;
			bool ok = r < TPW * G && lt < cnt;
			const bf16 *src = q + (long long)(t0 + (ok ? lt : 0)) * q_stride + (g * G + r % G) * HD + part * 8;
			cp_async16(&sq[row][part * 8], src, ok);
		}
	}
	float o[MT][HD / 8][4];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int d = 0; d < HD / 8; d++) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.f;
	float m[NR], l[NR];
#pragma unroll
	for (int i = 0; i < NR; i++) m[i] = NEG_INF, l[i] = 0.f;
	// K and V tiles travel by cp.async straight into shared memory, one
	// stage ahead of their use: V(i) loads while S(i) = Q·K(i)ᵀ and its
	// softmax run, K(i+1) while O += P·V(i) runs. (Staging each tile
	// through registers, loaded only after the previous tile was consumed,
	// left each warp waiting on its loads with nothing else to do: a
	// 64-sequence decode step's attention ran at about 1.2 TB/s on the
	// H100.) A block size that is a power of two (the default 16) finds
	// each key's block by a shift instead of an integer division.
	const bool bs_pow2 = (block_size & (block_size - 1)) == 0;
	const int bs_shift = __popc(block_size - 1);
	auto load = [&](bf16 (*dst)[HD + 8], const bf16 *cache, int k0) {
		if (bs_pow2) attn_load_tile<HD, WARPS, KEYS, true>(dst, cache, bt, k0, ke, block_size, bs_shift, nkv, g);
		else attn_load_tile<HD, WARPS, KEYS, false>(dst, cache, bt, k0, ke, block_size, bs_shift, nkv, g);
	};
	load(sk, kcache, kb);
	cp_async_commit();
	for (int k0 = kb; k0 < ke; k0 += KEYS) {
		// sv is free: every warp passed the barrier after the previous P·V.
		load(sv, vcache, k0);
		cp_async_commit();
		cp_async_wait<1>(); // this thread's part of K(i) (and of Q)
		__syncthreads();    // everyone's
		const bool use = active && k0 <= wmax; // some row of this warp sees these keys
		float s[MT][KEYS / 8][4]; // scores: read only where use holds
		if (use) {
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int nt = 0; nt < KEYS / 8; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
			// K fragments by ldmatrix: matrices (key octet nt, dims
			// ks·16 + 0..7 | 8..15) and the same for octet nt+1, each
			// used by every m-tile; the four-warp form's Q fragments by
			// ldmatrix too: matrices (rows 0..7 | 8..15, dims ks·16 +
			// 0..7 | 8..15), the mma A layout.
#pragma unroll
			for (int ks = 0; ks < HD / 16; ks++) {
				unsigned int a[MT][4];
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					if constexpr (MT == 1) {
#pragma unroll
						for (int j = 0; j < 4; j++) a[mt][j] = qa[ks][j];
					} else {
						ldmatrix_x4(a[mt], &sq[w * 16 * MT + mt * 16 + (lane & 15)][ks * 16 + (lane >> 4) * 8]);
					}
				}
#pragma unroll
				for (int nt = 0; nt < KEYS / 8; nt += 2) {
					unsigned int b[4];
					ldmatrix_x4(b, &sk[nt * 8 + (lane >> 4) * 8 + (lane & 7)][ks * 16 + ((lane >> 3) & 1) * 8]);
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						mma_bf16_16816(s[mt][nt], a[mt], b);
						mma_bf16_16816(s[mt][nt + 1], a[mt], b + 2);
					}
				}
			}
			// Mask (causal, split range, padding rows) and online softmax in
			// log2 units. Only the tiles on the causal diagonal or at the
			// split's end mask (the branch is the same for the whole warp);
			// a padding row in an unmasked tile scores its zero query, and
			// is never written. The row maximum is taken on the raw scores
			// (the scale is positive, and rounding a product by it keeps
			// the order, so it is the maximum of the scaled ones) and each
			// p is one fused exp2(s·scale − max), as flash-attention does.
			// The maxima and sums run as two chains a row (even and odd
			// key octets), not one: their latency, not the arithmetic, was
			// what the warps waited on.
			float mx[NR][2];
#pragma unroll
			for (int i = 0; i < NR; i++) mx[i][0] = mx[i][1] = NEG_INF;
			if (k0 + KEYS <= ke && k0 + KEYS - 1 <= wmin) {
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int nt = 0; nt < KEYS / 8; nt++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							float &x = mx[2 * mt + (e >> 1)][nt & 1];
							x = fmaxf(x, s[mt][nt][e]);
						}
			} else {
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int nt = 0; nt < KEYS / 8; nt++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							int i = 2 * mt + (e >> 1), j = k0 + nt * 8 + tig * 2 + (e & 1);
							float v = (j <= rpos[i] && j < ke) ? s[mt][nt][e] : NEG_INF;
							s[mt][nt][e] = v;
							mx[i][nt & 1] = fmaxf(mx[i][nt & 1], v);
						}
			}
			float corr[NR], mu[NR];
			bool rescale = false;
#pragma unroll
			for (int i = 0; i < NR; i++) {
				float x = fmaxf(mx[i][0], mx[i][1]);
				x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
				x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
				float mn = fmaxf(m[i], x * scale_log2);
				mu[i] = mn == NEG_INF ? 0.f : mn; // a row with no key yet: p = 0, no NaN
				corr[i] = exp2f(m[i] - mu[i]);
				rescale |= corr[i] != 1.f;
				m[i] = mn;
			}
			float rs[NR][2];
#pragma unroll
			for (int i = 0; i < NR; i++) rs[i][0] = rs[i][1] = 0.f;
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int nt = 0; nt < KEYS / 8; nt++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int i = 2 * mt + (e >> 1);
						float p = exp2f(fmaf(s[mt][nt][e], scale_log2, -mu[i]));
						s[mt][nt][e] = p;
						rs[i][nt & 1] += p;
					}
#pragma unroll
			for (int i = 0; i < NR; i++) {
				float r = rs[i][0] + rs[i][1];
				r += __shfl_xor_sync(0xffffffffu, r, 1);
				r += __shfl_xor_sync(0xffffffffu, r, 2);
				l[i] = l[i] * corr[i] + r;
			}
			// O's rescale, skipped when no row of the warp found a larger
			// maximum in this tile (every factor exactly 1): later key
			// tiles of a long row rarely do, and the rescale is 64
			// multiplies a thread and m-tile.
			if (__any_sync(0xffffffffu, rescale))
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int d = 0; d < HD / 8; d++) {
						o[mt][d][0] *= corr[2 * mt];
						o[mt][d][1] *= corr[2 * mt];
						o[mt][d][2] *= corr[2 * mt + 1];
						o[mt][d][3] *= corr[2 * mt + 1];
					}
		}
		cp_async_wait<0>(); // this thread's part of V(i)
		__syncthreads();    // everyone's; and every warp is done with sk
		if (k0 + KEYS < ke) load(sk, kcache, k0 + KEYS);
		cp_async_commit(); // K(i+1), or an empty group on the last tile
		// O += P·V: S's accumulator layout of two adjacent key octets is
		// the A layout of one 16-key step. P goes in as two bf16 terms,
		// hi = bf16(P) and lo = bf16(P − hi), so it keeps about 16 bits
		// (bf16 alone keeps 8, and moved the 4B-shaped model's logits
		// further from the fp32 reference); the second product costs
		// tensor-core time only, which decode does not lack.
		if (use)
#pragma unroll
			for (int kk = 0; kk < KEYS / 16; kk++) {
				unsigned int hi[MT][4], lo[MT][4];
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					split_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1], hi[mt][0], lo[mt][0]);
					split_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3], hi[mt][1], lo[mt][1]);
					split_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], hi[mt][2], lo[mt][2]);
					split_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], hi[mt][3], lo[mt][3]);
				}
				// V fragments by ldmatrix.trans: matrices (keys kk·16 +
				// 0..7 | 8..15, dim octet d) and the same for octet d+1.
#pragma unroll
				for (int d = 0; d < HD / 8; d += 2) {
					unsigned int b[4];
					ldmatrix_x4_trans(b, &sv[kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)][(d + (lane >> 4)) * 8]);
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						mma_bf16_16816(o[mt][d], hi[mt], b);
						mma_bf16_16816(o[mt][d], lo[mt], b);
						mma_bf16_16816(o[mt][d + 1], hi[mt], b + 2);
						mma_bf16_16816(o[mt][d + 1], lo[mt], b + 2);
					}
				}
			}
		__syncthreads(); // every warp is done with sv
	}
	if (!active) return;
#pragma unroll
	for (int i = 0; i < NR; i++) {
		if (rpos[i] < 0) continue;
		const int mt = i >> 1, h = i & 1;
		long long row = (long long)rtok[i] * nh + rhead[i];
		if (whole) {
			float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
			bf16 *dst = out + row * HD + tig * 2;
#pragma unroll
			for (int d = 0; d < HD / 8; d++)
				*(unsigned int *)(dst + d * 8) = pack_bf16x2(o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv);
			// The other splits are empty: nothing for attn_combine to merge.
			if (zs > 1 && tig == 0) mark_split_empty(part_ml, row * zs + z);
		} else {
			long long pr = row * zs + z;
			float *dst = part_acc + pr * HD + tig * 2;
#pragma unroll
			for (int d = 0; d < HD / 8; d++) {
				dst[d * 8] = o[mt][d][2 * h];
				dst[d * 8 + 1] = o[mt][d][2 * h + 1];
			}
			if (tig == 0) {
				part_ml[2 * pr] = m[i];
				part_ml[2 * pr + 1] = l[i];
			}
		}
		// Splits this launch does not have, of the scratch's zs.
		if (z == 0 && tig == 0)
			for (int e = Z; e < zs; e++) mark_split_empty(part_ml, row * zs + e);
	}
}

// attn_dec: attn_mma_w1's work for warp tiles of one token each (the
// decode step's), head dim 128, GQA group G, on the CUDA cores with few
// registers: attn_mma_w1 computes 16 query rows of which decode fills G,
// holds 255 registers, fits 8 warps an SM and waits on latency (Nsight
// Compute: no eligible warp 62% of cycles, 76% of DRAM bandwidth on the
// 64-sequence decode step; docs/BENCHMARKS.md). One block of DEC_WARPS
// warps per (tile, KV head, split), the same grid, splits and output as
// attn_mma (attn_mma_body). K and V tiles of DEC_KEYS keys travel by
// cp.async through a ring of DEC_STAGES stages in static shared memory;
// warp w takes keys 8w … 8w+7 of each tile and keeps its own online
// softmax and output (the warps are merged once, at the end):
//   Q·K: lane (key k = l%8, part p = l/8) dots its key's dims 32p … 32p+31
//        with the G query heads (Q in shared memory as fp32, read by the
//        eight lanes of a part at once), then the four parts add up by two
//        shuffles; the eight keys a part's lanes read at once are rows
//        272 bytes apart, in eight different bank quads;
//   P·V: lane l owns dims 4l … 4l+3 of the G output rows and adds each of
//        its warp's keys' V dims, weighted by that key's p (a shuffle).
#define DEC_WARPS 4
#define DEC_KEYS 32
#define DEC_STAGES 2
#define DEC_HD 128
#define DEC_QP (32 + 4) // a Q part's run in shared memory, padded

template <int G>
__device__ __forceinline__ void attn_dec_body(bf16 *out, float *part_acc, float *part_ml, const bf16 *q, int q_stride,
	const bf16 *kcache, const bf16 *vcache, const int *tok_seq, const int *pos, const int *block_tables, int bt_stride,
	const int *tiles, int nh, int nkv, int block_size, float scale_log2, int zs) {
	KERNEL_ENTRY();
	constexpr int HD = DEC_HD, LD = HD + 8;
	__shared__ __align__(16) bf16 kv[DEC_STAGES][2][DEC_KEYS][LD];
	__shared__ __align__(16) float qs[G][4][DEC_QP];
	const int tile = blockIdx.x, g = blockIdx.y, z = blockIdx.z, Z = gridDim.z;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int t0 = tiles[2 * tile];
	const int *bt = block_tables + (long long)tok_seq[t0] * bt_stride;
	const int n = pos[t0] + 1; // keys the token sees
	int per = (n + Z - 1) / Z;
	per = (per + DEC_KEYS - 1) / DEC_KEYS * DEC_KEYS;
	const int kb = z * per, ke = min(n, kb + per);
	const bool whole = kb == 0 && ke == n;
	if (kb >= n) {
		// An empty split: weight zero in the combine.
		if (threadIdx.x < G) mark_split_empty(part_ml, ((long long)t0 * nh + g * G + threadIdx.x) * zs + z);
		return;
	}
	for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
		const int h = i / HD, d = i % HD;
		qs[h][d / 32][d % 32] = bf2f(q[(long long)t0 * q_stride + (g * G + h) * HD + d]);
	}
	const bool bs_pow2 = (block_size & (block_size - 1)) == 0;
	const int bs_shift = __popc(block_size - 1);
	const long long gstride = (long long)block_size * HD;
	// load issues stage s's K and V copies of keys k0 …: this thread's
	// chunks, keys at and past ke zero-filled (p = 0 must not meet NaN).
	auto load = [&](int s, int k0) {
		constexpr int CH = HD / 8, PER = 2 * DEC_KEYS * CH / (DEC_WARPS * 32);
#pragma unroll
		for (int u = 0; u < PER; u++) {
			const int c = threadIdx.x + u * DEC_WARPS * 32, which = c / (DEC_KEYS * CH), key = (c / CH) % DEC_KEYS, part = c % CH;
			const int j = k0 + key;
			const bool ok = j < ke;
			const bf16 *src = which ? vcache : kcache;
			if (ok) {
				const int bi = bs_pow2 ? j >> bs_shift : j / block_size, bo = bs_pow2 ? j & (block_size - 1) : j - bi * block_size;
				src += ((long long)bt[bi] * nkv + g) * gstride + (long long)bo * HD + part * 8;
			}
			cp_async16(&kv[s][which][key][part * 8], src, ok);
		}
	};
	float m[G], l[G], o[G][4];
#pragma unroll
	for (int h = 0; h < G; h++) {
		m[h] = NEG_INF;
		l[h] = 0.f;
		o[h][0] = o[h][1] = o[h][2] = o[h][3] = 0.f;
	}
	const int key = lane & 7, part = lane >> 3;
	load(0, kb);
	cp_async_commit();
	int s = 0;
	for (int k0 = kb; k0 < ke; k0 += DEC_KEYS, s ^= 1) {
		if (k0 + DEC_KEYS < ke) load(s ^ 1, k0 + DEC_KEYS);
		cp_async_commit();
		cp_async_wait<1>(); // this thread's part of stage s
		__syncthreads();    // everyone's (and Q, the first time)
		const int kk = w * 8 + key, j = k0 + kk;
		// S = Q·K for this lane's key and part, then the part sums.
		float sc[G];
#pragma unroll
		for (int h = 0; h < G; h++) sc[h] = 0.f;
		const bf16 *kr = &kv[s][0][kk][part * 32];
#pragma unroll
		for (int c = 0; c < 4; c++) {
			const uint4 kw = *(const uint4 *)(kr + c * 8);
			const unsigned int kx[4] = {kw.x, kw.y, kw.z, kw.w};
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const float k_lo = __uint_as_float(kx[e] << 16), k_hi = __uint_as_float(kx[e] & 0xffff0000u);
#pragma unroll
				for (int h = 0; h < G; h++) {
					const float2 qv = *(const float2 *)&qs[h][part][c * 8 + e * 2];
					sc[h] = fmaf(qv.x, k_lo, fmaf(qv.y, k_hi, sc[h]));
				}
			}
		}
		float p[G];
#pragma unroll
		for (int h = 0; h < G; h++) {
			float x = sc[h];
			x += __shfl_xor_sync(0xffffffffu, x, 8);
			x += __shfl_xor_sync(0xffffffffu, x, 16);
			x = j < ke ? x * scale_log2 : NEG_INF;
			// The warp's 8 keys: the lanes of one part hold one key each.
			float mx = x;
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
			const float mn = fmaxf(m[h], mx);
			const float mu = mn == NEG_INF ? 0.f : mn; // no key yet: p = 0, no NaN
			const float corr = exp2f(m[h] - mu);
			p[h] = exp2f(x - mu);
			float sum = p[h];
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			sum += __shfl_xor_sync(0xffffffffu, sum, 2);
			sum += __shfl_xor_sync(0xffffffffu, sum, 4);
			l[h] = l[h] * corr + sum;
			m[h] = mn;
			o[h][0] *= corr;
			o[h][1] *= corr;
			o[h][2] *= corr;
			o[h][3] *= corr;
		}
		// O += P·V over the warp's 8 keys; lane l's dims 4l … 4l+3.
#pragma unroll
		for (int e = 0; e < 8; e++) {
			const uint2 vw = *(const uint2 *)&kv[s][1][w * 8 + e][lane * 4];
			const float v0 = __uint_as_float(vw.x << 16), v1 = __uint_as_float(vw.x & 0xffff0000u);
			const float v2 = __uint_as_float(vw.y << 16), v3 = __uint_as_float(vw.y & 0xffff0000u);
#pragma unroll
			for (int h = 0; h < G; h++) {
				const float pe = __shfl_sync(0xffffffffu, p[h], e); // key e's p, at lane e
				o[h][0] = fmaf(pe, v0, o[h][0]);
				o[h][1] = fmaf(pe, v1, o[h][1]);
				o[h][2] = fmaf(pe, v2, o[h][2]);
				o[h][3] = fmaf(pe, v3, o[h][3]);
			}
		}
		__syncthreads(); // every warp is done with stage s before it is refilled
	}
	// Merge the warps: each writes its (m, l) and output rows into the
	// ring's memory, then thread i of the block finishes output element
	// (head i/32, dims 4(i%32) …) over the warps in a fixed order.
	cp_async_wait<0>();
	float *red = (float *)&kv[0][0][0][0]; // DEC_WARPS·G·(HD + 2) floats
	float *rm = red + DEC_WARPS * G * HD;
#pragma unroll
	for (int h = 0; h < G; h++) {
		*(float4 *)&red[(w * G + h) * HD + lane * 4] = make_float4(o[h][0], o[h][1], o[h][2], o[h][3]);
		if (lane == 0) {
			rm[(w * G + h) * 2] = m[h];
			rm[(w * G + h) * 2 + 1] = l[h];
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < G * 32; i += blockDim.x) {
		const int h = i / 32, d = (i % 32) * 4;
		float M = NEG_INF;
#pragma unroll
		for (int v = 0; v < DEC_WARPS; v++) M = fmaxf(M, rm[(v * G + h) * 2]);
		const float mu = M == NEG_INF ? 0.f : M;
		float L = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
		for (int v = 0; v < DEC_WARPS; v++) {
			const float f = exp2f(rm[(v * G + h) * 2] - mu);
			const float4 r = *(const float4 *)&red[(v * G + h) * HD + d];
			L += rm[(v * G + h) * 2 + 1] * f;
			a0 += r.x * f;
			a1 += r.y * f;
			a2 += r.z * f;
			a3 += r.w * f;
		}
		const long long row = (long long)t0 * nh + g * G + h;
		if (whole) {
			const float inv = L > 0.f ? 1.f / L : 0.f;
			*(uint2 *)(out + row * HD + d) = make_uint2(pack_bf16x2(a0 * inv, a1 * inv), pack_bf16x2(a2 * inv, a3 * inv));
			if (zs > 1 && d == 0) mark_split_empty(part_ml, row * zs + z);
		} else {
			const long long pr = row * zs + z;
			*(float4 *)(part_acc + pr * HD + d) = make_float4(a0, a1, a2, a3);
			if (d == 0) {
				part_ml[2 * pr] = M;
				part_ml[2 * pr + 1] = L;
			}
		}
		// Splits this launch does not have, of the scratch's zs.
		if (z == 0 && d == 0)
			for (int e = Z; e < zs; e++) mark_split_empty(part_ml, row * zs + e);
	}
}

// FA_MAX_SPLITS is the most KV splits (gridDim.z) attn_mma takes (≤ 32:
// attn_combine gives each split a lane).
#define FA_MAX_SPLITS 16

// split_weight is split z's weight in the merge of a row's split
// partials, 2^(m_z−M) / Σ l·2^(m_z−M) with M the largest m of a split that
// saw keys (l > 0), for the lane z < Z that holds split z's (m, l) (the
// other lanes pass l = 0); 0 for an empty split. none: every split was
// empty (one split held every key and wrote the row itself).
__device__ __forceinline__ float split_weight(float m, float l, bool &none) {
	const bool has = l > 0.f;
	const float M = warp_max(has ? m : NEG_INF);
	none = M == NEG_INF;
	if (none) return 0.f;
	const float e = has ? exp2f(m - M) : 0.f;
	return e / warp_sum(l * e);
}

// split_merge is row's output at column d, Σ_z weight_z · acc_z over the
// Z splits (weights wz[z]; a split of weight 0 is not read): every
// split's load issued before the sum, so a row costs one round trip to
// memory, not one per split.
__device__ __forceinline__ bf16 split_merge(const float *part_acc, const float *wz, long long row, int Z, int hd, int d) {
	float v[FA_MAX_SPLITS];
#pragma unroll
	for (int z = 0; z < FA_MAX_SPLITS; z++) v[z] = z < Z && wz[z] != 0.f ? part_acc[(row * Z + z) * hd + d] : 0.f;
	float a = 0.f;
#pragma unroll
	for (int z = 0; z < FA_MAX_SPLITS; z++)
		if (z < Z) a += v[z] * wz[z];
	return f2bf(a);
}

extern "C" {

#define ATTN_MMA_ARGS                                                                                                   \
	bf16 *out, float *part_acc, float *part_ml, const bf16 *q, int q_stride, const bf16 *kcache, const bf16 *vcache,  \
		const int *tok_seq, const int *pos, const int *block_tables, int bt_stride, const int *tiles, int nh, int nkv, \
		int block_size, float scale_log2, int zs
#define ATTN_MMA_PASS                                                                                                   \
	out, part_acc, part_ml, q, q_stride, kcache, vcache, tok_seq, pos, block_tables, bt_stride, tiles, nh, nkv,        \
		block_size, scale_log2, zs

__global__ void __launch_bounds__(FA_WARPS * 32) attn_mma_hd128(ATTN_MMA_ARGS) {
	attn_mma_body<128, FA_WARPS, FA_KEYS, FA_ROWS / 16>(ATTN_MMA_PASS);
}
__global__ void __launch_bounds__(FA_WARPS * 32) attn_mma_hd64(ATTN_MMA_ARGS) {
	attn_mma_body<64, FA_WARPS, FA_KEYS, FA_ROWS / 16>(ATTN_MMA_PASS);
}
__global__ void __launch_bounds__(FA_WARPS * 32) attn_mma_mid_hd128(ATTN_MMA_ARGS) {
	attn_mma_body<128, FA_WARPS, FA_MID_KEYS, 1>(ATTN_MMA_PASS);
}
__global__ void __launch_bounds__(FA_WARPS * 32) attn_mma_mid_hd64(ATTN_MMA_ARGS) {
	attn_mma_body<64, FA_WARPS, FA_MID_KEYS, 1>(ATTN_MMA_PASS);
}
__global__ void __launch_bounds__(32) attn_mma_w1_hd128(ATTN_MMA_ARGS) { attn_mma_body<128, 1, FA1_KEYS, 1>(ATTN_MMA_PASS); }
__global__ void __launch_bounds__(32) attn_mma_w1_hd64(ATTN_MMA_ARGS) { attn_mma_body<64, 1, FA1_KEYS, 1>(ATTN_MMA_PASS); }
// attn_dec_g2 / _g4: attn_dec for GQA groups of 2 and 4 (Qwen3-0.6B and
// 1.7B, Qwen3-4B), head dim 128, on warp tiles of one token each. grid
// (tiles, nkv, Z), block DEC_WARPS·32.
__global__ void __launch_bounds__(DEC_WARPS * 32) attn_dec_g2(ATTN_MMA_ARGS) { attn_dec_body<2>(ATTN_MMA_PASS); }
__global__ void __launch_bounds__(DEC_WARPS * 32) attn_dec_g4(ATTN_MMA_ARGS) { attn_dec_body<4>(ATTN_MMA_PASS); }

// attn_combine merges attn_mma's Z split partials (Z: attn_mma's zs) of
// each of the rows (token, head) rows, one warp a row: the warp turns the
// Z (max, sum) pairs into weights at once (split_weight, lane z holding
// split z's), hands each lane the weights by shuffles, and each lane
// merges its columns (split_merge). A row whose partials are all empty
// was written whole by one split and is skipped. The warps of the grid
// walk the rows, so the grid is sized by the GPU, not by the rows: with a
// block a row (128 threads) the 2,048-token prefill step's launch was
// 65,536 blocks, of which nearly all exited at once, and took 80 µs a
// layer on the H100 (CUPTI timeline, docs/BENCHMARKS.md, fourteenth
// session). grid any, block a multiple of 32.
__global__ void attn_combine(bf16 *out, const float *part_acc, const float *part_ml, int rows, int hd, int Z) {
	KERNEL_ENTRY();
	const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	for (long long row = (long long)blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += (long long)gridDim.x * warps) {
		const float *ml = part_ml + row * Z * 2;
		bool none;
		const float wt = split_weight(lane < Z ? ml[2 * lane] : NEG_INF, lane < Z ? ml[2 * lane + 1] : 0.f, none);
		if (none) continue; // the same for every lane (split_weight's warp max)
		float wz[FA_MAX_SPLITS];
#pragma unroll
		for (int z = 0; z < FA_MAX_SPLITS; z++) wz[z] = __shfl_sync(0xffffffffu, wt, z);
		for (int d = lane; d < hd; d += 32) out[row * hd + d] = split_merge(part_acc, wz, row, Z, hd, d);
	}
}

} // extern "C"

// ---- skinny GEMM ----------------------------------------------------------

// gemm_skinny: Y[M][N] = X[M][K]·W[N][K]ᵀ for the few-row GEMMs of decode
// steps and short prefills (M ≤ 8·MT), bf16 in, fp32 accumulate on the
// tensor cores. Such a GEMM reads W once and X many times from L1, so it
// is bound by streaming W from HBM; it is here (beside cuBLASLt, which
// runs the other shapes) so that a freshly started server can serve
// without loading any of cuBLASLt's kernels, and where it streams W
// faster than cuBLASLt does (docs/BENCHMARKS.md).
//
// One block of GS_WARPS warps per 16 output features (N/16 blocks). W is
// the mma's A operand (16 features × 16 k), X its B operand (16 k × 8
// tokens; MT token tiles). K goes in 32-wide chunks, warp w taking chunks
// w, w+GS_WARPS, … so that the block's warps read neighbouring stretches
// of each row. In a chunk, lane (g, c) (g = lane/4, c = lane%4) loads
// W[n0+g][8c..8c+7], W[n0+g+8][8c..8c+7] and, per token tile t,
// X[8t+g][8c..8c+7], each one 16-byte load. The eight values a lane holds
// of a row stand for the mma fragment's k positions {2c, 2c+1, 2c+8, 2c+9}
// of two consecutive k16 steps: a permutation of the chunk's k that A and
// B share, so every dot product is unchanged and no shuffle or shared
// memory is needed to form the fragments. The warps' partial sums are
// added in shared memory in a fixed order (deterministic).
//
// mode 0: Y bf16 (rounded), 1: Y f32, 2: Y f32 += (beta = 1, the residual
// add of o_proj and down_proj). Needs N % 16 == 0, K % 32 == 0, 16-byte
// aligned X and W. X rows ≥ M are not read and Y rows ≥ M not written.
//
// The X operand comes in one of three forms (XM). The two fused ones
// replace the kernel that would have written X, so a decode step has
// fewer kernels in its dependent chain; each block computes the whole
// operand once into shared memory (xs, rows padded by 8 bf16 so that the
// fragment loads of 8 rows fall in different banks) while its first
// weight loads are in flight, and reads it from there:
//   GS_X_BF16   x is bf16 [M][K], read as is (from L1/L2);
//   GS_X_NORM   x is the f32 residual [M][K]: RMSNorm with the weight nw
//               and eps, rounded to bf16 as the rmsnorm kernel rounds it
//               (the block's warps split each row and add their sums of
//               squares in a fixed order);
//   GS_X_SWIGLU x is the bf16 gate|up projection [M][2K]: silu(gate)·up,
//               rounded as the swiglu kernel rounds it (bit-identical).
// The fused forms take at most 8 rows and M·(K+8) ≤ GS_XS elements.
#define GS_WARPS 8
// Chunks a warp loads before it multiplies them (memory-level parallelism).
#define GS_UNROLL 4
#define GS_X_BF16 0
#define GS_X_NORM 1
#define GS_X_SWIGLU 2
#define GS_XS (8 * (2560 + 8))

// gemm_skinny_preload issues a warp's first group of UNROLL chunks' weight
// loads (load(u, k): chunk u, first column k) before KERNEL_ENTRY — the
// weights are no kernel's output, so under PDL this block's weight stream
// starts while the kernel ahead of it finishes — when the warp has a whole
// group; it says whether it did. (An L2 prefetch of the same lines, issued
// four times over by the lanes sharing them, slowed the GEMMs by up to a
// fifth.)
template <int UNROLL, typename Load>
__device__ __forceinline__ bool gemm_skinny_preload(int ch, int chunks, Load load) {
	if (ch + (UNROLL - 1) * GS_WARPS >= chunks) return false;
#pragma unroll
	for (int u = 0; u < UNROLL; u++) load(u, (ch + u * GS_WARPS) * 32);
	return true;
}

// gemm_skinny_loop is a warp's share of K in both skinny forms: chunks
// ch, ch + GS_WARPS, … below chunks, UNROLL at a time — every load of a
// group (load(u, k)) issued before its first multiply (mul(u, k)), the
// first group's loads already issued when preloaded — then the rest one
// at a time (tail(k)).
template <int UNROLL, typename Load, typename Mul, typename Tail>
__device__ __forceinline__ void gemm_skinny_loop(int ch, int chunks, bool preloaded, Load load, Mul mul, Tail tail) {
	for (; ch + (UNROLL - 1) * GS_WARPS < chunks; ch += UNROLL * GS_WARPS) {
		if (!preloaded)
#pragma unroll
			for (int u = 0; u < UNROLL; u++) load(u, (ch + u * GS_WARPS) * 32);
		preloaded = false;
#pragma unroll
		for (int u = 0; u < UNROLL; u++) mul(u, (ch + u * GS_WARPS) * 32);
	}
	for (; ch < chunks; ch += GS_WARPS) tail(ch * 32);
}

// gemm_skinny_store writes one output element s at offset o as mode says.
__device__ __forceinline__ void gemm_skinny_store(void *y, long long o, float s, int mode) {
	if (mode == 0) ((bf16 *)y)[o] = f2bf(s);
	else if (mode == 1) ((float *)y)[o] = s;
	else ((float *)y)[o] += s;
}

template <int MT>
__device__ __forceinline__ void gemm_skinny_chunk(float acc[MT][4], uint4 wa, uint4 wb, const bf16 *x, int M, int xstride, int k, int g) {
	for (int t = 0; t < MT; t++) {
		int m = t * 8 + g;
		uint4 xv = make_uint4(0u, 0u, 0u, 0u);
		if (m < M) xv = *(const uint4 *)(x + (long long)m * xstride + k);
		unsigned a0[4] = {wa.x, wb.x, wa.y, wb.y}, b0[2] = {xv.x, xv.y};
		mma_bf16_16816(acc[t], a0, b0);
		unsigned a1[4] = {wa.z, wb.z, wa.w, wb.w}, b1[2] = {xv.z, xv.w};
		mma_bf16_16816(acc[t], a1, b1);
	}
}

// gemm_skinny_stage writes the fused operand of M ≤ 8 rows into xs (row
// stride K+8) and ends with a barrier.
template <int XM>
__device__ __forceinline__ void gemm_skinny_stage(bf16 *xs, const void *x, const float *nw, float eps, int M, int K) {
	int wid = threadIdx.x >> 5, lane = threadIdx.x & 31, xstride = K + 8;
	if (XM == GS_X_SWIGLU) {
		int per = K >> 3;
		for (int i = threadIdx.x; i < M * per; i += blockDim.x) {
			int m = i / per, k = (i - m * per) * 8;
			const bf16 *g = (const bf16 *)x + (long long)m * 2 * K + k;
			*(uint4 *)(xs + m * xstride + k) = swiglu8(g, g + K);
		}
		__syncthreads();
		return;
	}
	// GS_X_NORM: wpr warps per row (8 over the next power of two ≥ M),
	// each over a contiguous K/wpr columns, 4 at a time.
	__shared__ float ssq[GS_WARPS];
	int rows = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8, wpr = GS_WARPS / rows;
	int m = wid / wpr, seg = K / wpr, k0 = (wid % wpr) * seg;
	const float *r = (const float *)x + (long long)m * K;
	float ss = 0.f;
	if (m < M)
		for (int k = k0 + lane * 4; k < k0 + seg; k += 128) {
			float4 v = *(const float4 *)(r + k);
			ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
		}
	ss = warp_sum(ss);
	if (lane == 0) ssq[wid] = ss;
	__syncthreads();
	if (m < M) {
		float tot = 0.f;
		for (int j = 0; j < wpr; j++) tot += ssq[m * wpr + j];
		float scale = rsqrtf(tot / (float)K + eps);
		for (int k = k0 + lane * 4; k < k0 + seg; k += 128) {
			float4 v = *(const float4 *)(r + k), w4 = *(const float4 *)(nw + k);
			*(uint2 *)(xs + m * xstride + k) =
				make_uint2(pack_bf16x2(v.x * scale * w4.x, v.y * scale * w4.y), pack_bf16x2(v.z * scale * w4.z, v.w * scale * w4.w));
		}
	}
	__syncthreads();
}

template <int MT, int XM>
__device__ __forceinline__ void gemm_skinny_body(void *y, const void *x, const bf16 *w, int M, int N, int K, int mode,
	const float *nw, float eps) {
	__shared__ float red[GS_WARPS * MT * 128];
	int wid = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
	int n0 = blockIdx.x * 16;
	const bf16 *w0 = w + (long long)(n0 + g) * K + 8 * c, *w1 = w0 + 8LL * K;
	const int chunks = K >> 5;
	// The first weight group is in flight before KERNEL_ENTRY (and, in the
	// fused forms, while the block stages X).
	uint4 wa[GS_UNROLL], wb[GS_UNROLL];
	auto load = [&](int u, int k) {
		wa[u] = ld_stream16(w0 + k);
		wb[u] = ld_stream16(w1 + k);
	};
	const bool preloaded = gemm_skinny_preload<GS_UNROLL>(wid, chunks, load);
	KERNEL_ENTRY();
	const bf16 *xc = (const bf16 *)x + 8 * c;
	int xstride = K;
	if (XM != GS_X_BF16) {
		__shared__ __align__(16) bf16 xs[GS_XS];
		gemm_skinny_stage<XM>(xs, x, nw, eps, M, K);
		xc = xs + 8 * c;
		xstride = K + 8;
	}
	float acc[MT][4];
	for (int t = 0; t < MT; t++)
		for (int j = 0; j < 4; j++) acc[t][j] = 0.f;
	gemm_skinny_loop<GS_UNROLL>(
		wid, chunks, preloaded, load, [&](int u, int k) { gemm_skinny_chunk<MT>(acc, wa[u], wb[u], xc, M, xstride, k, g); },
		[&](int k) { gemm_skinny_chunk<MT>(acc, ld_stream16(w0 + k), ld_stream16(w1 + k), xc, M, xstride, k, g); });
	for (int t = 0; t < MT; t++)
		for (int j = 0; j < 4; j++) red[((wid * MT + t) * 32 + lane) * 4 + j] = acc[t][j];
	__syncthreads();
	// Element e of a warp's fragments: token tile t, lane l, register j
	// (d[j] = D[g + 8(j/2)][2c + j%2]: feature n0 + g + 8(j/2), token
	// 8t + 2c + j%2).
	for (int e = threadIdx.x; e < MT * 128; e += blockDim.x) {
		int t = e >> 7, l = (e >> 2) & 31, j = e & 3;
		int m = t * 8 + 2 * (l & 3) + (j & 1);
		if (m >= M) continue;
		float s = 0.f;
		for (int v = 0; v < GS_WARPS; v++) s += red[v * MT * 128 + e];
		gemm_skinny_store(y, (long long)m * N + n0 + (l >> 2) + 8 * (j >> 1), s, mode);
	}
}

// gemm_skinny_n8: gemm_skinny_m8 (M ≤ 8, bf16 X) on blocks of 8 output
// features instead of 16, for GEMMs whose N/16 blocks spread unevenly
// over the SMs (the 4B o_proj and down_proj: 160 blocks for 132 SMs, so
// 28 SMs stream two blocks' weights while the others stream one) or
// leave SMs without one (the 0.6B ones: 64). W is the mma's B operand
// (16 k × 8 features) and X its A operand (16 token rows, the upper 8
// zero), with the same k permutation: lane (g, c) loads W[n0+g][8c …
// 8c+7] and X[g][8c … 8c+7] of each 32-wide chunk, one 16-byte load
// each, the two mma k16 steps taking words (x, y) and (z, w). Twice the
// chunks in flight a warp
// (GS_N8_UNROLL), so a warp keeps as many bytes of W in flight as the
// 16-feature form. Warp w takes chunks w, w + GS_WARPS, … as there
// (gemm_skinny_loop); the partial sums are added in the same fixed order.
#define GS_N8_UNROLL 8

// gemm_skinny_n8_chunk multiplies one chunk: wv is this lane's 16 bytes
// of W, xr its X row (g) at 8c, k the chunk's first column.
__device__ __forceinline__ void gemm_skinny_n8_chunk(float acc[4], uint4 wv, const bf16 *xr, int M, int k, int g) {
	uint4 xv = make_uint4(0u, 0u, 0u, 0u);
	if (g < M) xv = *(const uint4 *)(xr + k);
	unsigned a0[4] = {xv.x, 0u, xv.y, 0u}, b0[2] = {wv.x, wv.y};
	mma_bf16_16816(acc, a0, b0);
	unsigned a1[4] = {xv.z, 0u, xv.w, 0u}, b1[2] = {wv.z, wv.w};
	mma_bf16_16816(acc, a1, b1);
}

__device__ __forceinline__ void gemm_skinny_n8_body(void *y, const void *x, const bf16 *w, int M, int N, int K, int mode) {
	__shared__ float red[GS_WARPS * 64];
	int wid = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
	int n0 = blockIdx.x * 8;
	const bf16 *wr = w + (long long)(n0 + g) * K + 8 * c;
	// X row g of this lane (rows ≥ M are not read).
	const bf16 *xr = (const bf16 *)x + (long long)g * K + 8 * c;
	const int chunks = K >> 5;
	uint4 wv[GS_N8_UNROLL];
	auto load = [&](int u, int k) { wv[u] = ld_stream16(wr + k); };
	const bool preloaded = gemm_skinny_preload<GS_N8_UNROLL>(wid, chunks, load);
	KERNEL_ENTRY();
	float acc[4] = {0.f, 0.f, 0.f, 0.f};
	gemm_skinny_loop<GS_N8_UNROLL>(
		wid, chunks, preloaded, load, [&](int u, int k) { gemm_skinny_n8_chunk(acc, wv[u], xr, M, k, g); },
		[&](int k) { gemm_skinny_n8_chunk(acc, ld_stream16(wr + k), xr, M, k, g); });
	// d[0], d[1]: token g, features 2c, 2c+1 (d[2], d[3] are token rows
	// 8–15, zero).
	red[(wid * 32 + lane) * 2] = acc[0];
	red[(wid * 32 + lane) * 2 + 1] = acc[1];
	__syncthreads();
	for (int e = threadIdx.x; e < 64; e += blockDim.x) {
		int l = e >> 1, m = l >> 2;
		if (m >= M) continue;
		float s = 0.f;
		for (int v = 0; v < GS_WARPS; v++) s += red[v * 64 + e];
		gemm_skinny_store(y, (long long)m * N + n0 + 2 * (l & 3) + (e & 1), s, mode);
	}
}

extern "C" {

// gemm_skinny_m8 … m64: gemm_skinny for M ≤ 8, 16, 32, 64 on a bf16 X;
// gemm_skinny_m8_norm and gemm_skinny_m8_swiglu: M ≤ 8 on the RMSNorm'd
// f32 residual and on SwiGLU of gate|up. nw and eps are read by the
// _norm form only. grid (N/16), block GS_WARPS·32.
#define GEMM_SKINNY_ARGS void *y, const void *x, const bf16 *w, int M, int N, int K, int mode, const float *nw, float eps
#define GEMM_SKINNY_PASS y, x, w, M, N, K, mode, nw, eps
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_m8(GEMM_SKINNY_ARGS) { gemm_skinny_body<1, GS_X_BF16>(GEMM_SKINNY_PASS); }
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_m16(GEMM_SKINNY_ARGS) { gemm_skinny_body<2, GS_X_BF16>(GEMM_SKINNY_PASS); }
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_m32(GEMM_SKINNY_ARGS) { gemm_skinny_body<4, GS_X_BF16>(GEMM_SKINNY_PASS); }
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_m64(GEMM_SKINNY_ARGS) { gemm_skinny_body<8, GS_X_BF16>(GEMM_SKINNY_PASS); }
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_m8_norm(GEMM_SKINNY_ARGS) { gemm_skinny_body<1, GS_X_NORM>(GEMM_SKINNY_PASS); }
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_m8_swiglu(GEMM_SKINNY_ARGS) { gemm_skinny_body<1, GS_X_SWIGLU>(GEMM_SKINNY_PASS); }
// gemm_skinny_n8_m8: gemm_skinny_m8 on 8-feature blocks (N % 8 == 0);
// grid (N/8), block GS_WARPS·32. nw and eps are not read.
__global__ void __launch_bounds__(GS_WARPS * 32) gemm_skinny_n8_m8(GEMM_SKINNY_ARGS) { gemm_skinny_n8_body(y, x, w, M, N, K, mode); }

} // extern "C"

// ---- argmax and sampling -------------------------------------------------

// Orders floats as unsigned keys: a > b as floats iff key(a) > key(b)
// (NaN aside), so thresholds can be found exactly by building the key bit
// by bit.
__device__ __forceinline__ unsigned int fkey(float f) {
	unsigned int u = __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

// sample_uniform is the draw in [0, 1) for a row's seed at its counter
// (sched.SampleUniform is its host twin).
__device__ __forceinline__ float sample_uniform(unsigned long long seed, unsigned long long counter) {
	const unsigned long long h = splitmix64(seed ^ splitmix64(counter));
	return (float)(h >> 40) * (1.f / 16777216.f);
}

// warp_argmax reduces (value, index) pairs over the warp to the largest
// value and, among equal ones, the lowest index; every lane gets them.
__device__ __forceinline__ void warp_argmax(float &v, int &i) {
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, v, o);
		const int oi = __shfl_xor_sync(0xffffffffu, i, o);
		if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
	}
}

// warp_scan is the warp's inclusive prefix sum of v in lane order.
__device__ __forceinline__ float warp_scan(float v) {
	const int lane = threadIdx.x & 31;
	for (int o = 1; o < 32; o <<= 1) {
		const float n = __shfl_up_sync(0xffffffffu, v, o);
		if (lane >= o) v += n;
	}
	return v;
}

// range_argmax: the largest value of row[b0 … b1) and, among equal ones,
// the lowest index (−inf and b1 when the range is empty or all NaN), for
// the whole block; rv/ri hold 32 entries each.
__device__ __forceinline__ void range_argmax(const float *row, int b0, int b1, float *rv, int *ri, float &v, int &idx) {
	float bv = NEG_INF;
	int bi = 0x7fffffff;
	for (int i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
		const float x = row[i];
		if (x > bv) { bv = x; bi = i; } // i rises, so ties keep the first
	}
	warp_argmax(bv, bi);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	__syncthreads();
	if (lane == 0) { rv[w] = bv; ri[w] = bi; }
	__syncthreads();
	bv = lane < nw ? rv[lane] : NEG_INF;
	bi = lane < nw ? ri[lane] : 0x7fffffff;
	warp_argmax(bv, bi);
	v = bv;
	idx = bi == 0x7fffffff ? b1 : bi;
}

// block_argmax: the index of the largest value of row[0 … V), the lowest
// among equal ones, 0 when no value is larger than −inf (NaN never is).
// Every thread gets it. rv/ri hold 32 entries each.
__device__ __forceinline__ int block_argmax(const float *row, int V, float *rv, int *ri) {
	float v;
	int idx;
	range_argmax(row, 0, V, rv, ri, v, idx);
	return idx == V ? 0 : idx;
}

#define SAMPLE_THREADS 1024
// SAMPLE_SEGS: segments a row is cut into for sample_part (≤ 32: sample_pick
// gives each a lane); SAMPLE_PART_THREADS: sample_part's block.
#define SAMPLE_SEGS 32
#define SAMPLE_PART_THREADS 256

// Sampling draws one token per row: temperature, then top-k, then top-p
// (renormalised over the top-k survivors), as transformers applies them.
// Per-row parameters live in device arrays so that a captured graph replays
// with new values: temperature <= 0 means greedy; top_k <= 0 or >= V and
// top_p >= 1 disable those filters. The uniform draw is a counter-based
// hash (splitmix64 of seed and counter), and counter[r] is incremented on
// the device, so replays advance the stream and a (seed, counter) pair
// always gives the same token.
//
// Thresholds are exact on the float ordering: the k-th largest logit is
// found by building its key bit by bit (32 counting passes), and the top-p
// cut likewise (32 mass passes); ties at a threshold are all kept. The draw
// then walks the kept tokens in index order. sample_filtered is that for
// one row, the whole block (SAMPLE_THREADS) taking part; sample_pick runs it
// for the rows that ask for top-k or top-p.
__device__ __forceinline__ void sample_filtered(int *out, const float *row, int r, int V, float temp, const int *top_k,
	const float *top_p, const unsigned long long *seed, unsigned long long *counter, float *red, float *sums, int &seg,
	float &segpre) {
	const int tid = threadIdx.x;
	float mx = NEG_INF;
	for (int i = tid; i < V; i += blockDim.x) mx = fmaxf(mx, row[i]);
	mx = block_max(mx, red);
	float inv = 1.f / temp;
	unsigned int tau = 0;
	int k = top_k[r];
	if (k > 0 && k < V) {
		for (int bit = 31; bit >= 0; bit--) {
			unsigned int cand = tau | (1u << bit);
			float c = 0.f;
			for (int i = tid; i < V; i += blockDim.x) c += fkey(row[i]) >= cand ? 1.f : 0.f;
			c = block_sum(c, red);
			if (c >= (float)k) tau = cand;
		}
	}
	float p = top_p[r];
	if (p < 1.f) {
		float z = 0.f;
		for (int i = tid; i < V; i += blockDim.x)
			if (fkey(row[i]) >= tau) z += expf((row[i] - mx) * inv);
		z = block_sum(z, red);
		float need = p * z;
		unsigned int tp = 0;
		for (int bit = 31; bit >= 0; bit--) {
			unsigned int cand = tp | (1u << bit);
			unsigned int lo = cand > tau ? cand : tau;
			float s = 0.f;
			for (int i = tid; i < V; i += blockDim.x)
				if (fkey(row[i]) >= lo) s += expf((row[i] - mx) * inv);
			s = block_sum(s, red);
			if (s >= need) tp = cand;
		}
		if (tp > tau) tau = tp;
	}
	// Each thread owns a contiguous range, so a prefix over the per-thread
	// sums orders the kept tokens by index.
	int chunk = (V + blockDim.x - 1) / blockDim.x;
	int b0 = tid * chunk, b1 = min(V, b0 + chunk);
	float s = 0.f;
	for (int i = b0; i < b1; i++)
		if (fkey(row[i]) >= tau) s += expf((row[i] - mx) * inv);
	sums[tid] = s;
	__syncthreads();
	unsigned long long c = counter[r];
	if (tid == 0) {
		float total = 0.f;
		for (int i = 0; i < (int)blockDim.x; i++) total += sums[i];
		float u = sample_uniform(seed[r], c);
		float target = u * total, pre = 0.f;
		int sg = -1, last = 0;
		float lastpre = 0.f;
		for (int i = 0; i < (int)blockDim.x; i++) {
			if (sums[i] > 0.f) {
				last = i;
				lastpre = pre;
				if (sg < 0 && target < pre + sums[i]) { sg = i; segpre = pre; }
			}
			pre += sums[i];
		}
		if (sg < 0) { sg = last; segpre = lastpre; } // rounding pushed target past the end
		seg = sg;
		sums[0] = target; // reuse: the draw, read by the owner below
	}
	__syncthreads();
	if (tid == seg) {
		float target = sums[0] - segpre, acc = 0.f;
		int pick = -1, lastkept = b0;
		for (int i = b0; i < b1; i++) {
			if (fkey(row[i]) < tau) continue;
			lastkept = i;
			acc += expf((row[i] - mx) * inv);
			if (acc > target) { pick = i; break; }
		}
		out[r] = pick >= 0 ? pick : lastkept;
		counter[r] = c + 1;
	}
}

// sample_filtered_row says whether row r asks for top-k or top-p (and is
// not greedy): sample_filtered's rows, which sample_part leaves alone.
__device__ __forceinline__ bool sample_filtered_row(int r, int V, const float *temperature, const int *top_k, const float *top_p) {
	const int k = top_k[r];
	return temperature[r] > 0.f && ((k > 0 && k < V) || top_p[r] < 1.f);
}

// block_scan_excl is the block's exclusive prefix sum of v in thread order
// (blockDim.x a multiple of 32, at most 1024; red holds 32 floats).
__device__ __forceinline__ float block_scan_excl(float v, float *red) {
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const float inc = warp_scan(v);
	__syncthreads();
	if (lane == 31) red[w] = inc;
	__syncthreads();
	const float wv = lane < nw ? red[lane] : 0.f, winc = warp_scan(wv);
	const float before = __shfl_sync(0xffffffffu, winc - wv, w); // the warps ahead of this one
	return before + inc - v;
}

extern "C" {

// argmax_f32: out[r] = argmax(logits[r][:V]) (lowest index on ties).
// grid (rows), block a multiple of 32.
__global__ void argmax_f32(int *out, const float *logits, int V, int stride) {
	KERNEL_ENTRY();
	__shared__ float rv[32];
	__shared__ int ri[32];
	int r = blockIdx.x;
	int i = block_argmax(logits + (long long)r * stride, V, rv, ri);
	if (threadIdx.x == 0) out[r] = i;
}

// sample_part and sample_pick draw one token per row, as sample_filtered
// describes, with the row's work spread over many blocks: one block per
// row read a Qwen3 row of 151,936 logits alone, and its walk to the token
// added up per-thread sums one after another, 173 µs for the 64 rows of a
// decode step on the H100 (docs/BENCHMARKS.md, fourteenth session).
//
// sample_part: grid (rows, SAMPLE_SEGS), block SAMPLE_PART_THREADS. Each
// block takes one segment of its row, of ⌈V / SAMPLE_SEGS⌉ tokens, and
// writes part[(r·SAMPLE_SEGS + s)·3 …]: the segment's largest logit m_s,
// its lowest index (as a float's bits), and for a row sampled without
// filters its mass Σ exp((l − m_s) / T). Rows that ask for top-k or top-p
// are left to sample_pick.
__global__ void __launch_bounds__(SAMPLE_PART_THREADS) sample_part(float *part, const float *logits, int V, int stride,
	const float *temperature, const int *top_k, const float *top_p) {
	KERNEL_ENTRY();
	__shared__ float red[32];
	__shared__ int ri[32];
	const int r = blockIdx.x, sg = blockIdx.y;
	if (sample_filtered_row(r, V, temperature, top_k, top_p)) return;
	const float *row = logits + (long long)r * stride;
	const int len = (V + SAMPLE_SEGS - 1) / SAMPLE_SEGS, b0 = min(V, sg * len), b1 = min(V, b0 + len);
	float m;
	int idx;
	range_argmax(row, b0, b1, red, ri, m, idx);
	const float temp = temperature[r];
	float w = 0.f;
	if (temp > 0.f && m > NEG_INF) {
		const float inv = 1.f / temp;
		for (int i = b0 + threadIdx.x; i < b1; i += blockDim.x) w += expf((row[i] - m) * inv);
		w = block_sum(w, red);
	}
	if (threadIdx.x == 0) {
		float *p = part + ((long long)r * SAMPLE_SEGS + sg) * 3;
		p[0] = m;
		p[1] = w;
		p[2] = __int_as_float(idx);
	}
}

// sample_pick: grid (rows), block SAMPLE_THREADS. A greedy row takes the
// segments' argmax (the largest value, then the lowest index); a row with
// top-k or top-p runs sample_filtered; any other row draws its uniform u,
// finds the segment where u · (the row's mass) falls by a prefix over the
// segments' masses in index order, and walks that segment's tokens in
// index order (each thread a contiguous run, a block-wide prefix over the
// runs), so the token is the one the single-block walk over the whole
// row picks, up to float rounding.
__global__ void sample_pick(int *out, const float *part, const float *logits, int V, int stride, const float *temperature,
	const int *top_k, const float *top_p, const unsigned long long *seed, unsigned long long *counter) {
	KERNEL_ENTRY();
	__shared__ float red[32];
	__shared__ float sums[SAMPLE_THREADS];
	__shared__ int seg;
	__shared__ float segpre, segm, segt;
	__shared__ int pick, lastpos;
	const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31;
	const float *row = logits + (long long)r * stride;
	const float temp = temperature[r];
	if (sample_filtered_row(r, V, temperature, top_k, top_p)) {
		sample_filtered(out, row, r, V, temp, top_k, top_p, seed, counter, red, sums, seg, segpre);
		return;
	}
	const float *p = part + (long long)r * SAMPLE_SEGS * 3;
	const int len = (V + SAMPLE_SEGS - 1) / SAMPLE_SEGS;
	const unsigned long long c = counter[r];
	if (tid < 32) {
		const bool has = lane < SAMPLE_SEGS;
		const float m = has ? p[3 * lane] : NEG_INF, w = has ? p[3 * lane + 1] : 0.f;
		const int idx = has ? __float_as_int(p[3 * lane + 2]) : 0x7fffffff;
		if (!(temp > 0.f)) {
			// Greedy: the segments' argmax in index order (an empty or
			// all-NaN segment has −inf and an index past its end).
			float bv = m;
			int bi = m > NEG_INF ? idx : 0x7fffffff;
			warp_argmax(bv, bi);
			if (lane == 0) {
				out[r] = bi == 0x7fffffff ? 0 : bi;
				counter[r] = c + 1;
			}
			seg = -1;
		} else {
			const float M = warp_max(m), inv = 1.f / temp;
			const float W = w > 0.f ? w * expf((m - M) * inv) : 0.f;
			const float inc = warp_scan(W);
			const float total = __shfl_sync(0xffffffffu, inc, 31);
			const float target = sample_uniform(seed[r], c) * total;
			// The first segment whose running mass passes the target; the
			// last one with mass when rounding pushed it past the end.
			const unsigned hit = __ballot_sync(0xffffffffu, W > 0.f && target < inc);
			const unsigned some = __ballot_sync(0xffffffffu, W > 0.f);
			const int s = hit ? __ffs(hit) - 1 : some ? 31 - __clz(some) : -1;
			if (lane == 0) seg = s;
			if (s >= 0 && lane == s) {
				segm = m;
				// The target in the segment's own units, exp((l − m_s)/T).
				segt = (target - (inc - W)) / expf((m - M) * inv);
			}
			if (lane == 0 && s < 0) {
				// No mass anywhere (every logit −inf or NaN): argmax's answer.
				out[r] = 0;
				counter[r] = c + 1;
			}
		}
	}
	__syncthreads();
	const int sg = seg;
	if (sg < 0) return;
	const int s0 = sg * len, s1 = min(V, s0 + len);
	const int chunk = (s1 - s0 + blockDim.x - 1) / blockDim.x;
	const int b0 = min(s1, s0 + tid * chunk), b1 = min(s1, b0 + chunk);
	const float m = segm, inv = 1.f / temp, t = segt;
	float mine = 0.f;
	for (int i = b0; i < b1; i++) mine += expf((row[i] - m) * inv);
	const float before = block_scan_excl(mine, red);
	if (tid == 0) { pick = -1; lastpos = -1; }
	__syncthreads();
	if (mine > 0.f) atomicMax(&lastpos, tid);
	if (mine > 0.f && before <= t && t < before + mine) {
		float acc = before;
		int k = -1, last = b0;
		for (int i = b0; i < b1; i++) {
			const float e = expf((row[i] - m) * inv);
			if (e > 0.f) last = i;
			acc += e;
			if (acc > t) { k = i; break; }
		}
		pick = k >= 0 ? k : last;
	}
	__syncthreads();
	if (tid == 0) {
		int k = pick;
		if (k < 0) {
			// Rounding pushed the target past the segment's sum: its last
			// token with mass.
			k = s0;
			const int lt = lastpos;
			if (lt >= 0) {
				const int l0 = min(s1, s0 + lt * chunk), l1 = min(s1, l0 + chunk);
				for (int i = l0; i < l1; i++)
					if (expf((row[i] - m) * inv) > 0.f) k = i;
			}
		}
		out[r] = k;
		counter[r] = c + 1;
	}
}

} // extern "C"
