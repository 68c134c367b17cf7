#!/usr/bin/env bash
# idle-cost.sh: CPU cost of an idle treni-top on the built-in demo engine.
#
# Starts BIN (default bin/treni-top) in a private tmux server at COLS×ROWS
# (default 160×48), waits SETTLE seconds (default 90: the cold start and the
# warm requests are over by then), then reads utime+stime of the treni-top
# process from /proc/PID/stat over WINDOW seconds (default 60) and prints
# the share of one core, with the load average before and after. The engine
# runs as a child process and is not counted. Extra arguments go to BIN
# (e.g. --cpuprofile /tmp/p.prof).
#
#   scripts/idle-cost.sh                       # bin/treni-top, 160x48, 60 s
#   BIN=/tmp/tt WINDOW=120 scripts/idle-cost.sh
set -euo pipefail
BIN=${BIN:-bin/treni-top}
COLS=${COLS:-160} ROWS=${ROWS:-48}
SETTLE=${SETTLE:-90} WINDOW=${WINDOW:-60}
SOCK=idlecost-$$
hz=$(getconf CLK_TCK)
cleanup() { tmux -L "$SOCK" kill-server 2>/dev/null || true; }
trap cleanup EXIT
tmux -L "$SOCK" new-session -d -x "$COLS" -y "$ROWS" "$(printf '%q ' "$BIN" "$@")"
sleep 1
pid=""
for _ in $(seq 1 20); do
	pid=$(tmux -L "$SOCK" list-panes -F '#{pane_pid}' | head -1)
	[ -n "$pid" ] && [ -r /proc/$pid/stat ] && break
	sleep 0.5
done
[ -n "$pid" ] || { echo "idle-cost: treni-top did not start" >&2; exit 1; }
ticks() { awk '{ s = $0; sub(/.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' /proc/"$1"/stat; }
sleep "$SETTLE"
kill -0 "$pid" 2>/dev/null || { echo "idle-cost: treni-top exited during the settle time" >&2; exit 1; }
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(ticks "$pid"); s0=$(date +%s.%N)
sleep "$WINDOW"
t1=$(ticks "$pid"); s1=$(date +%s.%N)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
# Quit cleanly (q) so a --cpuprofile is written, then wait for the exit.
tmux -L "$SOCK" send-keys q
for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
awk -v a="$t0" -v b="$t1" -v s0="$s0" -v s1="$s1" -v hz="$hz" -v l0="$load0" -v l1="$load1" \
	-v w="$COLS" -v h="$ROWS" 'BEGIN {
	pct = 100 * (b - a) / hz / (s1 - s0)
	printf "treni-top idle %dx%d: %.2f%% of a core over %.0f s (%d ticks); load average %s -> %s\n", w, h, pct, s1 - s0, b - a, l0, l1
}'
