#!/bin/sh
# Syntax- and type-checks the kernels with the host C++ compiler, for
# machines without nvcc, through the CPU emulator's header (emu/cuda_emu.h,
# which stands in for CUDA's keywords and built-ins). It proves nothing
# about device code generation; nvcc (make kernels) does.
set -e
cd "$(dirname "$0")"
${CXX:-g++} -std=c++20 -fsyntax-only -Wall -Wno-unknown-pragmas -include emu/cuda_emu.h -x c++ kernels.cu
echo "host syntax check ok"
