#!/bin/sh
# Syntax- and type-checks the kernels with the host C++ compiler, for
# machines without nvcc: CUDA's keywords and built-ins are stubbed. It
# proves nothing about device code generation; nvcc (make kernels) does.
set -e
cd "$(dirname "$0")"
cat > /tmp/treni_cuda_stub.h <<'H'
#include <cmath>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct tt_dim3 { unsigned x, y, z; };
extern tt_dim3 threadIdx, blockIdx, blockDim, gridDim;
inline void __syncthreads() {}
inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
inline int __shfl_xor_sync(unsigned, int v, int) { return v; }
inline int __shfl_sync(unsigned, int v, int) { return v; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
using std::min;
H
${CXX:-g++} -std=c++17 -fsyntax-only -Wall -Wno-unknown-pragmas -include /tmp/treni_cuda_stub.h -x c++ kernels.cu
echo "host syntax check ok"
