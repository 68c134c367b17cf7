#!/usr/bin/env bash
# h7's validation call (issue 44): the GEMM floor, the 64 streams' bound,
# the sweep's saturation, the staging-ring release order A/B, the peer's
# ggml build (packed into $OUT for the next call) and one peer measurement.
set -u
C=$(cd "$(dirname "$0")" && pwd)
cd "$C/src"
xz -dc "$C/treni-top-new.xz" >/tmp/tt && xz -dc "$C/treni-top-main.xz" >/tmp/tt-main && chmod +x /tmp/tt /tmp/tt-main
mkdir -p /tmp/tok && xz -dc "$C/tokenizer.json.xz" >/tmp/tok/tokenizer.json && cp "$C/tokenizer_config.json" /tmp/tok/
export OLLAMA=$C/ollama.xz SRC=$C/ggml-src.tgz PACK=$OUT
echo "cores $(nproc); $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader)"
# The ggml CUDA build in the background; gpu-peer.sh waits on its lock.
mkdir -p /tmp/treni-ollama
nice -n 10 env ROOT=/tmp/treni-ollama/dist WORK=/tmp/treni-ollama LOG=/tmp/treni-ollama/build.log bash scripts/gpu-ollama-build.sh >/tmp/build.out 2>&1 &
sleep 1
BIN=/tmp/tt TOK=/tmp/tok COMMIT=${COMMIT:-?} PARTS="serve" SERVE_PARTS="streams qps" SERVE_S=150 OUT=$OUT bash scripts/gpu-session.sh >/tmp/session1.txt 2>&1
grep -vE '^\| (process_start|runtime_init)' /tmp/session1.txt | tail -42
# The ring-release A/B: main's binary and this branch's, alternating.
m=/tmp/treni-cold-bench/qwen3-4b
ab() {
	cat $m/*.safetensors >/dev/null
	"$2" serve --model $m --device cuda --addr 127.0.0.1:18599 2>/tmp/ab-$1-$3.log &
	local p=$!
	for i in $(seq 300); do curl -fsS 127.0.0.1:18599/health >/dev/null 2>&1 && break; sleep 0.05; done
	for i in $(seq 200); do grep -q '"kind":"background"' /tmp/ab-$1-$3.log && break; sleep 0.1; done
	sleep 0.3
	python3 - "$1" "$3" "$p" /tmp/ab-$1-$3.log <<'PY'
import json, sys
name, rnd, pid, log = sys.argv[1:]
st = {l.split(":")[0]: int(l.split()[1]) / 1024 for l in open(f"/proc/{pid}/status") if l.startswith(("VmHWM", "VmRSS"))}
up = bg = t0 = None
for l in open(log):
    try:
        e = json.loads(l)
    except ValueError:
        continue
    if e.get("stage") == "process_start":
        t0 = e["start_ns"]
    if e.get("stage") == "decoder_tensor_upload":
        up = e
    if (e.get("attrs") or {}).get("kind") == "background":
        bg = e
print("%-5s round %s: VmHWM %5.0f MB, VmRSS %5.0f MB; upload %.1f GB/s %.0f ms; background ends %.0f ms after start, staging release %.1f ms, max item %.1f ms (%s)" % (
    name, rnd, st["VmHWM"], st["VmRSS"], up["attrs"]["gb_per_s"], (up["end_ns"] - up["start_ns"]) / 1e6,
    (bg["end_ns"] - t0) / 1e6, bg["attrs"].get("staging_release_ms", 0), bg["attrs"]["max_item_ms"], bg["attrs"]["max_item"]))
PY
	kill $p; wait $p 2>/dev/null
}
mkdir -p /tmp/o2/s
for r in 1 2 3; do ab main /tmp/tt-main $r; ab new /tmp/tt $r; done 2>&1 | tee /tmp/o2/ring-ab.txt
BIN=/tmp/tt TOK=/tmp/tok COMMIT=${COMMIT:-?} PARTS="peer" PEER_S=${PEER_S:-230} OUT=/tmp/o2 bash scripts/gpu-session.sh >/tmp/session2.txt 2>&1
tail -28 /tmp/session2.txt
cp /tmp/ab-*.log /tmp/o2/ring-ab.txt /tmp/build.out /tmp/session1.txt /tmp/session2.txt /tmp/o2/s/ 2>/dev/null
tar -C /tmp/o2 -czf "$OUT/session-peer.tgz" s
cp /tmp/o2/*-session.md "$OUT/session-peer.md" 2>/dev/null
cat /tmp/build.out
ls -la "$OUT"
