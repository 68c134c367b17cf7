#!/usr/bin/env bash
# diff's calibration (issue 40 item 6; docs/DIFF.md, docs/BENCHMARKS.md "diff
# calibration"): how often `treni-top diff` calls a regression between two
# sides recorded with identical settings (A/A), and how often it finds a
# known slowdown induced through a real engine knob (A/B), at 5 cold runs per
# side and at 1 (the first run of each session), idle and beside two CPU
# hogs. The built-in engine on its demo checkpoint, launched as `-- treni-top
# serve --demo` on both sides so that the knob is the only difference:
# A_FLAGS and B_FLAGS (default --kv-touch-gib 0.1 and 0.2: allocate and touch
# that much memory during kv_alloc). Both sides touch some: the first 0.1 GiB
# also pre-faults the pages the cold request would fault in, so that against
# no touching at all it moves time from first_request to kv_alloc instead of
# adding it; the second 0.1 GiB only adds (about +20% on the cold first
# token on the 2-core development machine).
#
#   scripts/diff-calibration.sh [PAIRS] [OUT]     (default 20 pairs, a new temporary directory)
#
# Each pair records three sides, A1, A2 and B. ORDER=sequential (the
# default) records each side as one session of RUNS cold runs, in that
# order (base, then change, as `run --cold-runs 5` on each does);
# ORDER=interleaved records RUNS sessions of one cold run per side,
# alternating A1, A2, B, so that a load that drifts over the minutes falls on
# all three alike. A/A is diff A1 --against A2, A/B is diff A2 --against B;
# the 1-run diffs take each side's first run. The induced change is the
# Hodges–Lehmann shift of the cold first token of every B run against every
# A2 run of the condition, pooled over the pairs; "CI covers" counts the A/B
# pairs whose interval contains it.
#
# REDIFF=1 records nothing: it judges the sessions already in OUT again
# (after a change of diff's rules) and prints the tables.
#
# Environment: A_FLAGS, B_FLAGS (serve flags of each side), ORDER, RUNS per
# side (5), REPEAT warm requests per run (3), CONDITIONS ("idle hogs"),
# REDIFF, TRENI_TOP (default: built
# from this checkout). "idle" means no hogs of ours: the machine may be
# shared. The demo checkpoint is created under OUT/cache, private to the
# calibration.
set -euo pipefail
pairs=${1:-20}
out=${2:-$(mktemp -d)}
read -r -a a_flags <<<"${A_FLAGS---kv-touch-gib 0.1}"
read -r -a b_flags <<<"${B_FLAGS---kv-touch-gib 0.2}"
runs=${RUNS:-5}
order=${ORDER:-sequential}
[[ $order == sequential || $order == interleaved ]] || { echo "ORDER is sequential or interleaved" >&2; exit 2; }
repeat=${REPEAT:-3}
conditions=${CONDITIONS:-idle hogs}
cd "$(dirname "$0")/.."
mkdir -p "$out"
# A demo checkpoint of our own: another treni-top on this machine that maps
# or evicts the shared one would move our page_cache stage.
export XDG_CACHE_HOME=$out/cache
bin=${TRENI_TOP:-}
if [[ -z $bin ]]; then
	bin=$out/treni-top
	go build -o "$bin" ./cmd/treni-top
