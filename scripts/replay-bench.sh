#!/usr/bin/env bash
# replay-bench.sh — peak memory and speed of what reads a large session:
# report (md, json, chrome), replay (headless and the TUI), export (issue 42
# item 1; docs/BENCHMARKS.md "Import and report of large logs").
#
#   scripts/replay-bench.sh [RUNS] [EVENTS] [SESSION]
#
# It generates a session of EVENTS events (default 2,000,000, ~400 MB;
# scripts/gensession.py) in $TMPDIR unless SESSION names one, and runs each
# command RUNS times under /usr/bin/time -v, one line per run: wall seconds,
# user and system CPU seconds, peak RSS, MB/s (session megabytes ÷ wall
# seconds) and the load average (other work on the machine lengthens the
# wall time, not the CPU time). export sends OTLP/HTTP to a stub collector
# on 127.0.0.1 that answers 200 and keeps nothing. The TUI replay runs at
# --fast in a 200x50 tmux window until its status line says "replay
# finished", then seeks back 30 s (shift+←), which reads the file again from
# its start, until it says so again, and quits: its line counts the file
# twice, and its peak RSS covers a backwards seek. A summary gives
# min/median/max per command.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
EVENTS=${2:-2000000}
TMP=${TMPDIR:-/tmp}/treni-replay-bench.$$
mkdir -p "$TMP"
collector=""
cleanup() {
	[ -n "$collector" ] && kill "$collector" 2>/dev/null
	tmux kill-session -t "treni-bench-$$" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
go build -o "$TMP/treni-top" ./cmd/treni-top
SESSION=${3:-}
if [ -z "$SESSION" ]; then
	SESSION="$TMP/session.jsonl"
	python3 scripts/gensession.py "$EVENTS" "$SESSION"
fi
MB=$(($(stat -c %s "$SESSION") / 1000000))
OUT="$TMP/results.tsv"

# record LABEL TIMEFILE [MB] appends the line of one run from its time -v
# output; MB is what it read (default: the session once).
record() {
	local label=$1 tf=$2 mb=${3:-$MB} wall user sys rss load
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$tf")
	user=$(awk -F': ' '/User time/{print $2}' "$tf")
	sys=$(awk -F': ' '/System time/{print $2}' "$tf")
	rss=$(awk -F': ' '/Maximum resident/{printf "%.0f", $2/1024}' "$tf")
	load=$(cut -d' ' -f1 /proc/loadavg)
	printf '%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t%.0f\t%s\n' "$label" "$mb" "$wall" "$user" "$sys" "$rss" "$(echo "$mb / $wall" | bc -l)" "$load" | tee -a "$OUT"
}

# timed LABEL CMD… runs CMD under /usr/bin/time -v and records it.
timed() {
	local label=$1
	shift
	/usr/bin/time -v "$@" >"$TMP/stdout" 2>"$TMP/time" || { echo "FAILED: $*"; tail -5 "$TMP/time"; exit 1; }
	record "$label" "$TMP/time"
}

# tui plays the session in the TUI at --fast to its end, seeks back 30 s
# (the file read again from its start) to its end again, and quits.
tui() {
	local name="treni-bench-$$"
	rm -f "$TMP/time.tui"
	tmux new-session -d -s "$name" -x 200 -y 50 "/usr/bin/time -v -o $TMP/time.tui $TMP/treni-top replay $SESSION --fast --no-color"
	waitfor "$name" "replay finished"
	tmux send-keys -t "$name" S-Left
	sleep 1
	waitfor "$name" "replay finished"
	tmux capture-pane -p -t "$name" >"$TMP/screen.tui"
	tmux send-keys -t "$name" q
	for _ in $(seq 100); do
		[ -s "$TMP/time.tui" ] && break
		sleep 0.2
	done
	tmux kill-session -t "$name" 2>/dev/null || true
	record "tui-replay-fast-seekback" "$TMP/time.tui" "$((2 * MB))"
}

# waitfor SESSION TEXT waits (10 minutes at most) until the tmux pane shows TEXT.
waitfor() {
	for _ in $(seq 1200); do
		tmux capture-pane -p -t "$1" | grep -q "$2" && return 0
		sleep 0.5
	done
	echo "FAILED: the TUI did not show \"$2\" in 10 minutes"
	exit 1
}

python3 - "$TMP/port" <<'EOF' &
# A stub OTLP/HTTP collector: 200 to every POST, nothing kept.
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.serve_forever()
EOF
collector=$!
for _ in $(seq 50); do [ -s "$TMP/port" ] && break; sleep 0.1; done
PORT=$(cat "$TMP/port")

echo -e "command\tMB\twall_s\tuser_s\tsys_s\tpeak_rss_MB\tMB_per_s\tload" | tee "$OUT"
for _ in $(seq "$RUNS"); do
	timed "report-md" "$TMP/treni-top" report "$SESSION" -o "$TMP/report.md"
	timed "report-json" "$TMP/treni-top" report --format json "$SESSION" -o "$TMP/report.json"
	timed "report-chrome" "$TMP/treni-top" report --format chrome "$SESSION" -o "$TMP/trace.json"
	timed "replay-headless-fast" "$TMP/treni-top" replay --headless --fast "$SESSION"
	timed "export-otlp" "$TMP/treni-top" export "$SESSION" --otlp "http://127.0.0.1:$PORT"
	if [ -z "${NO_TUI:-}" ]; then
		tui
	fi
done
echo "chrome trace: $(stat -c %s "$TMP/trace.json") bytes"
echo
echo "min / median / max per command ($MB MB session; wall s · MB/s · peak RSS MB · user+sys CPU s · load)"
awk -F'\t' 'NR>1 {
	key=$1; n[key]++; w[key,n[key]]=$3; c[key,n[key]]=$4+$5; r[key,n[key]]=$6; t[key,n[key]]=$7; l[key,n[key]]=$8; keys[key]=1 }
	function med(a,k,m,  i,j,v,tmp){ for(i=1;i<=m;i++) v[i]=a[k,i]; for(i=1;i<=m;i++) for(j=i+1;j<=m;j++) if(v[j]<v[i]){tmp=v[i];v[i]=v[j];v[j]=tmp}
		return sprintf("%s / %s / %s", v[1], v[int((m+1)/2)], v[m]) }
	END { for (k in keys) printf "%-22s wall %s · MB/s %s · RSS %s · CPU %s · load %s\n", k, med(w,k,n[k]), med(t,k,n[k]), med(r,k,n[k]), med(c,k,n[k]), med(l,k,n[k]) }' "$OUT" | sort
