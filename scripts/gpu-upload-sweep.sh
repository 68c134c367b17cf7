#!/usr/bin/env bash
# The staged upload's settings, compared on one GPU machine in one call:
# cold starts of the built-in engine (page cache warm), VARIANTS taken in
# turn ROUNDS times so that a drift of the host falls on all of them, one
# short request each (the first streamed token is what is timed), each
# round starting one variant further on. Prints, per variant, min /
# median / max of the upload's GB/s, the first token, its difference from
# the first variant's in the same round,
# and where the readers' time went (decoder_tensor_upload's attributes),
# beside the pinned H2D floor of doctor --floors from the same call.
#
# COLD=1 evicts the weights before every start instead (--evict-page-cache)
# and brackets each round with a disk read of the weights as the cold
# bench's floor reads them (scripts/disk-probe.py ranges:8:8, plus the
# PROBE modes, e.g. PROBE="queue:8:16 queue:14:16"): the lent machines'
# virtual disks drifted from 1.89 to 1.35 GB/s within one minute, so each
# cold start is set against the mean of the two reads around its round.
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
COLD=${COLD:-0}
PROBE=${PROBE:-}
HERE=$(cd "$(dirname "$0")" && pwd)
VARIANTS=${VARIANTS:-"base= r8=TRENI_CUDA_UPLOAD_READERS=8"}
RES=$OUT/sweep-$PRESET
mkdir -p "$RES" "$WORK"
P52="Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones, naming the caches, allocations and compilations that are warm afterwards, and how to measure each one of them."
TOKARGS=(); [[ -n ${TOK:-} ]] && TOKARGS=(--tokenizer "$TOK")
d=$WORK/qwen3-$PRESET
[[ -f $d/config.json ]] || "$BIN" model synth --arch qwen3 --preset "$PRESET" --out "$d" --seed 7 "${TOKARGS[@]}" >>"$RES/log.txt" 2>&1
"$BIN" doctor --floors --json >"$RES/floors.json" 2>>"$RES/log.txt"
EVICT=()
if [[ $COLD == 1 ]]; then EVICT=(--evict-page-cache); else cat "$d"/*.safetensors >/dev/null; fi
disk() { # round: the disk floor (and PROBE's modes) with the page cache cold
	[[ $COLD == 1 ]] || return 0
	# shellcheck disable=SC2086 # PROBE is a list of modes
	python3 "$HERE/disk-probe.py" "$d" ranges:8:8 $PROBE >"$RES/disk-$1.txt" 2>>"$RES/log.txt"
}
one() { # stem [assignments]
	local stem=$1 envs=() a
	IFS=, read -ra envs <<<"${2:-}"
	(for a in "${envs[@]}"; do export "${a?}"; done
	"$BIN" run --headless --json --device cuda --model "$d" --warmup 0 --repeat 1 --max-tokens 8 "${EVICT[@]}" \
		--prompt "$P52" --record "$RES/$stem.jsonl" >"$RES/$stem.json" 2>>"$RES/log.txt")
}
one first-contact # tokenizer cache, driver files: not counted
read -ra vs <<<"$VARIANTS"
for r in $(seq 1 "$ROUNDS"); do
	disk "$r"
	# Each round starts one variant further on, so that no variant always
	# follows the disk read or the same neighbour.
	for i in $(seq 0 $((${#vs[@]} - 1))); do
		v=${vs[$(((i + r - 1) % ${#vs[@]}))]}
		one "${v%%=*}-$r" "${v#*=}"
	done
done
disk $((ROUNDS + 1))
python3 - "$RES" "$VARIANTS" "$COLD" "$HERE" <<'PY'
import glob, json, os, statistics, sys
res, variants, cold = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1"
sys.path.insert(0, sys.argv[4])
# The cold bench's readers of treni-top run reports and disk-probe.py output.
from cold_bench_table import disk_read_ms, engine_run, probe_runs, stage
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
def round_of(path):
    """The round a result file belongs to (NAME-ROUND.json, disk-ROUND.txt)."""
    return int(path.rsplit("-", 1)[1].split(".")[0])
def disk_ms(r):
    """Reading the weights at the floor (ranges:8:8), the mean of the reads before and after round r (ms)."""
    ts = [t for t in (disk_read_ms(os.path.join(res, "disk-%d.txt" % k)) for k in (r, r + 1)) if t]
    return statistics.mean(ts) if ts else None
if cold:
    modes = {}
    for p in sorted(glob.glob(os.path.join(res, "disk-*.txt"))):
        for x in probe_runs(p):
            key = "%s:%d:%d%s" % (x["mode"], x["threads"], x["chunk_mib"], ":%d" % x["ahead"] if x["ahead"] else "")
            modes.setdefault(key, []).append(None if x["errors"] else x["gb_per_s"])
    for k, xs in modes.items():
        print("disk read, page cache cold, %s: %s GB/s (%d reads)" % (k, mmm(xs, "{:.2f}"), len(xs)))
def first_ms(name, r):
    """Variant name's first token in round r (ms), or None."""
    e = engine_run(res, "%s-%d" % (name, r))
    return e and e["first_token_ms"]
base = variants[0].split("=", 1)[0]
def sooner(ds):
    """How many rounds a variant's first token came before the base's."""
    ds = [d for d in ds if d is not None]
    return "; sooner in %d of %d" % (sum(d < 0 for d in ds), len(ds)) if ds else ""
print("| variant | settings | upload GB/s | %% of pinned (median) | first token ms | − %s's, same round (ms) | %sreaders idle ms (sum) | copy loop fence wait ms | slot register ms |" % (base, "÷ disk read (bracketing rounds) | " if cold else ""))
print("| --- | --- | --: | --: | --: | --: | %s--: | --: | --: |" % ("--: | " if cold else ""))
for v in variants:
    name = v.split("=", 1)[0]
    rows = []
    for p in sorted(glob.glob(os.path.join(res, name + "-*.json"))):
        e = engine_run(res, os.path.basename(p)[:-len(".json")])
        up = e and stage(e, "decoder_tensor_upload")
        if not up:
            continue
        a = up.get("attrs") or {}
        first = e["first_token_ms"]
        rnd = round_of(p)
        dm = disk_ms(rnd) if cold else None
        b0 = first_ms(base, rnd)
        rows.append((a.get("gb_per_s"), first, a.get("read_idle_ms"), a.get("copy_loop_fence_wait_ms"), a.get("slot_register_ms"),
                     first / dm if first and dm else None, first - b0 if first is not None and b0 is not None else None))
    if not rows:
        print("| %s | %s | no run |%s" % (name, v.split("=", 1)[1] or "defaults", " |" * (7 if cold else 6)))
        continue
    col = lambda i: [r[i] for r in rows]
    g = [x for x in col(0) if x]
    share = "%.0f%%" % (100 * statistics.median(g) / pinned) if g and pinned else "—"
    print("| %s | %s | %s | %s | %s | %s | %s%s | %s | %s |" % (name, v.split("=", 1)[1] or "defaults", mmm(col(0), "{:.2f}" if cold else "{:.1f}"), share,
          mmm(col(1), "{:.0f}"), mmm(col(6), "{:+.0f}") + sooner(col(6)), mmm(col(5), "{:.2f}") + " | " if cold else "", mmm(col(2), "{:.0f}"), mmm(col(3), "{:.0f}"), mmm(col(4))))
PY
