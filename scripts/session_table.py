#!/usr/bin/env python3
"""The short table of one call of scripts/gpu-session.sh, written to stand
alone: the machine, the commit, the floors measured in the call, and every
figure of issue 44's targets beside its floor or bound, the ratio and the
target, then the peer table.

    python3 scripts/session_table.py SESSION_DIR --commit C --parts "check cold serve"

SESSION_DIR is the script's $OUT/s: machine.txt, summary.txt, check/,
cold/res/ (scripts/gpu-cold-bench.sh), serve/res/ (scripts/gpu-serve-bench.sh),
peer/res/ (scripts/gpu-peer.sh). A part not run in the call is named as such.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cold_bench_table import disk_floor, engine_run, load, med, mmm  # noqa: E402
import peer_table  # noqa: E402


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def floors_of(s):
    """The floors of the call: the cold part's, else the serve part's."""
    for p in ("cold/res/floors.json", "serve/res/floors.json"):
        fl = load(os.path.join(s, p))
        if fl:
            return fl.get("floors") or fl, p.split("/")[0]
    return {}, None


def staged_rate(fl):
    """Issue 44's staged floor's rate: the page cache → pinned read beside
    a pinned H2D copy, at the upload's reader count (the most threads
    measured); with that reader count and the copy's own rate meanwhile."""
    rs = fl.get("page_cache_read") or []
    if not rs:
        return None, None, None
    r = max(rs, key=lambda x: x["threads"])
    return r["beside_h2d_gb_per_s"], r["threads"], r["h2d_beside_reads_gb_per_s"]


def rss_of(path):
    """VmHWM and VmRSS (MB) of the cold part's 4B serve after its
    background warm-up (gpu-cold-bench.sh's rss.txt)."""
    t = read(path)
    got = {}
    for k in ("VmHWM", "VmRSS"):
        m = re.search(r"^%s:\s+(\d+) kB" % k, t, re.M)
        if m:
            got[k] = int(m.group(1)) * 1024 / 1e6
    return got


def ratio(x, y):
    return x / y if x and y else None


def fmt_ratio(r, suffix="×"):
    return "%.2f%s" % (r, suffix) if r is not None else "—"