fi
hogs=()
stop_hogs() {
	for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
	hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM

record() { # FILE COLD_RUNS SIDE: one session of that side's settings
	local file=$1 n=$2 flags=("${a_flags[@]}")
	[[ $3 == b ]] && flags=("${b_flags[@]}")
	"$bin" run --headless --cold-runs "$n" --repeat "$repeat" --warmup 1 --max-tokens 8 --record "$file" \
		-- "$bin" serve --demo --addr 127.0.0.1:0 "${flags[@]}" >"$file.log" 2>&1
}

# first_run FILE OUT: the header and run 0's events (the 1-run sample).
first_run() {
	python3 -c '
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as o:
    o.write(f.readline())
    for line in f:
        if json.loads(line).get("run", 0) == 0:
            o.write(line)
' "$1" "$2"
}

# record_pair DIR I: the three sides of pair I; false if a run failed.
record_pair() {
	local dir=$1 i=$2 side r
	if [[ $order == sequential ]]; then
		for side in a1 a2 b; do
			record "$dir/$i-$side.jsonl" "$runs" "$side" || return 1
			first_run "$dir/$i-$side.jsonl" "$dir/$i-$side.n1"
		done
		return 0
	fi
	for ((r = 1; r <= runs; r++)); do
		for side in a1 a2 b; do
			record "$dir/$i-$side-r$r.jsonl" 1 "$side" || return 1
		done
	done
	for side in a1 a2 b; do cp "$dir/$i-$side-r1.jsonl" "$dir/$i-$side.n1"; done
}

# side_files DIR PAIR SIDE: the session files of one side ("*" for every pair).
side_files() {
	local f
	shopt -s nullglob
	if [[ $order == sequential ]]; then f=("$1"/$2-$3.jsonl); else f=("$1"/$2-$3-r*.jsonl); fi
	shopt -u nullglob
	printf '%s\n' "${f[@]}"
}

for cond in $conditions; do
	dir=$out/$cond
	mkdir -p "$dir"
	if [[ $cond == hogs && -z ${REDIFF:-} ]]; then
		yes >/dev/null &
		hogs+=($!)
		yes >/dev/null &
		hogs+=($!)
	fi
	for ((i = 1; i <= pairs; i++)); do
		if [[ -n ${REDIFF:-} ]]; then
			[[ -e $dir/$i-b.n1 ]] || continue
		elif ! record_pair "$dir" "$i"; then
			echo "$cond pair $i: a recording failed (logs in $dir/$i-*.log); this pair is left out" >&2
			mkdir -p "$dir/failed"
			mv "$dir/$i-"* "$dir/failed/" 2>/dev/null || true
			continue
		fi
		for set in aa ab; do
			if [[ $set == aa ]]; then l=a1 r=a2; else l=a2 r=b; fi
			mapfile -t left < <(side_files "$dir" "$i" $l)
			mapfile -t right < <(side_files "$dir" "$i" $r)
			"$bin" diff "${left[@]}" --against "${right[@]}" --json >"$dir/$i-$set-n$runs.json" || true
			"$bin" diff "$dir/$i-$l.n1" --against "$dir/$i-$r.n1" --json >"$dir/$i-$set-n1.json" || true
		done
		echo "$cond pair $i of $pairs done" >&2
	done
	stop_hogs
	# The induced change, pooled over the condition's pairs.
	mapfile -t a1 < <(side_files "$dir" "*" a1)
	mapfile -t a2 < <(side_files "$dir" "*" a2)
	mapfile -t b < <(side_files "$dir" "*" b)
	if ((${#a2[@]} > 0)); then
		"$bin" diff "${a2[@]}" --against "${b[@]}" --json >"$dir/pooled-ab.json" || true
		"$bin" diff "${a1[@]}" --against "${a2[@]}" --json >"$dir/pooled-aa.json" || true
	fi
done

python3 - "$out" "$runs" "$order" $conditions <<'EOF'
import glob, json, os, statistics, sys

out, runs, order, conds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
HEAD = "cold_total/first_token"

def row(d, metric):
    for r in d.get("rows", []):
        if r["metric"] == metric:
            return r
    return None

print("| order | condition | runs per side | set | pairs | REGRESSION | OK | ~ (too few) | cold first token: detected | CI covers the induced change | median shift (ms) | median CI width (ms) |")
print("|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
for cond in conds:
    d = os.path.join(out, cond)
    pooled = {}
    for s in ("aa", "ab"):
        p = os.path.join(d, f"pooled-{s}.json")
        if os.path.exists(p) and os.path.getsize(p) > 0:
            pooled[s] = row(json.load(open(p)), HEAD)
    induced = pooled.get("ab", {}) or {}
    for n in (runs, "1"):
        for s in ("aa", "ab"):
            files = sorted(glob.glob(os.path.join(d, f"*-{s}-n{n}.json")))
            res = [json.load(open(f)) for f in files if os.path.getsize(f) > 0]
            reg = sum(r["verdict"] == "REGRESSION" for r in res)
            ok = sum(r["verdict"] == "OK" for r in res)
            few = sum(r["verdict"] == "~" for r in res)
            heads = [row(r, HEAD) for r in res]
            heads = [h for h in heads if h]
            det = sum(h["verdict"] == "REGRESSION" for h in heads)
            cov, widths = "—", []
            if s == "ab" and induced:
                with_ci = [h for h in heads if h["ci_level"] > 0]
                if with_ci:
                    c = sum(h["ci_low_ms"] <= induced["shift_ms"] <= h["ci_high_ms"] for h in with_ci)
                    cov = f"{c}/{len(with_ci)}"
            widths = [h["ci_high_ms"] - h["ci_low_ms"] for h in heads if h["ci_level"] > 0]
            shift = statistics.median([h["shift_ms"] for h in heads]) if heads else 0
            width = f"{statistics.median(widths):.0f}" if widths else "—"
            detected = f"{det}/{len(heads)}" if s == "ab" else "—"
            print(f"| {order} | {cond} | {n} | {s.upper().replace('AA','A/A').replace('AB','A/B')} | {len(res)} | {reg} | {ok} | {few} | {detected} | {cov} | {shift:+.0f} | {width} |")
    for s, label in (("aa", "A/A"), ("ab", "A/B")):
        h = pooled.get(s)
        if h:
            ci = f" [{h['ci_low_ms']:+.0f}, {h['ci_high_ms']:+.0f}]" if h["ci_level"] > 0 else ""
            print(f"\n{cond} pooled {label}: cold first token base {h['base']['median']:.0f} ms median of {h['base_runs']} runs, "
                  f"shift {h['shift_ms']:+.0f} ms{ci} ({100*h['change']:+.1f}%)")

# The noise bound (docs/DIFF.md; sessions.BeyondNoiseRatio and
# BeyondNoiseFloor): the largest ratio and difference between the single runs
# of an A/A pair, per metric, and how many crossed the bound (both at once).
print("\n| condition | metric | A/A pairs at 1 run | largest ratio | its difference (ms) | largest difference (ms) | its ratio | pairs past 20× and 5 s |")
print("|---|---|--:|--:|--:|--:|--:|--:|")
for cond in conds:
    worst = {}
    for f in sorted(glob.glob(os.path.join(out, cond, "*-aa-n1.json"))):
        if os.path.getsize(f) == 0:
            continue
        for r in json.load(open(f)).get("rows", []):
            if r["base_runs"] != 1 or r["new_runs"] != 1:
                continue
            lo, hi = sorted((r["base"]["median"], r["new"]["median"]))
            if lo <= 0:
                continue
            w = worst.setdefault(r["metric"], {"n": 0, "ratio": (0, 0), "delta": (0, 0), "past": 0})
            w["n"] += 1
            w["ratio"] = max(w["ratio"], (hi / lo, hi - lo))
            w["delta"] = max(w["delta"], (hi - lo, hi / lo))
            w["past"] += hi >= 20 * lo and hi - lo >= 5000
    for m, w in sorted(worst.items(), key=lambda kv: -kv[1]["ratio"][0]):
        print(f"| {cond} | {m} | {w['n']} | {w['ratio'][0]:.1f}× | {w['ratio'][1]:.0f} | {w['delta'][0]:.0f} | {w['delta'][1]:.1f}× | {w['past']} |")
EOF

# Why a warm metric's sample is the run and not the request (docs/DIFF.md):
# in the A/A pairs, how often the warm TTFT differs at p ≤ 0.05 (Mann–Whitney,
# uncorrected) when every warm request counts as a sample, against each
# run's median as the sample.
for cond in $conditions; do
	for f in "$out/$cond"/*-a[12].jsonl "$out/$cond"/*-a[12]-r*.jsonl "$out/$cond"/*-b.jsonl "$out/$cond"/*-b-r*.jsonl; do
		[[ -e $f ]] && "$bin" report "$f" --format json >"${f%.jsonl}.report.json" 2>/dev/null || true
	done
done
python3 - "$out" $conditions <<'EOF'
import glob, itertools, json, math, os, re, statistics, sys

out, conds = sys.argv[1], sys.argv[2:]

def ranks(x, y):
    v = sorted(x + y)
    r = {}
    for val in set(v):
        first = v.index(val)
        r[val] = first + (v.count(val) + 1) / 2
    return [r[a] for a in x], [r[a] for a in y]

def mw_p(x, y):
    """Two-sided Mann–Whitney p: exact by enumeration up to 12 values, else normal with tie correction."""
    n1, n2 = len(x), len(y)
    rx, ry = ranks(x, y)
    w, n = sum(ry), n1 + n2
    mean = n2 * (n + 1) / 2
    if n <= 12:
        pool = rx + ry
        dev = abs(w - mean)
        hits = total = 0
        for c in itertools.combinations(range(n), n2):
            total += 1
            hits += abs(sum(pool[i] for i in c) - mean) >= dev - 1e-9
        return hits / total
    ties = sum(c**3 - c for c in (list(sorted(x + y)).count(v) for v in set(x + y)))
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    u = w - n2 * (n2 + 1) / 2
    z = max(0, abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))

def warm(path):
    runs = []
    for run in json.load(open(path)).get("runs", []):
        v = [r["ttft_ms"] for r in run["requests"]["rows"] if r["phase"] == "warm" and not r.get("error")]
        if v:
            runs.append(v)
    return runs

print("\n| condition | A/A pairs | warm TTFT p ≤ 0.05, every request a sample | warm TTFT p ≤ 0.05, each run's median a sample |")
print("|---|--:|--:|--:|")
for cond in conds:
    by_req = by_run = pairs = 0
    sides = {}
    for f in sorted(glob.glob(os.path.join(out, cond, "*.report.json"))):
        m = re.match(r"(\d+)-(a[12])(?:-r\d+)?\.report\.json$", os.path.basename(f))
        if m:
            sides.setdefault(m.group(1), {}).setdefault(m.group(2), []).extend(warm(f))
    for pair in sides.values():
        x, y = pair.get("a1"), pair.get("a2")
        if not x or not y:
            continue
        pairs += 1
        by_req += mw_p([v for r in x for v in r], [v for r in y for v in r]) <= 0.05
        by_run += mw_p([statistics.median(r) for r in x], [statistics.median(r) for r in y]) <= 0.05
    print(f"| {cond} | {pairs} | {by_req} | {by_run} |")
EOF
# How many runs a side the induced change needs on this machine: draws of
# n runs a side from the condition's pooled A2 and B runs (all pairs, so
# the load of the whole recording mixes in: an estimate below what pairs
# recorded side by side reach), judged by diff's rule on the cold first
# token (Mann–Whitney p × 6, Holm's first step over the six headline
# metrics, ≤ 0.05; shift > 10% and > 5 ms).
python3 - "$out" $conditions <<'EOF'
import glob, itertools, json, math, os, random, re, statistics, sys

out, conds = sys.argv[1], sys.argv[2:]

def first_tokens(d, side):
    v = []
    for f in glob.glob(os.path.join(d, "*.report.json")):
        if re.search(rf"/\d+-{side}(-r\d+)?\.report\.json$", f):
            v += [r["cold_total_ms"] for r in json.load(open(f))["runs"] if r.get("cold_end") == "first_token"]
    return v

def mw_p(x, y):
    """Two-sided Mann–Whitney p: exact up to 12 values, else normal."""
    n1, n2, n = len(x), len(y), len(x) + len(y)
    allv = sorted(x + y)
    rank = {v: (allv.index(v) + 1 + n - allv[::-1].index(v)) / 2 for v in set(allv)}
    w, mean = sum(rank[v] for v in y), n2 * (n + 1) / 2
    if n <= 12:
        pool = [rank[v] for v in x + y]
        combos = list(itertools.combinations(range(n), n2))
        return sum(abs(sum(pool[k] for k in c) - mean) >= abs(w - mean) - 1e-9 for c in combos) / len(combos)
    z = max(0, abs(w - mean) - 0.5) / math.sqrt(n1 * n2 * (n + 1) / 12)
    return math.erfc(z / math.sqrt(2))

print("\n| condition | A2 runs, median (ms) | B runs, median (ms) | n = 5 | n = 10 | n = 20 | n = 30 | n = 50 |")
print("|---|--:|--:|--:|--:|--:|--:|--:|")
for cond in conds:
    a, b = first_tokens(os.path.join(out, cond), "a2"), first_tokens(os.path.join(out, cond), "b")
    if len(a) < 50 or len(b) < 50:
        continue
    rng, cells = random.Random(1), []
    for n in (5, 10, 20, 30, 50):
        trials, hit = (400 if n == 5 else 1000), 0
        for _ in range(trials):
            x, y = rng.sample(a, n), rng.sample(b, n)
            shift = statistics.median([q - p for p in x for q in y])
            hit += 6 * mw_p(x, y) <= 0.05 and shift > 0.10 * statistics.median(x) and shift > 5
        cells.append(f"{100 * hit / trials:.0f}%")
    print(f"| {cond} | {len(a)}, {statistics.median(a):.0f} | {len(b)}, {statistics.median(b):.0f} | " + " | ".join(cells) + " |")
EOF
echo "sessions and diffs: $out" >&2
