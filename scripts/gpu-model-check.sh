#!/usr/bin/env bash
# One GPU-machine run for the model layer and the CPU backend's references:
#   1. treni-top doctor (+ --floors): driver, GPU, cuBLASLt, physical floors
#   2. synth checkpoints of each architecture load in HF transformers with
#      finite logits (engine/model/testdata/hf_load_check.sh)
#   3. the synth tokenizer encodes like HF AutoTokenizer
#      (engine/tokenizer/testdata/hf_tokenizer_check.py)
#   4. golden logits and greedy tokens for the CPU backend
#      (engine/cpu/testdata/make_golden.py)
# Usage on the GPU machine, from the repository root, with a treni-top built
# elsewhere (no Go there):  BIN=.carry/treni-top OUT=/tmp/out bash scripts/gpu-model-check.sh
set -uo pipefail
BIN=${BIN:-bin/treni-top}
OUT=${OUT:-$(mktemp -d)}
WORK=$(mktemp -d)
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/res"
status=()
step() { # name command...
  local name=$1; shift
  echo "=== $name" | tee -a "$OUT/res/log.txt"
  local t0=$SECONDS
  if "$@" >>"$OUT/res/log.txt" 2>&1; then status+=("$name: ok ($((SECONDS - t0)) s)"); else status+=("$name: FAILED rc=$? ($((SECONDS - t0)) s)"); fi
}
step doctor "$BIN" doctor
step floors bash -c "'$BIN' doctor --floors --json > '$OUT/res/floors.json'"
step hf_load bash -c "BIG=${BIG:-} BIN='$BIN' WORK='$WORK/synth' OUT='$OUT/res' bash engine/model/testdata/hf_load_check.sh"
tok_check() {
  for arch in qwen3 llama; do
    "$BIN" model tokenize "$WORK/synth/$arch-tiny" "Hello, world!" "It's 42 o'clock, isn't it?" "  leading and trailing  " \
      "naïve café — 東京 🚀" $'<|im_start|>user\nhi<|im_end|>\n' --json > "$WORK/$arch-ids.jsonl" || return 1
    python3 engine/tokenizer/testdata/hf_tokenizer_check.py "$WORK/synth/$arch-tiny" "$WORK/$arch-ids.jsonl" || return 1
  done
}
step hf_tokenizer tok_check
mkdir -p "$OUT/res/golden"
step golden python3 engine/cpu/testdata/make_golden.py --treni-top "$BIN" --out "$OUT/res/golden"
tar -C "$OUT" -czf "$OUT/results.tar.gz" res
echo
echo "=== summary"
printf '%s\n' "${status[@]}" | tee "$OUT/summary.txt"
cat "$OUT/res/floors.json" 2>/dev/null | head -20
