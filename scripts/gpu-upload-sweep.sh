#!/usr/bin/env bash
# The staged upload's settings, compared on one GPU machine in one call:
# cold starts of the built-in engine (page cache warm), VARIANTS taken in
# turn ROUNDS times so that a drift of the host falls on all of them, one
# short request each (the first streamed token is what is timed). Prints,
# per variant, min / median / max of the upload's GB/s, the first token,
# and where the readers' time went (decoder_tensor_upload's attributes),
# beside the pinned H2D floor of doctor --floors from the same call.
#
# Usage on the GPU machine, with a treni-top built elsewhere:
#   BIN=.carry/treni-top TOK=.carry/qwen3-tok OUT=/tmp/out PRESET=4b \
#   VARIANTS="base= r8=TRENI_CUDA_UPLOAD_READERS=8 inplace2=TRENI_CUDA_UPLOAD_INPLACE=2" \
#     bash scripts/gpu-upload-sweep.sh
# Each variant is NAME=ASSIGNMENTS, the assignments comma-separated
# environment settings (none: the defaults).
set -uo pipefail
BIN=${BIN:-bin/treni-top}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/treni-cold-bench}
PRESET=${PRESET:-4b}
ROUNDS=${ROUNDS:-5}
VARIANTS=${VARIANTS:-"base= r8=TRENI_CUDA_UPLOAD_READERS=8"}
RES=$OUT/sweep-$PRESET
mkdir -p "$RES" "$WORK"
P52="Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones, naming the caches, allocations and compilations that are warm afterwards, and how to measure each one of them."
TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")
d=$WORK/qwen3-$PRESET
[[ -f $d/config.json ]] || "$BIN" model synth --arch qwen3 --preset "$PRESET" --out "$d" --seed 7 "${TOKARGS[@]}" >>"$RES/log.txt" 2>&1
"$BIN" doctor --floors --json >"$RES/floors.json" 2>>"$RES/log.txt"
cat "$d"/*.safetensors >/dev/null
one() { # stem [assignments]
	local stem=$1 envs=() a
	IFS=, read -ra envs <<<"${2:-}"
	(for a in "${envs[@]}"; do export "${a?}"; done
	"$BIN" run --headless --json --device cuda --model "$d" --warmup 0 --repeat 1 --max-tokens 8 \
		--prompt "$P52" --record "$RES/$stem.jsonl" >"$RES/$stem.json" 2>>"$RES/log.txt")
}
one first-contact # tokenizer cache, driver files: not counted
for r in $(seq 1 "$ROUNDS"); do
	for v in $VARIANTS; do one "${v%%=*}-$r" "${v#*=}"; done
done
python3 - "$RES" "$VARIANTS" <<'PY'
import glob, json, os, statistics, sys
res, variants = sys.argv[1], sys.argv[2].split()
fl = json.load(open(os.path.join(res, "floors.json")))
fl = fl.get("floors") or fl  # treni-top doctor --floors --json nests them
# the floor of the cold-start table (cold_bench_table.py): the faster of
# a pinned and a registered H2D copy
pinned = max(fl.get("pinned_h2d_gb_per_s") or 0, fl.get("registered_h2d_gb_per_s") or 0) or None
def mmm(xs, f="{:.1f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return " / ".join(f.format(x) for x in (min(xs), statistics.median(xs), max(xs)))
print("pinned H2D (doctor --floors, pinned or registered): %s GB/s" % (pinned and "%.1f" % pinned))
for r in fl.get("page_cache_read") or []:
    print("page cache → memory, %2d threads: %5.1f GB/s alone, %5.1f beside a pinned H2D copy (which then ran at %.1f)" % (
        r["threads"], r["gb_per_s"], r["beside_h2d_gb_per_s"], r["h2d_beside_reads_gb_per_s"]))
print("| variant | settings | upload GB/s | % of pinned (median) | first token ms | readers idle ms (sum) | copy loop fence wait ms | slot register ms |")
print("| --- | --- | --: | --: | --: | --: | --: | --: |")
for v in variants:
    name = v.split("=", 1)[0]
    rows = []
    for p in sorted(glob.glob(os.path.join(res, name + "-*.json"))):
        try:
            run = json.load(open(p))["runs"][-1]
        except (OSError, ValueError, KeyError, IndexError):
            continue
        up = next((s for s in run.get("stages", []) if s["name"] == "decoder_tensor_upload"), None)
        if up is None:
            continue
        a = up.get("attrs") or {}
        rows.append((a.get("gb_per_s"), run.get("cold_total_ms") if run.get("cold_end") == "first_token" else None,
                     a.get("read_idle_ms"), a.get("copy_loop_fence_wait_ms"), a.get("slot_register_ms")))
    if not rows:
        print("| %s | %s | no run | | | | | |" % (name, v.split("=", 1)[1] or "defaults"))
        continue
    col = lambda i: [r[i] for r in rows]
    g = [x for x in col(0) if x]
    share = "%.0f%%" % (100 * statistics.median(g) / pinned) if g and pinned else "—"
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (name, v.split("=", 1)[1] or "defaults", mmm(col(0)), share,
          mmm(col(1), "{:.0f}"), mmm(col(2), "{:.0f}"), mmm(col(3), "{:.0f}"), mmm(col(4))))
PY
