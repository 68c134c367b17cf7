#!/usr/bin/env bash
# Issue 10's benchmark, in one run on the GPU machine:
#   1. synth Qwen3-architecture checkpoints (0.6b, 4b; bf16; the real Qwen3
#      tokenizer given as TOK so streamed text and prompt lengths are real);
#   2. the floors: treni-top doctor --floors (cuInit, context, pageable /
#      pinned / registered H2D, device copy) and the disk read bandwidth with
#      the page cache cold (one stream and eight);
#   3. the built-in engine, page cache warm, RUNS cold starts per shape
#      (treni-top run --headless --json: process start → healthy → first
#      streamed token, stage table, warm TTFT on a 52-token prompt, batch-1
#      ITL, RSS), plus one run through the mapped upload path for the ratio,
#      and RUNS more per ENGINE_VARIANTS entry (environment settings);
#   4. HF transformers, a fresh process per cold run (scripts/hf_peer.py),
#      RUNS per shape, with warm generations in the last;
#   5. page cache cold (4b): the engine with --evict-page-cache and HF after
#      the same eviction;
#   6. 64 concurrent streams, input 1024 / output 128 (scripts/gpu-serve-check.sh);
#   7. the table (scripts/cold_bench_table.py), printed last.
# Usage on the GPU machine, with a treni-top built elsewhere:
#   BIN=.carry/treni-top TOK=.carry/qwen3-tok OUT=/tmp/out bash scripts/gpu-cold-bench.sh
set -uo pipefail
BIN=${BIN:-bin/treni-top}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-cold-bench}
RUNS=${RUNS:-3}
PRESETS=${PRESETS:-"0.6b 4b"}
HF=${HF:-1}
mkdir -p "$OUT/res" "$WORK"
RES=$OUT/res
LOG=$RES/log.txt
export XDG_DATA_HOME=$WORK/data PYTHONUNBUFFERED=1
P52="Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones, naming the caches, allocations and compilations that are warm afterwards, and how to measure each one of them."
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
warm_cache() { cat "$1"/*.safetensors >/dev/null; }
TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")

for p in $PRESETS; do
	d=$WORK/qwen3-$p
	[[ -f $d/config.json ]] || { say "synth $p"; "$BIN" model synth --arch qwen3 --preset "$p" --out "$d" --seed 7 "${TOKARGS[@]}" >>"$LOG" 2>&1; }
done

say "floors"
"$BIN" doctor --floors --json >"$RES/floors.json" 2>>"$LOG"
last=$(echo $PRESETS | awk '{print $NF}')
# The disk floor: one stream a file, then eight (cold_bench_table.py).
python3 scripts/disk-probe.py "$WORK/qwen3-$last" ranges:1:8 ranges:8:8 >"$RES/disk-floor.txt" 2>>"$LOG"
head -n 2 "$RES/disk-floor.txt"

engine() { # preset stem [extra run flags...]
	local p=$1 stem=$2; shift 2
	"$BIN" run --headless --json --device "${DEVICE:-cuda}" --model "$WORK/qwen3-$p" --warmup 2 --repeat 5 --max-tokens 48 \
		--prompt "$P52" --record "$RES/$stem.jsonl" "$@" >"$RES/$stem.json" 2>>"$LOG"
	say "engine $stem rc=$?"
}
for p in $PRESETS; do
	warm_cache "$WORK/qwen3-$p"
	engine "$p" "engine-$p-0" # first contact: tokenizer cache, driver files; not reported
	for i in $(seq 1 "$RUNS"); do engine "$p" "engine-$p-$i"; done
	TRENI_CUDA_UPLOAD=mapped engine "$p" "engine-$p-mapped"
	# ENGINE_VARIANTS: space-separated variants, each a comma-separated
	# list of environment assignments (TRENI_CUDA_GEMM=cublaslt,
	# TRENI_CUDA_PREREAD_MB=0,...), RUNS cold starts each, for the
	# variant table beside the default runs of the same call.
	k=0
	for v in ${ENGINE_VARIANTS:-}; do
		k=$((k + 1))
		echo "$v" >"$RES/variant-$k.txt"
		IFS=, read -ra envs <<<"$v"
		for i in $(seq 1 "$RUNS"); do (for a in "${envs[@]}"; do export "${a?}"; done; engine "$p" "engine-$p-var$k-$i"); done
	done
done

# Where the engine's resident memory goes after load and warm-up: serve
# the largest checkpoint, wait for /health and then for the background
# warm-up's stage line (at most 20 s), read /proc/PID/status and the RSS
# of each mapping (smaps), stop it; then the resident memory each stage
# ended with (rss_mb, rss_anon_mb, rss_file_mb), in the order they ended.
say "rss breakdown ($last)"
"$BIN" serve --model "$WORK/qwen3-$last" --device cuda --addr 127.0.0.1:18566 2>"$RES/rss-serve.log" &
SPID=$!
for _ in $(seq 1 300); do curl -fsS http://127.0.0.1:18566/health >/dev/null 2>&1 && break; sleep 0.05; done
for _ in $(seq 1 200); do grep -q '"kind":"background"' "$RES/rss-serve.log" && break; sleep 0.1; done
python3 - "$SPID" >"$RES/rss.txt" 2>&1 <<'PY'
import collections, sys
pid = sys.argv[1]
for l in open(f"/proc/{pid}/status"):
    if l.startswith(("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")):
        print(l.rstrip())
by = collections.Counter()
name = None
for l in open(f"/proc/{pid}/smaps"):
    f = l.split()
    if len(f) >= 5 and "-" in f[0] and ":" not in f[0]:
        name = f[5] if len(f) >= 6 else "[anon]"
    elif f and f[0] == "Rss:":
        by[name] += int(f[1])
for n, kb in by.most_common(12):
    print("%8.1f MB  %s" % (kb / 1024, n))
PY
kill $SPID; wait $SPID 2>/dev/null
python3 - "$RES/rss-serve.log" >>"$RES/rss.txt" 2>&1 <<'PY'
import json, sys
print("resident memory at each stage's end (MB: total / anonymous / file)")
for l in open(sys.argv[1]):
    try:
        e = json.loads(l)
    except ValueError:
        continue
    a = e.get("attrs") or {}
    if "rss_mb" in a:
        name = e.get("stage", "?") + (" (" + a["kind"] + ")" if "kind" in a else "")
        print("  %-34s %7.1f / %7.1f / %7.1f" % (name, a["rss_mb"], a.get("rss_anon_mb", 0), a.get("rss_file_mb", 0)))
PY
cat "$RES/rss.txt" | tee -a "$LOG"

hf() { # preset stem [extra flags...]
	local p=$1 stem=$2; shift 2
	HF_T0=$(date +%s.%N) python3 scripts/hf_peer.py "$WORK/qwen3-$p" --prompt "$P52" --max-new-tokens 48 "$@" \
		>"$RES/$stem.json" 2>>"$LOG"
	say "hf $stem rc=$?"
}
if [[ $HF == 1 ]]; then
	for p in $PRESETS; do
		warm_cache "$WORK/qwen3-$p"
		for i in $(seq 1 "$RUNS"); do
			w=0; [[ $i == "$RUNS" ]] && w=3
			hf "$p" "hf-$p-$i" --warm $w
		done
	done
fi

say "page cache cold ($last)"
# The lent machines' virtual disks drift (1.89 → 1.35 GB/s within a
# minute), so the cold start is also set against disk reads taken just
# before and after it.
python3 scripts/disk-probe.py "$WORK/qwen3-$last" ranges:8:8 >"$RES/disk-before-evicted.txt" 2>>"$LOG"
engine "$last" "engine-$last-evicted" --evict-page-cache
python3 scripts/disk-probe.py "$WORK/qwen3-$last" ranges:8:8 >"$RES/disk-after-evicted.txt" 2>>"$LOG"
[[ $HF == 1 ]] && hf "$last" "hf-$last-evicted" --evict

if [[ ${SERVE64:-1} == 1 ]]; then
	say "64 streams"
	WORK=$WORK BIN=$BIN TOK=${TOK:-} OUT=$OUT/serve64 WARMUP=0 REPEAT=1 PRESET=$last bash scripts/gpu-serve-check.sh >"$RES/serve64.txt" 2>&1
	cp "$OUT/serve64/res/bench-64x1024.json" "$RES/" 2>/dev/null
	tail -n 5 "$RES/serve64.txt"
fi

for p in $PRESETS; do "$BIN" report "$RES/engine-$p-2.jsonl" >"$RES/engine-$p-report.md" 2>&1; done
python3 scripts/cold_bench_table.py "$RES" | tee "$RES/table.md"
tar -C "$OUT" -czf "$OUT/results.tar.gz" res
