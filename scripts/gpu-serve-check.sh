#!/usr/bin/env bash
# The built-in engine's server on the GPU under load (issues 9 and 10):
# `treni-top serve --device cuda` on a Qwen3-4B-shaped synth checkpoint, then
#   1. 64 concurrent streams, input 1024 / output 128 (treni-top bench), no
#      error allowed, KV blocks all free afterwards (/metrics);
#   2. 16 clients that hang up mid-stream (curl --max-time), then KV blocks
#      all free again: cancellation frees the blocks on the GPU backend too.
# Usage on the GPU machine: BIN=.carry/treni-top TOK=<tokenizer dir> OUT=/tmp/out bash scripts/gpu-serve-check.sh
set -uo pipefail
BIN=${BIN:-bin/treni-top}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-serve-check}
PRESET=${PRESET:-4b}
PORT=${PORT:-18555}
mkdir -p "$OUT/res" "$WORK"
export XDG_DATA_HOME=$WORK/data
d=$WORK/qwen3-$PRESET
# TOK also sizes the bench's prompts in the model's tokens (1,024 Qwen3
# tokens, not ~848 at 4 characters a token).
TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")
[[ -f $d/config.json ]] || "$BIN" model synth --arch qwen3 --preset "$PRESET" --out "$d" --seed 7 "${TOKARGS[@]}" >"$OUT/res/synth.log" 2>&1
"$BIN" serve --model "$d" --device "${DEVICE:-cuda}" --addr 127.0.0.1:$PORT --max-batch 64 2>"$OUT/res/serve.log" &
PID=$!
trap 'kill $PID 2>/dev/null' EXIT
for _ in $(seq 1 600); do curl -fsS http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.1; done
kv_used() { curl -fsS http://127.0.0.1:$PORT/metrics | awk '/^treni_kv_blocks_used/ {print $2}'; }
fails=0
echo "=== bench: 64 streams, 1024 in / 128 out"
"$BIN" bench --url http://127.0.0.1:$PORT --endpoint completions --num-requests ${NREQ:-64} --concurrency 64 \
	--prompt-tokens 1024 --max-tokens 128 --ignore-eos --quiet --warmup-runs ${WARMUP:-1} --repeat-runs ${REPEAT:-3} \
	"${TOKARGS[@]}" --record "$OUT/res/bench-64x1024.jsonl" --json >"$OUT/res/bench-64x1024.json" || fails=$((fails+1))
python3 - "$OUT/res/bench-64x1024.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for w in r.get("workloads", []):
    for run in w.get("runs", []):
        m = run.get("metrics", run)
        print(json.dumps({k: m.get(k) for k in ("output_tok_per_s", "failed", "tpot_ms", "ttft_ms", "itl_ms")})[:600])
PY
sleep 1
u=$(kv_used); echo "kv blocks used after the bench: $u"; [[ $u == 0 ]] || fails=$((fails+1))
echo "=== 16 clients hang up mid-stream"
body='{"model":"'"$(basename "$d")"'","prompt":"Tell me a very long story about the sea.","max_tokens":1000,"stream":true,"ignore_eos":true}'
for i in $(seq 1 16); do
	curl -sS -N --max-time 0.5 -H 'Content-Type: application/json' -d "$body" http://127.0.0.1:$PORT/v1/completions >/dev/null 2>&1 &
done
wait_curls() { for j in $(jobs -p); do [[ $j == "$PID" ]] || wait "$j" 2>/dev/null; done; }
wait_curls
sleep 1
u=$(kv_used); echo "kv blocks used after the hang-ups: $u"; [[ $u == 0 ]] || fails=$((fails+1))
c=$(curl -fsS http://127.0.0.1:$PORT/metrics | awk '/finished_reason="cancelled"/ {print $2}')
echo "requests cancelled by hang-ups: $c"; [[ ${c%.*} -ge 1 ]] || fails=$((fails+1))
curl -fsS http://127.0.0.1:$PORT/metrics | grep -E '^treni_(request_finished_total|kv_blocks_total|num_requests)' | head -10
echo "failures: $fails"
exit $fails
