#!/usr/bin/env bash
# The built-in engine's server under load on the GPU machine (issue 16), one
# run of one script, so the same command gives the baseline and the result:
#   0. the floors (treni-top doctor --floors --json, the GPU idle; or
#      FLOORS_JSON, a floors file of the same call): the bf16 GEMM rate
#      and the device copy rate the 64 streams' bound is computed from;
#   1. 64 concurrent streams, input 1024 / output 128: 1 warm-up run and 1
#      measured run of the same prompts (prefix-cache hits), then 1 run of
#      fresh prompts (every token prefilled) set against its bound
#      (treni-top bench --floors --model-config: the prompts' FLOPs over
#      the GEMM rate, then every decode step's weight and KV bytes over
#      the device copy rate); every KV block free afterwards (/metrics);
#   2. the QPS sweep: Poisson, seed 42, in 1024 / out 128, QPS levels
#      (QPS, default 8,16,24,32,40,48: past the 64 streams' rate),
#      SWEEP_S seconds of arrivals a level (10 by default: shorter levels
#      leave the queue-growth estimate at the mercy of Poisson clumps;
#      NREQ requests when set), fresh prompts at each level, after an
#      unrecorded 8-request warm-up; the report's saturation: the highest
#      QPS whose TPOT p99 stays ≤ 50 ms with no queue growth and no errors;
#   3. the five serving workloads (--workload all, 1 measured run: the server
#      is warm from parts 1–2);
#   4. warm prefix-hit TTFT at 1k and 16k shared-prefix tokens (a warm-up
#      run puts the prefix in the cache; scripts/workloads/prefix_ttft_*.json);
#   5. VARIANTS (see below): part 1 and the chunked_prefill workload again
#      on fresh servers with another attention kernel, the committed
#      fatbin or another step token budget, for ratios in one run;
#   6. the table, printed last (scripts/serve_bench_table.py).
# Batch-1 ITL and the 52-token warm TTFT come from scripts/gpu-cold-bench.sh.
# Usage on the GPU machine, with a treni-top built elsewhere:
#   BIN=.carry/treni-top TOK=.carry/qwen3-tok OUT=/tmp/out bash scripts/gpu-serve-bench.sh
set -uo pipefail
BIN=${BIN:-bin/treni-top}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-serve-bench}
PRESET=${PRESET:-4b}
PORT=${PORT:-18577}
# STREAMS: the concurrent streams of part 1 (and of the variants), 64 by
# default (16: the decode batches of a moderately loaded server).
STREAMS=${STREAMS:-64}
PARTS=${PARTS:-"streams qps workloads prefix"}
mkdir -p "$OUT/res" "$WORK"
RES=$OUT/res
LOG=$RES/serve-bench.log
export XDG_DATA_HOME=$WORK/data
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
d=$WORK/qwen3-$PRESET
TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")
# The client sizes prompts in the model's own tokens (a 1,024-token prompt is
# 1,024 Qwen3 tokens; at ~4 characters a token it was ~848). BENCH_TOK_MODE=chars
# keeps the character sizing, for comparison with earlier runs.
BENCH_TOK=("${TOKARGS[@]}"); [[ ${BENCH_TOK_MODE:-} == chars ]] && BENCH_TOK=()
[[ -f $d/config.json ]] || { say "synth $PRESET"; "$BIN" model synth --arch qwen3 --preset "$PRESET" --out "$d" --seed 7 "${TOKARGS[@]}" >>"$LOG" 2>&1; }
cat "$d"/*.safetensors >/dev/null

# start_server LOG [ENV...] -- [FLAGS...]: a server on $PORT (its pid in
# PID; env applies ENV, e.g. VAR=x or -u VAR), ready once /health answers.
# Returns 1, having said why, when it exits or does not answer in 60 s.
start_server() {
	local log=$1 envs=()
	shift
	while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
	[[ $# -gt 0 ]] && shift
	env "${envs[@]}" "${SBIN:-$BIN}" serve --model "$d" --device "${DEVICE:-cuda}" --addr 127.0.0.1:$PORT --max-batch 64 \
		--max-model-len 20480 ${SERVE_FLAGS:-} "$@" 2>"$log" &
	PID=$!
	trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null' EXIT
	for _ in $(seq 1 600); do
		curl -fsS http://127.0.0.1:$PORT/health >/dev/null 2>&1 && return 0
		kill -0 $PID 2>/dev/null || break # it exited (e.g. its kernels are not in that fatbin)
		sleep 0.1
	done
	say "the server did not come up"; tail -20 "$log" | tee -a "$LOG"
	stop_server
	return 1
}
stop_server() {
	kill $PID 2>/dev/null; wait $PID 2>/dev/null
	trap - EXIT
}

# The floors of this call, measured before the server takes the GPU.
if [[ -n ${FLOORS_JSON:-} && -s ${FLOORS_JSON:-} ]]; then
	cp "$FLOORS_JSON" "$RES/floors.json"
else
	say "floors"
	"$BIN" doctor --floors --json >"$RES/floors.json" 2>>"$LOG" || say "doctor --floors failed: no bound"
fi
# The bound needs the GEMM rate: without it the bench runs unbounded
# rather than refusing to run.
ROOF=()
if grep -q '"tflops"' "$RES/floors.json" 2>/dev/null; then
	ROOF=(--floors "$RES/floors.json" --model-config "$d")
else
	say "no bound: the floors have no GEMM rate ($(grep -o '"gemm_bf16_error": *"[^"]*"' "$RES/floors.json" 2>/dev/null))"
fi

say "serve $PRESET"
start_server "$RES/serve.log" -- || exit 1
# SETTLE_S: seconds to let the server's background warm-up finish before
# the first part (PARTS=prefix alone otherwise measures a server still
# warming: its decode graphs and cuBLASLt kernels load beside the steps).
sleep "${SETTLE_S:-0}"
metric() { curl -fsS http://127.0.0.1:$PORT/metrics | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {print $2}'; }
bench() { # stem, bench flags…
	local stem=$1; shift
	local t0=$SECONDS
	"$BIN" bench --url http://127.0.0.1:$PORT --endpoint completions --ignore-eos --quiet --json "${BENCH_TOK[@]}" \
		--record "$RES/$stem.jsonl" "$@" >"$RES/$stem.json" 2>>"$LOG"
	say "bench $stem rc=$? in $((SECONDS - t0)) s"
}
# streams SUFFIX: STREAMS (64) concurrent streams twice: after a warm-up run of the
# same prompts (every prompt a prefix-cache hit: decode-bound), then with
# fresh prompts (another seed: every prompt prefilled), set against its
# bound (the cached run would beat a bound that prefills every prompt).
streams() {
	bench "streams$STREAMS$1" --num-requests "$STREAMS" --concurrency "$STREAMS" --prompt-tokens 1024 --max-tokens 128 --warmup-runs 1 --repeat-runs 1
	bench "streams$STREAMS-fresh$1" --num-requests "$STREAMS" --concurrency "$STREAMS" --prompt-tokens 1024 --max-tokens 128 --seed 9001 --warmup-runs 0 --repeat-runs 1 "${ROOF[@]}"
}
for part in $PARTS; do
	case $part in
	streams)
		streams ""
		sleep 1
		say "kv blocks used after $STREAMS streams: $(metric treni_kv_blocks_used)" ;;
	qps)
		bench qps-warmup --num-requests 8 --prompt-tokens 1024 --max-tokens 128 --seed 7
		n=(); [[ -n ${NREQ:-} ]] && n=(--num-requests "$NREQ")
		bench qps --qps "${QPS:-8,16,24,32,40,48}" --sweep-seconds "${SWEEP_S:-10}" "${n[@]}" --prompt-tokens 1024 --max-tokens 128 --seed 42 ;;
	workloads)
		bench workloads --workload all --warmup-runs 0 --repeat-runs 1 ;;
	prefix)
		for k in 1k 16k; do
			bench "prefix-$k" --workload-file scripts/workloads/prefix_ttft_$k.json --warmup-runs 1 --repeat-runs 1
		done ;;
	esac
done
sleep 1
say "kv blocks used at the end: $(metric treni_kv_blocks_used) of $(metric treni_kv_blocks_total)"
curl -fsS http://127.0.0.1:$PORT/metrics >"$RES/metrics-end.txt" 2>/dev/null
stop_server
# Variants: part 1 (and the chunked_prefill workload) again, each on a
# fresh server, for ratios measured in one run. VARIANTS lists them:
#   paged       the previous attention kernel (TRENI_CUDA_ATTENTION=paged);
#   flash4      attn_mma without its one-warp form (TRENI_CUDA_ATTENTION=flash4);
#   committed   the kernels of the committed fatbin (TRENI_CUDA_FATBIN
#               unset), when the main server ran a freshly built one (a
#               binary that needs kernels the committed fatbin lacks
#               cannot start on it: the variant is skipped);
#   prev:PATH   another server binary at PATH (a build of the previous
#               commit, with its own embedded fatbin: TRENI_CUDA_FATBIN
#               unset), named prev in the tables;
#   budgetN     --max-batched-tokens N;
#   bsN         --block-size N (positions per KV block);
#   env:K=V     the environment setting K=V (e.g. env:TRENI_CUDA_PDL=off),
#               named K=V in the tables;
#   ktrace      the main server's binary with every kernel recorded
#               (scripts/ktrace, built here against the machine's CUPTI):
#               res/ktrace-report.txt splits its steps into kernels, gaps
#               and host time; its throughput is the traced one (CUPTI
#               costs 5–8% of it).
# COMPARE_PAGED=1 is VARIANTS=paged.
VARIANTS=${VARIANTS:-}
[[ -n ${COMPARE_PAGED:-} ]] && VARIANTS="paged $VARIANTS"
for v in $VARIANTS; do
	envs=() flags=()
	case $v in
	paged) envs=(TRENI_CUDA_ATTENTION=paged) ;;
	flash4) envs=(TRENI_CUDA_ATTENTION=flash4) ;;
	committed) envs=(-u TRENI_CUDA_FATBIN) ;;
	prev:*) envs=(-u TRENI_CUDA_FATBIN) SBIN=${v#prev:} v=prev ;;
	budget[0-9]*) flags=(--max-batched-tokens "${v#budget}") ;;
	bs[0-9]*) flags=(--block-size "${v#bs}") ;;
	env:*=*) envs=("${v#env:}") v=${v#env:} ;;
	ktrace)
		lib=$(bash scripts/ktrace/build.sh "$WORK/ktrace" 2>>"$LOG") || { say "variant ktrace skipped: the library did not build"; continue; }
		envs=(CUDA_INJECTION64_PATH="$lib" TRENI_KTRACE_OUT="$RES/ktrace.txt") ;;
	*) say "unknown variant $v"; continue ;;
	esac
	say "serve $PRESET, variant $v: ${envs[*]} ${flags[*]}"
	start_server "$RES/serve-$v.log" "${envs[@]}" -- "${flags[@]}" || { say "variant $v skipped"; continue; }
	streams "-$v"
	bench "chunked-$v" --workload chunked_prefill --warmup-runs 0 --repeat-runs 1
	sleep 0.5 # the trace's last records reach the file
	stop_server
	SBIN=
	if [[ $v == ktrace ]]; then
		python3 scripts/ktrace/report.py "$RES/ktrace.txt" --per-kernel >"$RES/ktrace-report.txt" 2>&1
		say "ktrace: $(head -1 "$RES/ktrace-report.txt")"
		xz -f "$RES/ktrace.txt"
	fi
done
python3 scripts/serve_bench_table.py "$RES" | tee "$RES/serve-table.md"
