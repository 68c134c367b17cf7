#!/usr/bin/env bash
# Every GPU-machine check of the built-in engine in one run (one lease):
# the engine seen by treni-top (gpu-engine-run.sh), the server under load and
# hang-ups (gpu-serve-check.sh) and the induced cold starts (gpu-scenarios.sh).
# Full logs in $OUT/all.tar.gz, a short summary last.
# Usage: BIN=.carry/treni-top TOK=<Qwen3 tokenizer dir> OUT=/tmp/out bash scripts/gpu-all.sh
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
export BIN=${BIN:-bin/treni-top} TOK=${TOK:-}
mkdir -p "$OUT/engine" "$OUT/serve" "$OUT/scen"
t0=$SECONDS
OUT=$OUT/engine bash scripts/gpu-engine-run.sh >"$OUT/engine.txt" 2>&1; e1=$?
OUT=$OUT/serve WORK=/tmp/treni-engine-run-${TOK:+realtok} bash scripts/gpu-serve-check.sh >"$OUT/serve.txt" 2>&1; e2=$?
OUT=$OUT/scen bash scripts/gpu-scenarios.sh >"$OUT/scen.txt" 2>&1; e3=$?
tar -C "$OUT" -czf "$OUT/all.tar.gz" engine serve scen engine.txt serve.txt scen.txt
echo "=== engine (rc $e1)"; grep -E '^---|cold TTFT|diagnosis|unattributed' "$OUT/engine.txt" | head -20
echo "=== serve (rc $e2)"; grep -vE '^\{"t"' "$OUT/serve.txt" | tail -14
echo "=== scenarios (rc $e3)"; tail -14 "$OUT/scen.txt"
echo "total $((SECONDS - t0)) s"
