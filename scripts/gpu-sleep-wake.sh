#!/usr/bin/env bash
# gpu-sleep-wake.sh: issue 43's check and measurement of the built-in
# engine's sleep mode on a GPU machine, in one call, building nothing:
#   1. the sleep/wake GPU test of engine/cuda (TestGPUSleepWake: the tiny
#      shape, then the demo shape), and compute-sanitizer (memcheck) over
#      the tiny one;
#   2. a 4B-shaped bf16 synth checkpoint (qwen3 preset 4b, the real Qwen3
#      tokenizer given as TOK);
#   3. the floors: treni-top doctor --floors --json (pinned H2D and D2H);
#   4. scripts/sleep_wake_bench.py on it: cold starts, level-1 and level-2
#      sleeps and wakes (ROUNDS each), CYCLES level-1 cycles; its table is
#      printed last.
# Usage, from the repository root on the GPU machine, with the binaries
# built elsewhere (the test binary runs in engine/cuda, where its fixtures
# are):
#   BIN=.carry/treni-top TESTBIN=.carry/cuda.test TOK=.carry/qwen3-tok \
#     OUT=/tmp/out bash scripts/gpu-sleep-wake.sh
# BIN may be gzip-compressed (a name ending in .gz). ROUNDS (5), CYCLES
# (100) and SANITIZE (1) may be set. OUT receives log.txt, table.md,
# results.json, floors.json and all.tgz (every log, the servers' stderr).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$PWD
DEST=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-sleep-wake}
OUT=$WORK/res # everything; DEST gets the few files a lent machine sends back
BIN=${BIN:-bin/treni-top}
TESTBIN=${TESTBIN:-.carry/cuda.test}
mkdir -p "$OUT" "$DEST"
LOG=$OUT/log.txt
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
abs() { case $1 in /*) echo "$1" ;; *) echo "$SRC/$1" ;; esac; }
BIN=$(abs "$BIN")
TESTBIN=$(abs "$TESTBIN")
if [[ $BIN == *.gz ]]; then
	gunzip -c "$BIN" >"$WORK/treni-top" && chmod +x "$WORK/treni-top" && BIN=$WORK/treni-top
fi
export XDG_DATA_HOME=$WORK/data PYTHONUNBUFFERED=1

say "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

say "GPU test: TestGPUSleepWake (tiny, then demo)"
(cd "$SRC/engine/cuda" && timeout 120 "$TESTBIN" -test.v -test.count=1 -test.run 'TestGPUSleepWake' >"$OUT/gpu-test-tiny.log" 2>&1)
tiny_rc=$?
(cd "$SRC/engine/cuda" && TRENI_CUDA_BIG=1 timeout 150 "$TESTBIN" -test.v -test.count=1 -test.run 'TestGPUSleepWake' >"$OUT/gpu-test-demo.log" 2>&1)
demo_rc=$?
say "gpu tests: tiny rc=$tiny_rc, demo rc=$demo_rc"
grep -E "^(--- |ok|FAIL|PASS)|SLEEP .*cycle [0-9]+ level|device free" "$OUT"/gpu-test-*.log | sed -E 's/^ +//' | tee -a "$LOG"
san="skipped"
if [[ ${SANITIZE:-1} == 1 ]] && command -v /usr/local/cuda/bin/compute-sanitizer >/dev/null; then
	say "compute-sanitizer memcheck over TestGPUSleepWake (tiny, a cycle of each level)"
	(cd "$SRC/engine/cuda" && TRENI_CUDA_SLEEP_CYCLES=2 timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 20 \
		"$TESTBIN" -test.count=1 -test.run 'TestGPUSleepWake' >"$OUT/sanitizer.log" 2>&1)
	src=$?
	san=$(grep -E "ERROR SUMMARY" "$OUT/sanitizer.log" | tail -n 1)
	[[ -n $san ]] || san="no summary (rc=$src)"
	say "sanitizer: $san"
fi

d=$WORK/qwen3-4b
if [[ ! -f $d/config.json ]]; then
	say "synth 4b"
	TOKARGS=()
	[[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$(abs "$TOK")")
	"$BIN" model synth --arch qwen3 --preset 4b --out "$d" --seed 7 "${TOKARGS[@]}" >>"$LOG" 2>&1 || { say "synth failed"; exit 1; }
fi
cat "$d"/*.safetensors >/dev/null # page cache warm

say "floors"
"$BIN" doctor --floors --json >"$OUT/floors.json" 2>>"$LOG" || say "floors failed"
python3 - "$OUT/floors.json" <<'PY' | tee -a "$LOG"
import json, sys
f = json.load(open(sys.argv[1])).get("floors") or {}
print("floors: cuInit %.1f ms, pinned H2D %.1f GB/s, pinned D2H %.1f GB/s, cuMemHostAlloc of %.2f GiB %.1f ms" % (
    f.get("cu_init_ms", 0), f.get("pinned_h2d_gb_per_s", 0), f.get("pinned_d2h_gb_per_s", 0), f.get("bytes", 0) / 2**30, f.get("host_alloc_ms", 0)))
PY

say "sleep/wake bench (ROUNDS=${ROUNDS:-5}, CYCLES=${CYCLES:-100})"
timeout 300 python3 "$HERE/sleep_wake_bench.py" "$BIN" "$d" "$OUT" "$OUT/floors.json" >"$OUT/table.md" 2>>"$LOG"
bench_rc=$?
say "bench rc=$bench_rc"

echo
echo "================ summary ================"
echo "GPU test TestGPUSleepWake: tiny rc=$tiny_rc, demo rc=$demo_rc; compute-sanitizer: $san"
grep -hE "SLEEP qwen3-(tiny|demo) level .* (weights_restore|sleep) " "$OUT"/gpu-test-*.log | sed -E 's/^ +//; s/^[a-z_]+\.go:[0-9]+: //' | cut -c1-400 | head -n 8
tail -n 3 "$LOG"
cat "$OUT/table.md"

cp "$LOG" "$OUT/table.md" "$OUT/floors.json" "$DEST/" 2>/dev/null
cp "$OUT/results.json" "$DEST/" 2>/dev/null
tar -czf "$DEST/all.tgz" -C "$OUT" . 2>/dev/null
