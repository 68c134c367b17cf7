#!/usr/bin/env bash
# soak.sh: `treni-top serve` on the demo model (CPU backend) under mixed
# load for SOAK_MINUTES (default 20; issue 42): streamed and plain chat
# completions from STREAMS clients (default 4), one request in three hung up
# mid-stream, a client sending malformed requests, STALLERS clients
# (default 3) whose bodies stop after a few bytes, and one GET /metrics a
# second (scripts/soak_load.py). It then waits for the server to go idle
# and prints a table for docs/BENCHMARKS.md:
#   RSS drift after the first minute (target <= 10%), open descriptors
#   back to their count before the load, 0 errors on valid requests, 0 KV
#   blocks used at the end.
#
#   scripts/soak.sh                          # 20 minutes
#   SOAK_MINUTES=2 scripts/soak.sh           # to try it
#   TRENI_TOP=/tmp/tt OUT=/tmp/soak scripts/soak.sh
#
# KV_BLOCKS (default 64, 84 MB on the demo model) sizes the KV pool: the CPU
# backend maps the pool and the kernel backs a block's pages when it is
# first written, so RSS grows by a block's bytes each time a block is used
# for the first time, until every block has been (the default pool, 2,048
# blocks, is 2.7 GB: tens of minutes of this load). A pool this load touches
# whole within the first minute leaves in the drift only what is not the
# pool; the table gives the pool's size. SERVE_FLAGS adds flags to
# `treni-top serve` (e.g. "--body-timeout 10s"; the stallers follow a
# --body-timeout given there). The exit status is 0
# only when every target is met. Writes serve.log, load.json and table.md
# under OUT (default a new /tmp/soak.XXXXXX).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${SOAK_MINUTES:-20}
STREAMS=${STREAMS:-4}
STALLERS=${STALLERS:-3}
KV_BLOCKS=${KV_BLOCKS:-64}
OUT=${OUT:-$(mktemp -d /tmp/soak.XXXXXX)}
mkdir -p "$OUT"
read -r -a EXTRA <<<"${SERVE_FLAGS:-}"
BODY_TIMEOUT=30
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
	if [[ ${EXTRA[$i]} == --body-timeout ]]; then
		BODY_TIMEOUT=${EXTRA[$((i + 1))]%s}
	elif [[ ${EXTRA[$i]} == --body-timeout=* ]]; then
		BODY_TIMEOUT=${EXTRA[$i]#--body-timeout=}
		BODY_TIMEOUT=${BODY_TIMEOUT%s}
	fi
done
BIN=${TRENI_TOP:-}
if [[ -z $BIN ]]; then
	BIN=$OUT/treni-top
	go build -o "$BIN" ./cmd/treni-top
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
"$BIN" serve --demo --device cpu --addr "$addr" --kv-blocks "$KV_BLOCKS" "${EXTRA[@]}" 2>"$OUT/serve.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 600); do
	grep -q "listening on" "$OUT/serve.log" && break
	kill -0 "$pid" 2>/dev/null || { echo "soak: serve exited:" >&2; tail "$OUT/serve.log" >&2; exit 1; }
	sleep 0.5
done
grep -q "listening on" "$OUT/serve.log" || { echo "soak: serve not listening after 5 minutes" >&2; exit 1; }
model=$(curl -sf "http://$addr/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
sleep 1 # the server closes its side of that connection
fds0=$(ls /proc/"$pid"/fd | wc -l)
rss0=$(awk '/^VmRSS:/ {print $2 * 1024}' /proc/"$pid"/status)
echo "soak: serve pid $pid on $addr ($model), $MINUTES min, $STREAMS stream clients, $STALLERS stallers, body timeout ${BODY_TIMEOUT}s; $fds0 fds, RSS $((rss0 >> 20)) MiB before the load; output in $OUT"
python3 scripts/soak_load.py --addr "$addr" --pid "$pid" --model "$model" --seconds "$((MINUTES * 60))" \
	--streams "$STREAMS" --stallers "$STALLERS" --body-timeout "$BODY_TIMEOUT" --out "$OUT/load.json"
kill -0 "$pid" 2>/dev/null || { echo "soak: serve died during the load" >&2; tail "$OUT/serve.log" >&2; exit 1; }
status=0
python3 - "$OUT/load.json" "$fds0" "$rss0" "$MINUTES" "$(nproc)" "$(uname -r)" "$OUT/serve.log" >"$OUT/table.md" <<'PY' || status=$?
import json, sys
d = json.load(open(sys.argv[1]))
fds0, rss0, minutes = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
c, s, fin = d["counts"], d["samples"], d["final"]
after = [x for x in s if x["t"] >= 60] or s
rss1 = after[0]["rss"]
peak = max(x["rss"] for x in after)
mib = lambda b: f"{b / 2**20:.1f} MiB"
drift_end = (fin["rss"] - rss1) / rss1 * 100
drift_peak = (peak - rss1) / rss1 * 100
valid_ok = c.get("stream_ok", 0) + c.get("plain_ok", 0)
valid_err = c.get("stream_error", 0) + c.get("plain_error", 0)
kv_end = fin["metrics"].get("treni_kv_blocks_used")
stalled = c.get("stalled_408", 0)
wait = c.get("stalled_wait_ms", 0) / stalled / 1000 if stalled else 0
ok = drift_end <= 10 and drift_peak <= 10 and fin["fds"] <= fds0 and valid_err == 0 and kv_end == 0 \
    and c.get("malformed_error", 0) == 0 and c.get("stalled_error", 0) == 0 and c.get("hangup_error", 0) == 0
rows = [
    ("RSS before the load / at 1 min / peak after 1 min / at the end", f"{mib(rss0)} / {mib(rss1)} / {mib(peak)} / {mib(fin['rss'])}"),
    ("RSS drift after the first minute: at the end, at the peak (target <= 10%)", f"{drift_end:+.1f}% / {drift_peak:+.1f}%"),
    ("open fds before the load / peak / at the end (target: back to before)", f"{fds0} / {max(x['fds'] for x in s)} / {fin['fds']}"),
    ("valid requests completed (streamed + plain) / errors (target 0)", f"{valid_ok} ({c.get('stream_ok', 0)} + {c.get('plain_ok', 0)}) / {valid_err}"),
    ("streams hung up mid-stream / hang-ups that failed before the hang-up", f"{c.get('hangup_done', 0)} / {c.get('hangup_error', 0)}"),
    ("malformed requests answered their 4xx / otherwise", f"{c.get('malformed_ok', 0)} / {c.get('malformed_error', 0)}"),
    ("stalled bodies answered 408 and closed / otherwise; mean wait", f"{stalled} / {c.get('stalled_error', 0)}; {wait:.1f} s"),
    ("GET /metrics answered / failed", f"{c.get('metrics_ok', 0)} / {c.get('metrics_error', 0)}"),
    ("KV blocks used at the end (target 0); running, waiting", f"{kv_end:.0f}; {fin['metrics'].get('treni_num_requests_running', 0):.0f}, {fin['metrics'].get('treni_num_requests_waiting', 0):.0f}"),
    ("requests finished by reason (server's /metrics)", ", ".join(f"{k.split('{')[1][:-1]} {v:.0f}" for k, v in sorted(fin["metrics"].items()) if k.startswith("treni_request_finished_total{"))),
]
pool = "KV pool not reported"
for line in open(sys.argv[7]):
    if line.startswith("{") and '"kv_alloc"' in line:
        a = json.loads(line)["attrs"]
        pool = f"{a['blocks']} KV blocks of {a['block_size']} ({a['bytes'] / 2**20:.0f} MiB), context {a['max_seq_len']}"
print(f"Soak: {minutes} min, `treni-top serve --demo --device cpu`, {pool}; {sys.argv[5]} cores, Linux {sys.argv[6]}")
print()
print("| measure | value |")
print("| --- | --- |")
for k, v in rows:
    print(f"| {k} | {v} |")
print()
print("targets met" if ok else "TARGETS MISSED")
if d["errors"]:
    print()
    print("first errors:")
    for e in d["errors"][:10]:
        print("  " + e)
sys.exit(0 if ok else 1)
PY
cat "$OUT/table.md"
exit $status
