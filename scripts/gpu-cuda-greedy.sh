#!/bin/bash
# gpu-cuda-greedy.sh: the CUDA backend against Hugging Face transformers and
# against engine/cpu on synth checkpoints of real Qwen3 shapes, in one run:
#   1. synth qwen3 0.6b and 4b (seed 7, the real Qwen3 tokenizer);
#   2. transformers' logits at every position of three fixed prompts, in
#      bfloat16 and float32 on the GPU (engine/cuda/testdata/hf_cuda_logits.py);
#   3. TestGPUHFLogits: the CUDA backend's logits (decode, whole-prompt
#      prefill and chunked prefill) against transformers' float32, next to
#      transformers' own bf16-vs-fp32 disagreement;
#   4. TestGPUGreedyVsCPU: 64 greedy steps at batch 1 and batch 8, CUDA
#      backend vs engine/cpu, token by token (near-ties counted);
# and prints a short table last.
#
# No Go on the GPU machine: build the test binary beforehand and carry it:
#   go test -c -o .carry/cuda.test ./engine/cuda
#   go build -o .carry/treni-top ./cmd/treni-top
# then, from the repository root:  OUT=/some/dir scripts/gpu-cuda-greedy.sh
# Needs python3 with torch (CUDA) and transformers.
# GREEDY_4B=0 skips the 4b greedy run (the CPU reference is slow at 4b).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.carry/out}
mkdir -p "$OUT"
TB=${TRENI_BIN:-$ROOT/.carry/treni-top}
TESTBIN=${TESTBIN:-$ROOT/.carry/cuda.test}
TOK=${TOK:-$ROOT/.carry/qwen3-tok}
W=${WORK:-$(mktemp -d /tmp/cuda-greedy.XXXX)}
PRESETS=${PRESETS:-0.6b 4b}
LOG=$OUT/greedy.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
rc=0

say "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$LOG"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tee -a "$LOG"

hf=""; gr=""
for p in $PRESETS; do
	say "== synth qwen3 $p"
	"$TB" model synth --arch qwen3 --preset "$p" --seed 7 --tokenizer "$TOK" --out "$W/q$p" 2>&1 | tee -a "$LOG" || { say "synth $p FAILED"; rc=1; continue; }
	say "== transformers logits $p"
	if python3 "$ROOT/engine/cuda/testdata/hf_cuda_logits.py" "$W/q$p" "$W/hf$p" 2>&1 | grep -v Warning | tee -a "$LOG"; then
		hf="$hf,$p:$W/q$p:$W/hf$p"
	else
		say "transformers $p FAILED"; rc=1
	fi
	if [ "$p" != 4b ] || [ "${GREEDY_4B:-1}" = 1 ]; then gr="$gr,$p:$W/q$p"; fi
done

cd "$ROOT/engine/cuda"
say "== TestGPUHFLogits"
TRENI_HF_MODELS=${hf#,} timeout ${HF_TIMEOUT:-200} "$TESTBIN" -test.v -test.count=1 -test.run '^TestGPUHFLogits$' > "$OUT/hf-test.log" 2>&1 || rc=1
cat "$OUT/hf-test.log" >> "$LOG"
say "== TestGPUGreedyVsCPU"
TRENI_GREEDY_MODELS=${gr#,} timeout ${GREEDY_TIMEOUT:-300} "$TESTBIN" -test.v -test.count=1 -test.run '^TestGPUGreedyVsCPU$' > "$OUT/greedy-test.log" 2>&1 || rc=1
cat "$OUT/greedy-test.log" >> "$LOG"

echo
echo "================ summary ================"
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1
grep -hE "^HF " "$LOG" | sed -E 's/^ +//'
echo "logits vs transformers fp32 (tol rel_l2 per row 3e-2; HF bf16 line = transformers' own bf16 error):"
grep -hE "HFERR |HF .*transformers" "$OUT/hf-test.log" | sed -E 's/^ +//; s/^[a-z_]+\.go:[0-9]+: //'
echo "greedy vs engine/cpu:"
grep -hE "GREEDY " "$OUT/greedy-test.log" | sed -E 's/^ +//; s/^[a-z_]+\.go:[0-9]+: //'
echo "tests:"
grep -hE "^ *(--- (PASS|FAIL|SKIP)|PASS$|FAIL$|panic|.*timed out)" "$OUT/hf-test.log" "$OUT/greedy-test.log" | head -n 30
echo "table:"
grep -hE "TABLE " "$OUT/hf-test.log" "$OUT/greedy-test.log" | sed -E 's/^ +//; s/^[a-z_]+\.go:[0-9]+: TABLE //'
echo "exit: $rc"
exit $rc