def met(ok):
    return "—" if ok is None else ("yes" if ok else "**no**")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("session_dir")
    ap.add_argument("--commit", default="")
    ap.add_argument("--parts", default="")
    a = ap.parse_args()
    s = a.session_dir
    machine = read(os.path.join(s, "machine.txt")).strip() or "?"
    parts = a.parts.split()
    out = ["# GPU session %s: scripts/gpu-session.sh PARTS=\"%s\" at %s" % (
        read(os.path.join(s, "date.txt")).strip() or "?", a.parts or "?", a.commit or "an unknown commit"), "",
           "- machine: %s" % machine,
           "- commit: %s" % (a.commit or "unknown (run with COMMIT=$(git rev-parse --short HEAD))"),
           "- parts run: %s" % (a.parts or "?"),
           "- every figure below was measured in this call; each ratio is to a floor or bound measured in this call.", ""]

    fl, fl_from = floors_of(s)
    init = (fl.get("cu_init_ms") or 0) + (fl.get("ctx_retain_ms") or 0)
    pinned = max(fl.get("pinned_h2d_gb_per_s") or 0, fl.get("registered_h2d_gb_per_s") or 0)
    d2d = fl.get("d2d_gb_per_s") or 0
    staged, readers, copy_beside = staged_rate(fl)
    gemm = fl.get("gemm_bf16") or {}
    if fl:
        out += ["### Floors (`treni-top doctor --floors`, %s part)" % fl_from, "", "| floor | measured |", "| --- | --: |",
                "| cuInit + primary context | %.0f ms |" % init,
                "| H2D from pinned memory | %.1f GB/s |" % pinned]
        if staged:
            out.append("| page cache → pinned, %d threads, beside a pinned H2D copy (the copy's own rate meanwhile) | %.1f GB/s (%.1f) |" % (readers, staged, copy_beside))
        out.append("| device copy (bytes read + written) | %.0f GB/s |" % d2d)
        if gemm:
            out.append("| bf16 GEMM %dx%dx%d, cuBLASLt, median of 5 batches | %.0f TFLOP/s (%.0f–%.0f) |" % (
                gemm["m"], gemm["n"], gemm["k"], gemm["tflops"], gemm["min_tflops"], gemm["max_tflops"]))
        elif fl.get("gemm_bf16_error"):
            out.append("| bf16 GEMM | not measured: %s |" % fl["gemm_bf16_error"])
        disk = disk_floor(os.path.join(s, "cold/res"))
        if disk.get("sequential_gb_per_s"):
            out.append("| disk, page cache cold (1 / 8 streams) | %.2f / %.2f GB/s |" % (disk["sequential_gb_per_s"], disk.get("parallel_gb_per_s") or 0))
        out.append("")

    head = ["### Issue 44's targets", "",
            "| item | figure | measured | floor or bound | ratio | target | met |", "| --- | --- | --: | --: | --: | --: | --- |"]
    out += head
    cold = os.path.join(s, "cold/res")
    for p in ("4b", "0.6b"):
        eng = [e for e in (engine_run(cold, "engine-%s-%d" % (p, i)) for i in range(1, 10)) if e]
        if not eng:
            continue
        wbytes = eng[0]["bytes"] or 0
        ft = [e["first_token_ms"] for e in eng]
        n = "%d runs, min / median / max" % len(eng) if len(eng) > 1 else "1 run"
        pin_floor = init + 1000 * wbytes / (pinned * 1e9) if pinned and wbytes else None
        st_floor = init + 1000 * wbytes / (staged * 1e9) if staged and wbytes else None
        r_pin = ratio(med(ft), pin_floor)
        if p == "4b":
            out.append("| 1 | %s first token, page cache warm (ms; %s) | %s | pinned floor %s ms (cuInit + context + %.2f GB ÷ pinned H2D) | %s | ≤ 1.10× (aim) | %s |" % (
                p.upper(), n, mmm(ft), "%.0f" % pin_floor if pin_floor else "?", wbytes / 1e9, fmt_ratio(r_pin), met(r_pin <= 1.10 if r_pin else None)))
            r_st = ratio(med(ft), st_floor)
            out.append("| 1 | … against the staged floor | | %s ms (cuInit + context + %.2f GB ÷ %s GB/s) | %s | ≤ 1.03× | %s |" % (
                "%.0f" % st_floor if st_floor else "?", wbytes / 1e9, "%.1f" % staged if staged else "?", fmt_ratio(r_st), met(r_st <= 1.03 if r_st else None)))
        else:
            out.append("| 1 | %s first token, page cache warm (ms; %s) | %s | pinned floor %s ms | %s | ≤ 1.0× | %s |" % (
                p.upper(), n, mmm(ft), "%.0f" % pin_floor if pin_floor else "?", fmt_ratio(r_pin), met(r_pin <= 1.0 if r_pin else None)))
        itl = [e["itl_ms"] for e in eng]
        itl_floor = 1000 * wbytes / (d2d * 1e9) if d2d and wbytes else None
        if p == "4b":
            r = ratio(med(itl), itl_floor)
            out.append("| 2 | %s decode ITL, batch 1 (ms) | %s | %s ms (%.2f GB of weights ÷ device copy) | %s | ≤ 1.25× | %s |" % (
                p.upper(), mmm(itl, "{:.2f}"), "%.2f" % itl_floor if itl_floor else "?", wbytes / 1e9, fmt_ratio(r), met(r <= 1.25 if r else None)))
        else:
            r = ratio(med(itl), itl_floor)
            out.append("| 2 | %s decode ITL, batch 1 (ms) | %s | %s ms | %s | ≤ 1.0 ms | %s |" % (
                p.upper(), mmm(itl, "{:.2f}"), "%.2f" % itl_floor if itl_floor else "?", fmt_ratio(r), met(med(itl) <= 1.0 if med(itl) else None)))
    serve = os.path.join(s, "serve/res")
    fresh = load(os.path.join(serve, "streams64-fresh.json"))
    for w in (fresh or {}).get("workloads", []):
        for m in w.get("runs", []):
            b = m.get("bound")
            if b:
                out.append("| 3 | 64 concurrent streams, 1024 in / 128 out, fresh prompts (output tok/s) | %.0f | bound %.0f tok/s (prefill %.1f TFLOP ÷ GEMM rate = %.0f ms, %d decode steps of weights + KV ÷ device copy = %.0f ms) | %.2f | ≥ 0.80 | %s |" % (
                    m["output_tok_per_s"], b["output_tok_per_s"], b["prefill_tflop"], b["prefill_ms"], b["decode_steps"], b["decode_ms"], b["ratio"], met(b["ratio"] >= 0.8)))
            else:
                out.append("| 3 | 64 concurrent streams, fresh prompts (output tok/s) | %.0f | %s | — | ≥ 0.80 | — |" % (m["output_tok_per_s"], m.get("bound_note") or "no bound"))
    qps = load(os.path.join(serve, "qps.json"))
    sat = (qps or {}).get("saturation")
    if sat:
        val = "QPS %g, %.0f tok/s" % (sat["qps"], sat["output_tok_per_s"]) if sat["qps"] else "none"
        out.append("| 4 | QPS sweep saturation (%s) | %s | | | reported | %s |" % (sat["verdict"].replace("|", "/"), val, met(True) if sat["reached"] else "not reached"))
    rss = rss_of(os.path.join(cold, "rss.txt"))
    if rss:
        out.append("| 5 | 4B serve, steady RSS after the background warm-up (MB) | %.0f | | | ≤ 771 | %s |" % (rss.get("VmRSS", 0), met(rss.get("VmRSS", 1e9) <= 771)))
        out.append("| 5 | 4B serve, peak RSS (VmHWM, MB) | %.0f | | | lower where it costs no upload speed | — |" % rss.get("VmHWM", 0))
    for line in read(os.path.join(s, "summary.txt")).splitlines():
        if line.startswith("check "):
            ok = "rc=0" in line and "identical" in line and " 0 failed" in line and "ERROR SUMMARY: 0 errors" in line
            out.append("| 7 | check: %s | | | | fatbin identical, all GPU tests pass, compute-sanitizer 0 errors | %s |" % (
                line[len("check "):].replace("|", "/"), met(ok)))
    if out[-1] == head[-1]:
        del out[-len(head):]  # no target figure in this call
    else:
        out.append("")
    peer = peer_table.table(os.path.join(s, "peer/res"))
    if peer:
        out += peer + [""]
    summary = read(os.path.join(s, "summary.txt")).strip()
    if summary:
        out += ["### Parts", "", "```", summary, "```", ""]
    missing = [p for p in ("check", "cold", "serve", "peer", "sleep") if p not in parts]
    if missing:
        out += ["Not run in this call: %s." % ", ".join(missing), ""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
