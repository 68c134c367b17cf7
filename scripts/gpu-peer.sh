#!/usr/bin/env bash
# The built-in engine beside real peers on the same GPU, the same checkpoint
# and the same workloads (issue 44, item 6), in one run:
#   - the checkpoint: a synth Qwen2-architecture one (PRESET, default 4b:
#     Qwen2.5-3B's shape, 6.2 GB of bf16) with the Qwen3 tokenizer (TOK:
#     Qwen2.5's vocabulary plus a few tokens), because Ollama v0.9.6's
#     `create` converts Qwen2 safetensors but not Qwen3 (its convert/ has
#     no Qwen3ForCausalLM); the built-in engine serves Qwen2 too;
#   - Ollama v0.9.6, llama.cpp's ggml CUDA backend under Ollama's runner
#     (scripts/gpu-ollama-build.sh: built here, or LIBS from an earlier
#     call; PACK=DIR packs a fresh build for the next call). Its `create`
#     stores the bf16 weights as f16: the same 2 bytes a weight;
#   - HF transformers (scripts/hf_peer.py), bf16 on the GPU.
# Rows, each through the same client for the engine and Ollama:
#   1. cold first token (process start → first streamed token, page cache
#      warm), warm TTFT on the 52-token prompt and batch-1 ITL: `treni-top
#      run --headless --json` (RUNS cold starts each; Ollama at its default
#      parallelism, so its start allocates what a user's would); HF: a
#      fresh python3 per cold run, warm generations in the last;
#   2. 64 concurrent streams, 1024 in / 128 out, fresh prompts: `treni-top
#      bench` after a warm-up bench of other prompts (Ollama with
#      OLLAMA_NUM_PARALLEL=64 and a 2,048-token context a slot); HF: one
#      `generate` of a batch of 64 (after a warm-up generate of the same
#      shape), its wall time.
# The table (scripts/peer_table.py) is printed last.
# Usage on the GPU machine:
#   BIN=.carry/treni-top TOK=.carry/qwen3-tok OLLAMA=.carry/ollama.xz SRC=.carry/ggml-src.tgz \
#     [LIBS=dir] [PACK=dir] OUT=/tmp/out bash scripts/gpu-peer.sh
set -uo pipefail
BIN=$(realpath "${BIN:-bin/treni-top}")
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-peer}
PRESET=${PRESET:-4b}
RUNS=${RUNS:-1}
STREAMS=${STREAMS:-64}
PORT=${PORT:-18588}
mkdir -p "$OUT/res" "$WORK"
RES=$OUT/res
LOG=$RES/peer.log
export XDG_DATA_HOME=$WORK/data PYTHONUNBUFFERED=1
P52="Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones, naming the caches, allocations and compilations that are warm afterwards, and how to measure each one of them."
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")
CKPT=$WORK/qwen2-$PRESET
[[ -f $CKPT/config.json ]] || { say "synth qwen2 $PRESET"; "$BIN" model synth --arch qwen2 --preset "$PRESET" --out "$CKPT" --seed 7 "${TOKARGS[@]}" >>"$LOG" 2>&1; }
warm_cache() { cat "$CKPT"/*.safetensors >/dev/null; }
echo "qwen2 $PRESET, $(du -sb "$CKPT" | cut -f1) bytes; streams $STREAMS; cold runs $RUNS" >"$RES/setup.txt"

# run_cold STEM [run flags…]: treni-top run's cold start and warm requests.
run_cold() {
	local stem=$1; shift
	timeout "${RUN_S:-120}" "$BIN" run --headless --json --warmup 2 --repeat 5 --max-tokens 48 --prompt "$P52" \
		--record "$RES/$stem.jsonl" "$@" >"$RES/$stem.json" 2>>"$LOG"
	say "run $stem rc=$?"
}
# bench_streams STEM URL [bench flags…]: a warm-up bench of other prompts,
# then STREAMS fresh 1024/128 streams at once.
bench_streams() {
	local stem=$1 url=$2; shift 2
	timeout "${BENCH_S:-180}" "$BIN" bench --url "$url" --endpoint completions --ignore-eos --quiet --json "${TOKARGS[@]}" "$@" \
		--num-requests 8 --concurrency 8 --prompt-tokens 1024 --max-tokens 128 --seed 7 --no-record >"$RES/$stem-warmup.json" 2>>"$LOG"
	say "bench $stem warm-up rc=$?"
	timeout "${BENCH_S:-180}" "$BIN" bench --url "$url" --endpoint completions --ignore-eos --quiet --json "${TOKARGS[@]}" "$@" \
		--num-requests "$STREAMS" --concurrency "$STREAMS" --prompt-tokens 1024 --max-tokens 128 --seed 9001 \
		--record "$RES/$stem.jsonl" >"$RES/$stem.json" 2>>"$LOG"
	say "bench $stem rc=$?"
}
# A server this script started (sp) is stopped when the script ends or is
# stopped (the session's per-part time limit sends TERM).
sp=
stop() { [[ -n $sp ]] && kill "$sp" 2>/dev/null && wait "$sp" 2>/dev/null; sp=; }
trap 'stop; exit 143' TERM INT
trap stop EXIT
# wait_up URL PID: until URL answers (60 s), or the process exits.
wait_up() {
	for _ in $(seq 1 600); do
		curl -fsS "$1" >/dev/null 2>&1 && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# --- the built-in engine ----------------------------------------------------------
if [[ ${ENGINE:-1} == 1 ]]; then
	warm_cache
	run_cold engine-run-0 --device cuda --model "$CKPT" # first contact: tokenizer cache, driver files; not reported
	for i in $(seq 1 "$RUNS"); do run_cold "engine-run-$i" --device cuda --model "$CKPT"; done
	"$BIN" serve --model "$CKPT" --device cuda --addr 127.0.0.1:$PORT --max-batch "$STREAMS" --max-model-len 4096 2>"$RES/engine-serve.log" &
	sp=$!
	if wait_up "http://127.0.0.1:$PORT/health" $sp; then
		bench_streams engine-bench "http://127.0.0.1:$PORT"
	else
		say "the engine's server did not come up"; tail -5 "$RES/engine-serve.log" | tee -a "$LOG"
	fi
	stop
fi

# --- HF transformers ---------------------------------------------------------------
if [[ ${HF:-1} == 1 ]]; then
	warm_cache
	for i in $(seq 1 "$RUNS"); do
		w=0; [[ $i == "$RUNS" ]] && w=3
		HF_T0=$(date +%s.%N) timeout "${HF_S:-120}" python3 scripts/hf_peer.py "$CKPT" --prompt "$P52" --max-new-tokens 48 --warm $w \
			>"$RES/hf-run-$i.json" 2>>"$LOG"
		say "hf run $i rc=$?"
	done
	timeout "${HF_S:-120}" python3 scripts/hf_peer.py "$CKPT" --batch "$STREAMS" --prompt-tokens 1024 --max-new-tokens 128 \
		>"$RES/hf-batch.json" 2>>"$LOG"
	say "hf batch rc=$?"
fi

# --- Ollama --------------------------------------------------------------------------
if [[ ${OLLAMA_PEER:-1} == 1 ]]; then
	OWORK=${OLLAMA_WORK:-/tmp/treni-ollama}
	ROOT=$OWORK/dist
	t0=$SECONDS
	if ROOT=$ROOT WORK=$OWORK LOG=$RES/ollama-build.log bash scripts/gpu-ollama-build.sh; then
		say "ollama ready in $((SECONDS - t0)) s (waited for or built or unpacked)"
		export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
		export OLLAMA_MODELS=$OWORK/models OLLAMA_HOST=127.0.0.1:11500 OLLAMA_KEEP_ALIVE=10m OLLAMA_NOPRUNE=1
		OL=$ROOT/bin/ollama
		MODEL=peer-qwen2-$PRESET
		if [[ ! -f $OLLAMA_MODELS/manifests/registry.ollama.ai/library/$MODEL/latest ]]; then
			t0=$SECONDS
			"$OL" serve >"$RES/ollama-create-serve.log" 2>&1 &
			sp=$!
			wait_up "http://$OLLAMA_HOST/api/version" $sp
			printf 'FROM %s\n' "$CKPT" >"$OWORK/Modelfile"
			timeout "${CREATE_S:-240}" "$OL" create "$MODEL" -f "$OWORK/Modelfile" >>"$LOG" 2>&1
			say "ollama create $MODEL rc=$? in $((SECONDS - t0)) s"
			stop
		fi
		find "$OLLAMA_MODELS/blobs" -type f -exec cat {} + >/dev/null
		for i in $(seq 1 "$RUNS"); do run_cold "ollama-run-$i" --request-model "$MODEL" -- "$OL" serve; done
		OLLAMA_NUM_PARALLEL=$STREAMS OLLAMA_CONTEXT_LENGTH=2048 "$OL" serve >"$RES/ollama-serve.log" 2>&1 &
		sp=$!
		if wait_up "http://$OLLAMA_HOST/api/version" $sp; then
			bench_streams ollama-bench "http://$OLLAMA_HOST" --model "$MODEL"
		else
			say "ollama serve did not come up"
		fi
		stop
		grep -E "offloaded|n_parallel|n_ctx|flash_attn|model buffer size" "$RES/ollama-serve.log" | head -8 | cut -c1-200 >>"$LOG"
	else
		say "ollama not ready: see $RES/ollama-build.log"
	fi
fi

python3 scripts/peer_table.py "$RES" | tee "$RES/peer-table.md"
