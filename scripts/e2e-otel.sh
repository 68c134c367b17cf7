#!/usr/bin/env bash
# e2e-otel: treni-top's OpenTelemetry export and fleet metrics against the
# real Jaeger v2 and Prometheus (issue 18, "Proof against the real things").
#
#  1. Builds Jaeger v2 from the Go module proxy, pinned to
#     github.com/jaegertracing/jaeger v1.76.0 (the module's v1.x tags carry
#     the v2 binary). `go install …/cmd/jaeger@v1.76.0` refuses the module
#     (its go.mod has a replace directive), so the script downloads the
#     module with `go mod download` and builds ./cmd/jaeger inside a copy.
#     Skipped when .peers/bin/jaeger-v1.76.0 exists (JAEGER_BIN=PATH uses
#     another build). Installs Prometheus from the distribution package
#     (apt-get install prometheus) when it is not on PATH.
#  2. Starts Jaeger with a minimal collector config (OTLP receiver → memory
#     store, query API) on free loopback ports.
#  3. Runs the built-in engine under
#        OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT treni-top run --headless
#     and, unless that run already exported live, sends the recorded
#     session with `treni-top export` (only OTEL_EXPORTER_OTLP_ENDPOINT set,
#     OTLP/HTTP), plus a copy of it over OTLP/gRPC.
#  4. Checks through Jaeger's query API (/api/v3/traces/ID) that each trace
#     arrived with the root span, every stage span and every request span,
#     with start offsets and durations equal to `treni-top report --format
#     json` to the microsecond and TTFT attributes equal to the report's.
#  5. Serves the session's fleet metrics (`treni-top export --serve-metrics`),
#     has Prometheus scrape them, and checks through Prometheus's HTTP API
#     that the cold-start total, the phases' sum, the dominant hypothesis and
#     the TTFT histogram counts match the report.
#
# TRENI_TOP=PATH tests that binary instead of building this checkout.
#
# Not in CI: it builds Jaeger (several minutes on 2 cores) and installs a
# package. Everything it makes stays under .peers/ (ignored by git).
# Usage: scripts/e2e-otel.sh
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS=$ROOT/.peers
OUT=$PEERS/e2e-otel
JAEGER_VERSION=v1.76.0
JAEGER_BIN=${JAEGER_BIN:-$PEERS/bin/jaeger-$JAEGER_VERSION}
rm -rf "$OUT"
mkdir -p "$OUT" "$PEERS/bin"

say() { printf 'e2e-otel: %s\n' "$*"; }
fail() { printf 'e2e-otel: FAIL: %s\n' "$*" >&2; exit 1; }

