#!/usr/bin/env bash
# Synthesize one checkpoint per architecture and check each loads in HF
# transformers with finite logits (engine/model/testdata/hf_load_check.py).
# Run from the repository root on a machine with torch and transformers:
#   bash engine/model/testdata/hf_load_check.sh            # tiny of each arch
#   BIG=1 bash engine/model/testdata/hf_load_check.sh      # also 0.6b/1.7b-sized
# Needs bin/treni-top (go build -o bin/treni-top ./cmd/treni-top) or Go.
# TOK=DIR copies that tokenizer instead of training the small one, e.g.
#   TOK=engine/model/synth/testdata/tok (byte-level, with the chat specials).
set -euo pipefail
BIN=${BIN:-bin/treni-top}
if [[ ! -x $BIN ]]; then go build -o "$BIN" ./cmd/treni-top; fi
WORK=${WORK:-$(mktemp -d)}
OUTDIR=${OUT:-$WORK}
TOKARGS=()
if [[ -n ${TOK:-} ]]; then TOKARGS=(--tokenizer "$TOK"); fi
dirs=()
for arch in qwen3 qwen2 llama; do
  for preset in tiny ${BIG:+demo 0.6b}; do
    d=$WORK/$arch-$preset
    "$BIN" model synth --arch "$arch" --preset "$preset" --out "$d" --seed 1 --force "${TOKARGS[@]}"
    dirs+=("$d")
  done
done
# f32 and f16 variants of one tiny model exercise the other dtypes.
"$BIN" model synth --arch qwen3 --preset tiny --out "$WORK/qwen3-tiny-f32" --seed 1 --dtype f32 --force "${TOKARGS[@]}"
"$BIN" model synth --arch llama --preset tiny --out "$WORK/llama-tiny-f16" --seed 1 --dtype f16 --force "${TOKARGS[@]}"
dirs+=("$WORK/qwen3-tiny-f32" "$WORK/llama-tiny-f16")
for d in "${dirs[@]}"; do "$BIN" model inspect "$d" | grep -E 'architecture|parameters|index build'; done
python3 engine/model/testdata/hf_load_check.py --dump "$OUTDIR/hf_logits" "${dirs[@]}"
