#!/usr/bin/env bash
# Every serving workload against the built-in engine (CPU backend) and
# against Ollama v0.9.6 (CPU, built from source with SIMD by
# scripts/e2e-ollama.sh) on the same Qwen2-architecture synth checkpoint
# (preset demo by default), one server after the other in one run, for
# docs/BENCHMARKS.md (issue 8).
#
#   scripts/bench-cpu-peers.sh [--preset demo|tiny] [--workloads "baseline paged_attention"]
#                              [--servers "builtin ollama"] [--out DIR]
#
# --workloads takes built-in names and workload files (FILE.json, one spec,
# docs/BENCH_SCHEMA.md). The five workloads were written for a GPU; on 2
# cores Ollama cannot finish chunked_prefill or prefix_caching (48 requests
# each) inside the 10-minute request timeout, so docs/BENCHMARKS.md also
# runs both servers on scripts/workloads/*_16.json: the same specs with 16
# requests.
#
# TRENI_TOP=PATH uses a prebuilt treni-top. OLLAMA_BIN=PATH picks the Ollama build (default .peers/bin-simd/ollama);
# the "msg=system" line of its log, printed in the summary, says which CPU
# features its kernels were compiled with. BENCH_FLAGS adds flags to every
# `treni-top bench` (e.g. a documented reduction applied to both servers).
#
# Not in CI: it needs the Ollama peer. Writes JSON reports, sessions and
# server logs under .peers/bench-cpu/ (or --out).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS=$ROOT/.peers
PRESET=demo
WORKLOADS="baseline continuous_batching paged_attention chunked_prefill prefix_caching"
SERVERS="builtin ollama"
OUT=
OLLAMA_BIN=${OLLAMA_BIN:-$PEERS/bin-simd/ollama}
read -r -a EXTRA <<<"${BENCH_FLAGS:-}"
while [[ $# -gt 0 ]]; do
	case $1 in
	--preset) PRESET=$2; shift 2 ;;
	--workloads) WORKLOADS=$2; shift 2 ;;
	--servers) SERVERS=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
OUT=${OUT:-$PEERS/bench-cpu/$PRESET}
mkdir -p "$OUT"
if [[ " $SERVERS " == *" ollama "* && ! -x $OLLAMA_BIN ]]; then
	echo "no Ollama peer at $OLLAMA_BIN: build it first (make e2e-ollama) or set OLLAMA_BIN" >&2
	exit 2
fi
# TRENI_TOP=PATH uses a binary built beforehand (so that a rebuild of
# bin/treni-top in the same checkout cannot change it mid-run).
TT=${TRENI_TOP:-$ROOT/bin/treni-top}
[[ -n ${TRENI_TOP:-} ]] || go build -o "$TT" ./cmd/treni-top
CKPT=$PEERS/synth-qwen2-$PRESET
[[ -f $CKPT/config.json ]] || "$TT" model synth --arch qwen2 --preset "$PRESET" --out "$CKPT"

# Context for the longest workload (chunked_prefill: 2048 + 256 tokens).
CTX=4096
wait_up() { for _ in $(seq 1 600); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
bench_all() { # name url model endpoint
	for wl in $WORKLOADS; do
		# A built-in workload's name, or a workload file (one spec).
		local what=(--workload "$wl") name=$wl
		if [[ $wl == *.json ]]; then
			what=(--workload-file "$wl")
			name=$(basename "$wl" .json)
		fi
		echo "== $1 $name (load: $(cut -d' ' -f1-3 /proc/loadavg))"
		"$TT" bench --url "$2" --model "$3" --endpoint "$4" "${what[@]}" --ignore-eos --quiet \
			"${EXTRA[@]}" --record "$OUT/$1-$name.jsonl" --json >"$OUT/$1-$name.json"
		echo "   done (load: $(cut -d' ' -f1-3 /proc/loadavg))"
	done
}

PID=
trap '[[ -n $PID ]] && kill $PID 2>/dev/null || true' EXIT
if [[ " $SERVERS " == *" builtin "* ]]; then
	echo "== built-in engine on $CKPT"
	"$TT" serve --model "$CKPT" --addr 127.0.0.1:18123 --max-model-len $CTX --max-batch 16 2>"$OUT/builtin-serve.log" &
	PID=$!
	wait_up http://127.0.0.1:18123/health
	bench_all builtin http://127.0.0.1:18123 "$(basename "$CKPT")" completions
	kill "$PID"; wait "$PID" 2>/dev/null || true
	PID=
fi

if [[ " $SERVERS " == *" ollama "* ]]; then
	echo "== ollama ($OLLAMA_BIN) on the same checkpoint"
	export OLLAMA_MODELS=$PEERS/models OLLAMA_HOST=127.0.0.1:11500 OLLAMA_KEEP_ALIVE=30m
	export OLLAMA_CONTEXT_LENGTH=$CTX OLLAMA_NUM_PARALLEL=16
	"$OLLAMA_BIN" serve >"$OUT/ollama-serve.log" 2>&1 &
	PID=$!
	wait_up http://$OLLAMA_HOST/api/version
	MODEL=synth-qwen2-$PRESET
	if ! "$OLLAMA_BIN" list | grep -q "^$MODEL"; then
		printf 'FROM %s\n' "$CKPT" >"$OUT/Modelfile"
		"$OLLAMA_BIN" create "$MODEL" -f "$OUT/Modelfile"
	fi
	bench_all ollama "http://$OLLAMA_HOST" "$MODEL" completions
	kill "$PID"; wait "$PID" 2>/dev/null || true
	PID=
	# Which CPU features ggml was compiled with (logged when the model loads).
	grep -m1 'msg=system' "$OUT/ollama-serve.log" || echo "(no system line in $OUT/ollama-serve.log)"
fi
trap - EXIT

echo "== summary"
for srv in $SERVERS; do
	for wl in $WORKLOADS; do
		[[ $wl == *.json ]] && wl=$(basename "$wl" .json)
		echo "--- $srv $wl"
		"$TT" report "$OUT/$srv-$wl.jsonl" | sed -n '/## Load runs/,$p' | sed '/## Diagnosis/,$d'
	done
done