PIDS=()
cleanup() {
	for p in "${PIDS[@]:-}"; do
		[[ -n "$p" ]] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# waitfor URL SECONDS: poll until the URL answers 2xx.
waitfor() {
	local url=$1 deadline=$((SECONDS + $2))
	until curl -sf -o /dev/null "$url"; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

if [[ -n "${TRENI_TOP:-}" ]]; then
	TT=$TRENI_TOP # a treni-top built elsewhere
else
	say "building treni-top"
	go build -o "$OUT/treni-top" ./cmd/treni-top
	TT=$OUT/treni-top
fi

if [[ ! -x "$JAEGER_BIN" ]]; then
	say "building Jaeger $JAEGER_VERSION from the module proxy (several minutes on 2 cores)"
	start=$SECONDS
	dir=$(cd "$OUT" && GOFLAGS=-mod=mod go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
	rm -rf "$PEERS/jaeger-src"
	cp -r "$dir" "$PEERS/jaeger-src"
	chmod -R u+w "$PEERS/jaeger-src"
	(cd "$PEERS/jaeger-src" && GOFLAGS=-buildvcs=false go build -o "$JAEGER_BIN" ./cmd/jaeger)
	say "built Jaeger in $((SECONDS - start)) s"
fi
"$JAEGER_BIN" version 2>/dev/null | head -c 300 || true
echo

if ! command -v prometheus >/dev/null; then
	say "installing Prometheus (Debian package)"
	SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
	$SUDO apt-get install -y --no-install-recommends prometheus >/dev/null
fi
prometheus --version 2>&1 | head -1

OTLP_HTTP=$(freeport); OTLP_GRPC=$(freeport); QUERY=$(freeport); QUERY_GRPC=$(freeport)
METRICS=$(freeport); PROM=$(freeport)

# The minimal collector config (Jaeger v2 is an OpenTelemetry Collector
# distribution): OTLP in, batch, Jaeger's memory store, query API.
cat >"$OUT/jaeger.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$QUERY
    grpc:
      endpoint: 127.0.0.1:$QUERY_GRPC
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$OTLP_HTTP
      grpc:
        endpoint: 127.0.0.1:$OTLP_GRPC
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML

say "starting Jaeger (OTLP/HTTP :$OTLP_HTTP, OTLP/gRPC :$OTLP_GRPC, query :$QUERY)"
"$JAEGER_BIN" --config "$OUT/jaeger.yaml" >"$OUT/jaeger.log" 2>&1 &
PIDS+=($!)
waitfor "http://127.0.0.1:$QUERY/api/services" 60 || { tail -20 "$OUT/jaeger.log"; fail "Jaeger did not come up"; }

export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_HTTP
say "treni-top run --headless on the built-in engine (OTEL_EXPORTER_OTLP_ENDPOINT=$OTEL_EXPORTER_OTLP_ENDPOINT)"
"$TT" run --headless --record "$OUT/session.jsonl" >"$OUT/run.log" 2>&1 || { tail -20 "$OUT/run.log"; fail "treni-top run failed"; }
"$TT" report "$OUT/session.jsonl" --format json >"$OUT/report.json"

# A copy of the session one second later: other trace IDs, sent over gRPC.
python3 - "$OUT/session.jsonl" "$OUT/session-grpc.jsonl" <<'PY'
import json, sys, datetime
src, dst = sys.argv[1:]
with open(src) as f, open(dst, "w") as g:
    h = json.loads(f.readline())
    c = datetime.datetime.fromisoformat(h["created"].replace("Z", "+00:00")) + datetime.timedelta(seconds=1)
    h["created"] = c.isoformat().replace("+00:00", "Z")
    g.write(json.dumps(h) + "\n")
    g.writelines(f)
PY

# The trace ID needs no export: it derives from the session header.
TRACE=$("$TT" export "$OUT/session.jsonl" --trace-ids | awk '/^run 0: trace/ {print $4}')
[[ ${#TRACE} -eq 32 ]] || fail "no trace ID from treni-top export"

sleep 1
# The run exported live (OTEL_EXPORTER_OTLP_ENDPOINT alone turns it on);
# Jaeger may index the trace a moment after the run's final flush.
for _ in $(seq 1 50); do
	curl -sf "http://127.0.0.1:$QUERY/api/v3/traces/$TRACE" -o /dev/null && break
	sleep 0.2
done
curl -sf "http://127.0.0.1:$QUERY/api/v3/traces/$TRACE" -o /dev/null ||
	fail "the run did not export trace $TRACE live"
say "the run exported trace $TRACE live"
say "sending the copy over OTLP/gRPC"
OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_GRPC OTEL_EXPORTER_OTLP_PROTOCOL=grpc "$TT" export "$OUT/session-grpc.jsonl" | tee "$OUT/export-grpc.out"
TRACE_GRPC=$(awk '/^run 0: trace/ {print $4}' "$OUT/export-grpc.out")

# check_trace ID REPORT.json: Jaeger's view of the trace against the report.
check_trace() {
	local id=$1 report=$2 deadline=$((SECONDS + 30))
	until curl -sf "http://127.0.0.1:$QUERY/api/v3/traces/$id" -o "$OUT/trace-$id.json"; do
		((SECONDS < deadline)) || fail "trace $id not in Jaeger"
		sleep 0.5
	done
	python3 - "$OUT/trace-$id.json" "$report" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))
spans = []
for rs in trace["result"]["resourceSpans"]:
    for ss in rs["scopeSpans"]:
        spans += ss["spans"]
def attrs(s):
    out = {}
    for kv in s.get("attributes", []):
        v = kv["value"]
        out[kv["key"]] = float(v["doubleValue"]) if "doubleValue" in v else (int(v["intValue"]) if "intValue" in v else v.get("stringValue", v.get("boolValue")))
    return out
roots = [s for s in spans if not s.get("parentSpanId")]
assert len(roots) == 1, f"{len(roots)} root spans"
root = roots[0]
t0 = int(root["startTimeUnixNano"])
run = report["runs"][0]
us = lambda ns: round(ns / 1e3)
dur = lambda s: int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])
bad = []
if us(dur(root)) != round(run["cold_total_ms"] * 1e3):
    bad.append(f"root {dur(root)} ns vs cold_total_ms {run['cold_total_ms']}")
byname = {s["name"]: s for s in spans}
for st in run["stages"]:
    s = byname.get(st["name"])
    if s is None:
        bad.append(f"stage {st['name']} missing"); continue
    if us(int(s["startTimeUnixNano"]) - t0) != round(st["start_ms"] * 1e3) or us(dur(s)) != round(st["duration_ms"] * 1e3):
        bad.append(f"stage {st['name']}: start {int(s['startTimeUnixNano'])-t0} ns dur {dur(s)} ns vs report {st['start_ms']} ms {st['duration_ms']} ms")
rows = run["requests"]["rows"]
for row in rows:
    s = byname.get("probe " + row["label"])
    if s is None:
        bad.append(f"request {row['label']} missing"); continue
    a = attrs(s)
    if us(dur(s)) != round(row["e2e_ms"] * 1e3):
        bad.append(f"request {row['label']}: duration {dur(s)} ns vs e2e {row['e2e_ms']} ms")
    if abs(a.get("gen_ai.server.time_to_first_token", -1) * 1e3 - row["ttft_ms"]) > 1e-6:
        bad.append(f"request {row['label']}: TTFT attr {a.get('gen_ai.server.time_to_first_token')} vs {row['ttft_ms']} ms")
want = 1 + len(run["stages"]) + len(rows)
if len(spans) != want:
    bad.append(f"{len(spans)} spans, want {want}")
if attrs(root).get("treni.diagnosis.dominant") != report["diagnosis"].get("dominant"):
    bad.append(f"root diagnosis {attrs(root).get('treni.diagnosis.dominant')} vs {report['diagnosis'].get('dominant')}")
if bad:
    print("\n".join(bad)); sys.exit(1)
print(f"trace {root['traceId']}: root {dur(root)/1e6:.3f} ms, {len(run['stages'])} stage spans and {len(rows)} request spans match the report to the microsecond")
PY
}
check_trace "$TRACE" "$OUT/report.json" || fail "trace $TRACE (OTLP/HTTP) does not match the session"
check_trace "$TRACE_GRPC" "$OUT/report.json" || fail "trace $TRACE_GRPC (OTLP/gRPC) does not match the session"

say "serving the session's fleet metrics on :$METRICS; Prometheus scrapes it (:$PROM)"
"$TT" export "$OUT/session.jsonl" --serve-metrics "127.0.0.1:$METRICS" --serve-for 10m >"$OUT/metrics.log" 2>&1 &
PIDS+=($!)
waitfor "http://127.0.0.1:$METRICS/metrics" 30 || fail "fleet metrics not served"
cat >"$OUT/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: treni-top
    static_configs:
      - targets: ["127.0.0.1:$METRICS"]
YAML
prometheus --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/prom-data" \
	--web.listen-address="127.0.0.1:$PROM" >"$OUT/prometheus.log" 2>&1 &
PIDS+=($!)
waitfor "http://127.0.0.1:$PROM/-/ready" 60 || { tail -20 "$OUT/prometheus.log"; fail "Prometheus did not come up"; }

# query EXPR: the instant vector as JSON, once Prometheus has a sample.
query() {
	local deadline=$((SECONDS + 60)) out
	while :; do
		out=$(curl -sfG "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$1") || out=
		if [[ -n "$out" ]] && python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["data"]["result"] else 1)' "$out"; then
			echo "$out"; return
		fi
		((SECONDS < deadline)) || fail "Prometheus has no result for $1"
		sleep 1
	done
}
query 'treni_cold_start_seconds' >"$OUT/q-total.json"
query 'sum(treni_cold_start_phase_seconds)' >"$OUT/q-phases.json"
# An undecided diagnosis has no dominant series; the total above shows the
# scrape happened, so an empty answer is then the expected one.
if python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["diagnosis"].get("dominant") else 1)' "$OUT/report.json"; then
	query 'treni_diagnosis_dominant' >"$OUT/q-dominant.json"
