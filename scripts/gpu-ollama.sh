#!/usr/bin/env bash
# Issue 17 part 1: treni-top watching a server it did not write, on the GPU.
# Ollama v0.9.6 with its ggml CUDA backend, on the GPU machine:
#   1. build ggml-base + ggml-cuda for sm_90 only (flash-attention kernels
#      off: they triple the build) from the v0.9.6 module source carried as
#      $SRC (a tarball of the module's CMakeLists.txt, CMakePresets.json and
#      ml/backend/ggml/ggml, made on the development machine), or unpack
#      a previous call's build (LIBS), and lay them out as Ollama's Linux
#      distribution does (scripts/gpu-ollama-build.sh);
#   2. import a Qwen2-architecture synth checkpoint with `ollama create`
#      (1.7b by default: 3.5 GB, so that reading it from storage outweighs
#      the runner start when the page cache is cold);
#   3. `treni-top run --headless --json -- ollama serve` twice: page cache
#      warm, then with --evict-page-cache (diagnosis must name A);
#   4. check each session (scripts/ollama_session_check.py --gpu): stages
#      from Ollama's log, the runner in the process tree, NVML memory on
#      Ollama's tree, our cold TTFT against Ollama's load + prompt_eval.
# Usage on the GPU machine, with both Go binaries built elsewhere:
#   BIN=.carry/treni-top OLLAMA=.carry/ollama/ollama SRC=.carry/ollama/ggml-src.tgz \
#     OUT=/tmp/out bash scripts/gpu-ollama.sh
set -uo pipefail
BIN=$(realpath "${BIN:-bin/treni-top}")
OLLAMA=$(realpath "${OLLAMA:?OLLAMA=path to an ollama v0.9.6 binary (plain or .xz)}")
SRC=$(realpath "${SRC:-/dev/null}") # the ggml source tarball, unless LIBS holds built libraries
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-ollama}
PRESET=${PRESET:-1.7b}
mkdir -p "$OUT/res" "$WORK"
RES=$OUT/res
LOG=$RES/gpu-ollama.log
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
ROOT=$WORK/dist
# --- 1. the CUDA backend (scripts/gpu-ollama-build.sh; LIBS: a previous call's libraries) ---
t0=$SECONDS
OLLAMA=$OLLAMA SRC=$SRC ROOT=$ROOT WORK=$WORK LOG=$LOG bash scripts/gpu-ollama-build.sh || exit 1
build_s=$((SECONDS - t0))
say "ggml-cuda ready in ${build_s} s: $(ls "$ROOT/lib/ollama" "$ROOT/lib/ollama/cuda_v12" | tr '\n' ' ')"
# cudart and cuBLAS come from the machine's toolkit (CUDA 13 here).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export OLLAMA_MODELS=$WORK/models OLLAMA_HOST=127.0.0.1:11500 OLLAMA_KEEP_ALIVE=10m OLLAMA_NOPRUNE=1
OL=$ROOT/bin/ollama

# --- 2. the model ---------------------------------------------------------------
CKPT=$WORK/synth-qwen2-$PRESET
MODEL=synth-qwen2-$PRESET
[[ -f $CKPT/config.json ]] || "$BIN" model synth --arch qwen2 --preset "$PRESET" --out "$CKPT" >>"$LOG" 2>&1
if [[ ! -f $OLLAMA_MODELS/manifests/registry.ollama.ai/library/$MODEL/latest ]]; then
	say "ollama create $MODEL"
	"$OL" serve >"$RES/create-serve.log" 2>&1 &
	sp=$!
	for _ in $(seq 1 300); do curl -fsS "http://$OLLAMA_HOST/api/version" >/dev/null 2>&1 && break; sleep 0.1; done
	printf 'FROM %s\n' "$CKPT" >"$WORK/Modelfile"
	"$OL" create "$MODEL" -f "$WORK/Modelfile" >>"$LOG" 2>&1 || say "ollama create failed"
	kill "$sp"; wait "$sp" 2>/dev/null
fi

# --- 3./4. the traced runs ----------------------------------------------------------
rc=0
for mode in warm evicted; do
	flags=()
	[[ $mode == evicted ]] && flags=(--evict-page-cache)
	[[ $mode == warm ]] && find "$OLLAMA_MODELS/blobs" -type f -exec cat {} + >/dev/null
	s=$RES/session-$mode.jsonl
	say "treni-top run --headless --json ${flags[*]} -- ollama serve"
	"$BIN" run --headless --json --record "$s" "${flags[@]}" \
		--request-model "$MODEL" --warmup 1 --repeat 5 --max-tokens 32 \
		--prompt "Why is the first request slow?" \
		-- "$OL" serve >"$RES/report-$mode.json" 2>"$RES/progress-$mode.log" || { say "run ($mode) failed"; tail -20 "$RES/progress-$mode.log"; rc=1; continue; }
	python3 scripts/ollama_session_check.py "$s" --gpu | tee -a "$LOG" || rc=1
	"$BIN" report "$s" --format md >"$RES/report-$mode.md" 2>&1
	dom=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["diagnosis"]; print(d.get("dominant") or "none")' "$RES/report-$mode.json" 2>/dev/null)
	say "$mode: diagnosis dominant = $dom"
	if [[ $mode == evicted && $dom != A ]]; then say "FAIL: evicted run not diagnosed A"; rc=1; fi
	grep -E "offloaded|CUDA0|KV buffer|compute buffer" "$s" | head -8 | cut -c1-240 >>"$LOG"
done
tar -C "$OUT" -czf "$OUT/gpu-ollama.tar.gz" res
say "build ${build_s} s; rc=$rc"
exit $rc
