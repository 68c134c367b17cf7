#!/bin/bash
# gpu-cuda-check.sh: the CUDA backend's check on a machine with an NVIDIA
# GPU and nvcc, in one run: builds engine/cuda/kernels/kernels.fatbin and
# manifest.json with nvcc, reports the kernels' registers and spills, runs
# the GPU tests of engine/cuda (every kernel against a CPU reference with
# its error, the cuBLASLt GEMMs, graph capture and replay, the backend's
# logits against engine/cpu when present) with the fresh fatbin, runs
# compute-sanitizer over the kernel tests, and prints a short table last.
#
# There is no Go toolchain on the GPU machine: build the test binary
# beforehand where Go is and carry it along:
#   go test -c -o .carry/cuda.test ./engine/cuda
# then run, from the repository root:  OUT=/some/dir scripts/gpu-cuda-check.sh
# The fatbin and manifest land in $OUT; copy them into engine/cuda/kernels/
# and commit them.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.carry/out}
mkdir -p "$OUT"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
TESTBIN=${TESTBIN:-$ROOT/.carry/cuda.test}
LOG=$OUT/check.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
run() { echo "+ $*" >>"$LOG"; "$@" >>"$LOG" 2>&1; }

say "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$LOG"
"$NVCC" --version | tail -n 2 | tee -a "$LOG"

say "== build fatbin"
t0=$(date +%s.%N)
if ! NVCC=$NVCC sh "$ROOT/engine/cuda/kernels/build.sh" "$OUT" >>"$LOG" 2>&1; then
	say "nvcc build FAILED"; tail -n 40 "$LOG"; exit 1
fi
build_s=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
fatbin_bytes=$(wc -c < "$OUT/kernels.fatbin")
say "fatbin $fatbin_bytes bytes in ${build_s}s"
# Reproducible: a second build of the same sources is byte for byte the
# same (so a committed fatbin can be checked against its sources).
mkdir -p "$OUT/rebuild"
if NVCC=$NVCC sh "$ROOT/engine/cuda/kernels/build.sh" "$OUT/rebuild" >>"$LOG" 2>&1 && cmp -s "$OUT/kernels.fatbin" "$OUT/rebuild/kernels.fatbin"; then
	say "fatbin reproducible: a second nvcc build is byte-identical"
else
	say "fatbin NOT reproducible: a second nvcc build differs"
fi
"$NVCC" -cubin -arch=sm_90 -O3 -Xptxas -v -o /dev/null "$ROOT/engine/cuda/kernels/kernels.cu" > "$OUT/ptxas-sm90.txt" 2>&1
run /usr/local/cuda/bin/cuobjdump --list-elf --list-ptx "$OUT/kernels.fatbin"

say "== GPU tests"
export TRENI_CUDA_FATBIN=$OUT/kernels.fatbin
export TRENI_CUDA_BIG=${TRENI_CUDA_BIG:-1} # also the demo-sized backend checks
export TRENI_CUDA_SHAPES=${TRENI_CUDA_SHAPES-0.6b,4b} # and real Qwen3 shapes (set empty to skip)
cd "$ROOT/engine/cuda"
"$TESTBIN" -test.v -test.count=1 -test.timeout 520s -test.run "${TESTS:-GPU}" > "$OUT/gpu-tests.log" 2>&1
tests_rc=$?
cat "$OUT/gpu-tests.log" >> "$LOG"

san="skipped"
if [ "${SANITIZE:-1}" = 1 ] && command -v /usr/local/cuda/bin/compute-sanitizer >/dev/null; then
	say "== compute-sanitizer (memcheck) over the kernel tests and the tiny backend checks"
	TRENI_CUDA_BIG= timeout 240 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 20 \
		"$TESTBIN" -test.count=1 -test.run "${SANITIZE_TESTS:-TestGPUElementwise|TestGPURopeStoreAndAttention|TestGPUSample|TestGPUBackendMatchesCPU|TestGPUSleepWake}" > "$OUT/sanitizer.log" 2>&1
	src=$?
	san=$(grep -E "ERROR SUMMARY" "$OUT/sanitizer.log" | tail -n 1)
	[ -n "$san" ] || san="rc=$src (no summary)"
	cat "$OUT/sanitizer.log" >> "$LOG"
fi

echo
echo "================ summary ================"
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1
echo "fatbin: $fatbin_bytes bytes, nvcc: $(grep '"nvcc"' "$OUT/manifest.json" | cut -d'"' -f4)"
echo "registers/spills (sm_90):"
grep -E "Compiling entry|registers|spill" "$OUT/ptxas-sm90.txt" | sed -E 's/ptxas info *: //' | paste - - - | \
	sed -E "s/Compiling entry function '([a-z0-9_]+)' for 'sm_90'/\1/; s/Function properties for [a-z0-9_]+//" | cut -c1-150
echo "errors vs CPU reference:"
grep -E "ERR |PERF |SAMPLE |LOGITS |UPLOAD |STAGE " "$OUT/gpu-tests.log" | sed -E 's/^ +//; s/^[a-z_]+\.go:[0-9]+: //'
echo "tests:"
grep -E "^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok)" "$OUT/gpu-tests.log" | grep -v "=== RUN" | head -n 40
echo "compute-sanitizer: $san"
echo "test exit: $tests_rc"
exit $tests_rc