else
	curl -sfG "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode 'query=treni_diagnosis_dominant' >"$OUT/q-dominant.json"
fi
query 'treni_ttft_seconds_count' >"$OUT/q-ttft.json"
python3 - "$OUT" <<'PY'
import json, sys, os
d = sys.argv[1]
q = lambda n: json.load(open(os.path.join(d, f"q-{n}.json")))["data"]["result"]
report = json.load(open(os.path.join(d, "report.json")))
run = report["runs"][0]
total = float(q("total")[0]["value"][1])
phases = float(q("phases")[0]["value"][1])
dom = q("dominant")[0]["metric"]["hypothesis"] if q("dominant") else None
counts = {r["metric"]["phase"]: int(float(r["value"][1])) for r in q("ttft")}
want_total = run["cold_total_ms"] / 1e3
rows = run["requests"]["rows"]
want_counts = {p: sum(1 for r in rows if r["phase"] == p and not r.get("error")) for p in ("cold", "warm")}
bad = []
if abs(total - want_total) > 1e-9: bad.append(f"treni_cold_start_seconds {total} vs report {want_total}")
if phases > total + 1e-9 or abs(phases - total) > 1e-6: bad.append(f"phases sum {phases} vs total {total}")
if dom != report["diagnosis"].get("dominant"): bad.append(f"dominant {dom} vs {report['diagnosis'].get('dominant')}")
for p, n in want_counts.items():
    if counts.get(p, 0) != n: bad.append(f"TTFT count {p} {counts.get(p)} vs {n}")
if bad:
    print("\n".join(bad)); sys.exit(1)
print(f"prometheus: treni_cold_start_seconds {total:.6f} = report; phases sum {phases:.6f}; dominant {dom}; TTFT counts {counts}")
PY
say "PASS"
