#!/usr/bin/env bash
# The built-in engine on the GPU, seen by treni-top itself (issues 5, 9, 10):
# synth Qwen3 checkpoints (0.6b and 4b, bf16), then for each
#   treni-top run --headless --json --device cuda --model DIR
# twice (the first run warms the page cache; the second is the one to read),
# which records NVML samples (GPU memory, utilisation, PCIe RX), the engine's
# stage lines and cold + warm requests. Prints each run's stage table and the
# unattributed share, and keeps the sessions.
# Usage on the GPU machine: BIN=.carry/treni-top OUT=/tmp/out bash scripts/gpu-engine-run.sh
set -uo pipefail
BIN=${BIN:-bin/treni-top}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-engine-run-${TOK:+realtok}}
PRESETS=${PRESETS:-"0.6b 4b"}
mkdir -p "$OUT/res" "$WORK"
export XDG_DATA_HOME=$WORK/data
for p in $PRESETS; do
	d=$WORK/qwen3-$p
	# TOK: a real tokenizer for the real-shape presets (e.g. Qwen3's own), so
	# that generated ids print as text and ITL can be timed from the stream.
	TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")
	[[ -f $d/config.json ]] || "$BIN" model synth --arch qwen3 --preset "$p" --out "$d" --seed 7 "${TOKARGS[@]}" >>"$OUT/res/log.txt" 2>&1
	for i in 1 2; do
		echo "=== $p run $i" | tee -a "$OUT/res/log.txt"
		"$BIN" run --headless --json --device cuda --model "$d" --warmup 2 --repeat 5 --max-tokens 48 \
			--record "$OUT/res/qwen3-$p-run$i.jsonl" >"$OUT/res/qwen3-$p-run$i.json" 2>>"$OUT/res/log.txt"
		echo "rc=$?" | tee -a "$OUT/res/log.txt"
	done
	"$BIN" report "$OUT/res/qwen3-$p-run2.jsonl" >"$OUT/res/qwen3-$p-report.md" 2>&1
done
python3 - "$OUT/res" $PRESETS <<'PY'
import json, sys, os
res, presets = sys.argv[1], sys.argv[2:]
for p in presets:
    path = os.path.join(res, f"qwen3-{p}-run2.jsonl")
    if not os.path.exists(path):
        print(p, "no session"); continue
    ev = [json.loads(l) for l in open(path)][1:]
    gpu = [e for e in ev if e["kind"] == "sample" and e["sample"]["source"].startswith("gpu")]
    mem = max((e["sample"]["values"].get("gpu_mem_used_bytes", 0) for e in gpu), default=0)
    rx = max((e["sample"]["values"].get("pcie_rx_bytes_per_s", 0) for e in gpu), default=0)
    r = json.load(open(os.path.join(res, f"qwen3-{p}-run2.json")))
    run = r["runs"][-1]
    q = run["requests"]
    print(f"--- qwen3-{p}: cold {run['cold_total_ms']:.0f} ms ({run['cold_end']}), unattributed {100*run['unattributed_share']:.1f}%, "
          f"NVML samples {len(gpu)}, GPU mem max {mem/2**30:.2f} GiB, PCIe RX max {rx/1e9:.1f} GB/s")
    for s in run["stages"]:
        print(f"    {s['name']:22s} start {s['start_ms']:8.1f}  dur {s['duration_ms']:8.1f} ms  {100*s['share']:5.1f}%  {json.dumps(s.get('attrs') or {})[:100]}")
    cold = q.get("cold") or {}
    print(f"    cold TTFT {cold.get('ttft_ms',0):.1f} ms; warm TTFT median {q['warm_ttft_ms']['median']:.2f} ms; warm ITL median {q['warm_itl_ms']['median']:.2f} ms p99 {q['warm_itl_ms']['p99']:.2f}; TPOT median {q['warm_tpot_ms']['median']:.2f}")
    print("    diagnosis:", r["diagnosis"]["summary"][:200])
PY
