#!/usr/bin/env bash
# Every serving workload against the built-in engine (CPU backend) and
# against Ollama v0.9.6 (CPU, built from source by scripts/e2e-ollama.sh) on
# the same Qwen2-architecture synth checkpoint (preset demo by default), one
# after the other in one run, for docs/BENCHMARKS.md (issue 8).
#
#   scripts/bench-cpu-peers.sh [--preset demo|tiny] [--workloads "baseline paged_attention"]
#
# Not in CI: it needs the Ollama peer in .peers/bin. Writes JSON reports,
# sessions and server logs under .peers/bench-cpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS=$ROOT/.peers
PRESET=demo
WORKLOADS="baseline continuous_batching paged_attention chunked_prefill prefix_caching"
while [[ $# -gt 0 ]]; do
	case $1 in
	--preset) PRESET=$2; shift 2 ;;
	--workloads) WORKLOADS=$2; shift 2 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
OUT=$PEERS/bench-cpu/$PRESET
mkdir -p "$OUT"
[[ -x $PEERS/bin/ollama ]] || { echo "build the Ollama peer first: make e2e-ollama" >&2; exit 2; }
go build -o "$ROOT/bin/treni-top" ./cmd/treni-top
TT=$ROOT/bin/treni-top
CKPT=$PEERS/synth-qwen2-$PRESET
[[ -f $CKPT/config.json ]] || "$TT" model synth --arch qwen2 --preset "$PRESET" --out "$CKPT"

# Context for the longest workload (chunked_prefill: 2048 + 256 tokens).
CTX=4096
wait_up() { for _ in $(seq 1 600); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
bench_all() { # name url model endpoint
	for wl in $WORKLOADS; do
		echo "== $1 $wl (load: $(cut -d' ' -f1-3 /proc/loadavg))"
		"$TT" bench --url "$2" --model "$3" --endpoint "$4" --workload "$wl" --ignore-eos --quiet \
			--record "$OUT/$1-$wl.jsonl" --json >"$OUT/$1-$wl.json"
	done
}

echo "== built-in engine on $CKPT"
"$TT" serve --model "$CKPT" --addr 127.0.0.1:18123 --max-model-len $CTX --max-batch 16 2>"$OUT/builtin-serve.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
wait_up http://127.0.0.1:18123/health
bench_all builtin http://127.0.0.1:18123 "$(basename "$CKPT")" completions
kill "$PID"; wait "$PID" 2>/dev/null || true

echo "== ollama on the same checkpoint"
export OLLAMA_MODELS=$PEERS/models OLLAMA_HOST=127.0.0.1:11500 OLLAMA_KEEP_ALIVE=30m
export OLLAMA_CONTEXT_LENGTH=$CTX OLLAMA_NUM_PARALLEL=16
"$PEERS/bin/ollama" serve >"$OUT/ollama-serve.log" 2>&1 &
PID=$!
wait_up http://$OLLAMA_HOST/api/version
MODEL=synth-qwen2-$PRESET
if ! "$PEERS/bin/ollama" list | grep -q "^$MODEL"; then
	printf 'FROM %s\n' "$CKPT" >"$OUT/Modelfile"
	"$PEERS/bin/ollama" create "$MODEL" -f "$OUT/Modelfile"
fi
bench_all ollama "http://$OLLAMA_HOST" "$MODEL" completions
kill "$PID"; wait "$PID" 2>/dev/null || true
trap - EXIT

echo "== summary"
for srv in builtin ollama; do
	for wl in $WORKLOADS; do
		echo "--- $srv $wl"
		"$TT" report "$OUT/$srv-$wl.jsonl" | sed -n '/## Load runs/,$p' | sed '/## Diagnosis/,$d'
	done
done
