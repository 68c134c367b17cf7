#!/usr/bin/env bash
# import-bench.sh — peak memory and speed of import, report, replay and diff
# on large generated inputs (issue 42 item 1; docs/BENCHMARKS.md "Import and
# report of large logs").
#
#   scripts/import-bench.sh [RUNS] [SIZES_MB] [KINDS]
#
# For each kind and size it generates a log in $TMPDIR (scripts/genlog.py;
# never in the repository), imports it RUNS times under /usr/bin/time -v, and
# prints one line per run: wall seconds, user and system CPU seconds, peak
# RSS, MB/s (log megabytes ÷ wall seconds). Then it generates a 2M-event
# session (scripts/gensession.py) and times report (md, json), replay
# --headless and diff on it and on the largest import. The load average is
# printed with each line: other work on the machine lengthens the wall time,
# not the CPU time. A summary gives min/median/max per command and size.
# IMPORT_ONLY=1 times the imports alone (no session, report, replay, diff).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SIZES=${2:-"300 1000"}
KINDS=${3:-"vllm sglang tgi llama.cpp ollama treni"}
TMP=${TMPDIR:-/tmp}/treni-import-bench.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
go build -o "$TMP/treni-top" ./cmd/treni-top
OUT="$TMP/results.tsv"

# timed LABEL MB CMD… runs CMD under /usr/bin/time -v and records a line.
timed() {
	local label=$1 mb=$2
	shift 2
	/usr/bin/time -v "$@" >"$TMP/stdout" 2>"$TMP/time" || { echo "FAILED: $*"; tail -5 "$TMP/time"; exit 1; }
	local wall user sys rss load
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$TMP/time")
	user=$(awk -F': ' '/User time/{print $2}' "$TMP/time")
	sys=$(awk -F': ' '/System time/{print $2}' "$TMP/time")
	rss=$(awk -F': ' '/Maximum resident/{printf "%.0f", $2/1024}' "$TMP/time")
	load=$(cut -d' ' -f1 /proc/loadavg)
	printf '%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t%.0f\t%s\n' "$label" "$mb" "$wall" "$user" "$sys" "$rss" "$(echo "$mb / $wall" | bc -l)" "$load" | tee -a "$OUT"
}

echo -e "command\tMB\twall_s\tuser_s\tsys_s\tpeak_rss_MB\tMB_per_s\tload" | tee "$OUT"
for size in $SIZES; do
	for kind in $KINDS; do
		log="$TMP/$kind-$size.log"
		python3 scripts/genlog.py "$kind" "$size" "$log"
		mb=$(($(stat -c %s "$log") / 1000000))
		for _ in $(seq "$RUNS"); do
			timed "import $kind" "$mb" "$TMP/treni-top" import --kind "$kind" "$log" -o "$TMP/import.jsonl"
		done
		last="$TMP/import-$kind.jsonl"
		mv "$TMP/import.jsonl" "$last"
		rm -f "$log"
	done
done
[ "${IMPORT_ONLY:-0}" = 1 ] || python3 scripts/gensession.py 2000000 "$TMP/s2m.jsonl"
for s in "$TMP/s2m.jsonl" "$TMP"/import-vllm.jsonl; do
	[ "${IMPORT_ONLY:-0}" = 1 ] && break
	[ -f "$s" ] || continue
	mb=$(($(stat -c %s "$s") / 1000000))
	name=$(basename "$s" .jsonl)
	for _ in $(seq "$RUNS"); do
		timed "report $name" "$mb" "$TMP/treni-top" report "$s" -o /dev/null
		timed "report-json $name" "$mb" "$TMP/treni-top" report --format json "$s" -o /dev/null
		timed "replay $name" "$mb" "$TMP/treni-top" replay --headless "$s"
		timed "diff $name" "$((2 * mb))" "$TMP/treni-top" diff "$s" --against "$s"
	done
done
echo
echo "min / median / max per command and size (wall s · MB/s · peak RSS MB · user+sys CPU s)"
sort -t$'\t' -k1,1 -k2,2n "$OUT" | awk -F'\t' 'NR>1 && $1!="command" {
	key=$1" "$2" MB"; n[key]++; w[key,n[key]]=$3; c[key,n[key]]=$4+$5; r[key,n[key]]=$6; t[key,n[key]]=$7; keys[key]=1 }
	function med(a,k,m,  i,j,v,tmp){ for(i=1;i<=m;i++) v[i]=a[k,i]; for(i=1;i<=m;i++) for(j=i+1;j<=m;j++) if(v[j]<v[i]){tmp=v[i];v[i]=v[j];v[j]=tmp}
		return sprintf("%s / %s / %s", v[1], v[int((m+1)/2)], v[m]) }
	END { for (k in keys) printf "%-28s wall %s · MB/s %s · RSS %s · CPU %s\n", k, med(w,k,n[k]), med(t,k,n[k]), med(r,k,n[k]), med(c,k,n[k]) }' | sort
