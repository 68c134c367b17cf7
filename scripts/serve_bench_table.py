#!/usr/bin/env python3
"""Prints the table of one run of scripts/gpu-serve-bench.sh from its results
directory (the JSON reports of treni-top bench, schema treni-top-bench/1).

usage: serve_bench_table.py RESULTS_DIR
"""
import json
import os
import re
import sys


def load(res, stem):
    p = os.path.join(res, stem + ".json")
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def dist(m, key, q):
    d = m.get(key) or {}
    return d.get(q, 0.0) if d.get("n") else float("nan")


def row(cells):
    return "| " + " | ".join(cells) + " |"


def bound_lines(r, n):
    """The fresh-prompt streams' throughput beside the bound the bench
    computed from this call's floors (treni-top bench --floors
    --model-config), or why there is none."""
    out = []
    for w in (r or {}).get("workloads", []):
        for m in w.get("runs", []):
            b = m.get("bound")
            out.append("%s concurrent streams, 1024 in / 128 out, fresh prompts: %.0f output tok/s" % (n, m["output_tok_per_s"]))
            if not b:
                out += [m.get("bound_note") or "no bound: the bench was not given the floors and the model", ""]
                continue
            out.append("bound (%s streams of %d prompt + %d output tokens, every prompt prefilled: %.1f TFLOP at the measured %.0f TFLOP/s "
                       "= %.0f ms, then %d decode steps reading %.2f GB of weights each and %.1f GB of KV in all at the measured %.0f GB/s "
                       "= %.0f ms): %.0f tok/s" % (
                           b["streams"], b["prompt_tokens"], b["output_tokens"], b["prefill_tflop"], b["matmul_tflops"],
                           b["prefill_ms"], b["decode_steps"], b["step_weight_gb"], b["decode_kv_gb"], b["memory_gb_per_s"],
                           b["decode_ms"], b["output_tok_per_s"]))
            out += ["ratio: %.2f of the bound (target ≥ 0.8)" % b["ratio"], ""]
    return out


def main():
    res = sys.argv[1]
    out = []
    # The main server, then each variant of gpu-serve-bench.sh (files
    # streams<N>-fresh-<variant>.json, N the script's STREAMS, 64 by
    # default), in the order the script ran them.
    n = next((m.group(1) for m in (re.match(r"streams(\d+)-fresh\.json$", f) for f in sorted(os.listdir(res))) if m), "64")
    stem = "streams%s" % n
    variants = sorted((f[len(stem + "-fresh-"):-len(".json")] for f in os.listdir(res)
                       if f.startswith(stem + "-fresh-") and f.endswith(".json")),
                      key=lambda v: os.path.getmtime(os.path.join(res, "%s-fresh-%s.json" % (stem, v))))
    streams = [("main", "fresh", load(res, stem + "-fresh")), ("main", "in prefix cache", load(res, stem))]
    for v in variants:
        streams += [(v, "fresh", load(res, stem + "-fresh-" + v)), (v, "in prefix cache", load(res, stem + "-" + v))]
    if any(r for _, _, r in streams):
        out += ["### %s concurrent streams, 1024 in / 128 out" % n, "",
                row(["server", "prompts", "output tok/s", "TPOT p50 (ms)", "TPOT p99 (ms)", "TTFT p50 (ms)", "ITL p99 (ms)", "failed"]),
                row(["---", "---"] + ["--:"] * 6)]
        for k, p, r in streams:
            if not r:
                continue
            for w in r.get("workloads", []):
                for m in w.get("runs", []):
                    out.append(row([k, p, "%.0f" % m["output_tok_per_s"], "%.2f" % dist(m, "tpot_ms", "p50"),
                                    "%.2f" % dist(m, "tpot_ms", "p99"), "%.1f" % dist(m, "ttft_ms", "p50"),
                                    "%.2f" % dist(m, "itl_ms", "p99"), str(m["failed"])]))
        out.append("")
        out += bound_lines(load(res, stem + "-fresh"), n)
    chunked = [(v, load(res, "chunked-" + v)) for v in variants]
    if any(r for _, r in chunked):
        out += ["### chunked_prefill workload per variant (fresh server each)", "",
                row(["server", "output tok/s", "TTFT p50", "ITL p50", "ITL p99", "TPOT p99", "failed"]),
                row(["---"] + ["--:"] * 6)]
        for v, r in chunked:
            for w in (r or {}).get("workloads", []):
                for m in w.get("runs", []):
                    out.append(row([v, "%.0f" % m["output_tok_per_s"], "%.1f" % dist(m, "ttft_ms", "p50"),
                                    "%.2f" % dist(m, "itl_ms", "p50"), "%.2f" % dist(m, "itl_ms", "p99"),
                                    "%.2f" % dist(m, "tpot_ms", "p99"), str(m["failed"])]))
        out.append("")
    r = load(res, "qps")
    if r:
        out += ["### QPS sweep (Poisson, seed 42, in 1024 / out 128, fresh prompts each level)", "",
                row(["QPS", "requests", "output tok/s", "req/s", "TTFT p50", "TPOT p50", "TPOT p99", "ITL p99", "queue growth (s/s)", "failed"]),
                row(["--:"] * 10)]
        for w in r.get("workloads", []):
            name = w["spec"].get("name", "")
            for m in w.get("runs", []):
                g = (m.get("queue") or {}).get("growth")
                out.append(row([name, str(m["requests"]), "%.0f" % m["output_tok_per_s"], "%.2f" % m["req_per_s"],
                                "%.1f" % dist(m, "ttft_ms", "p50"), "%.2f" % dist(m, "tpot_ms", "p50"),
                                "%.2f" % dist(m, "tpot_ms", "p99"), "%.2f" % dist(m, "itl_ms", "p99"),
                                "%+.3f" % g if g is not None else "—", str(m["failed"])]))
        out.append("")
        sat = r.get("saturation")
        if sat:
            out += ["Saturation: " + sat["verdict"] + ".", ""]
    r = load(res, "workloads")
    if r:
        out += ["### The five serving workloads", "",
                row(["workload", "requests", "output tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "failed"]),
                row(["---"] + ["--:"] * 8)]
        for w in r.get("workloads", []):
            for m in w.get("runs", []):
                out.append(row([w["spec"].get("name", ""), str(m["requests"]), "%.0f" % m["output_tok_per_s"],
                                "%.1f" % dist(m, "ttft_ms", "p50"), "%.1f" % dist(m, "ttft_ms", "p99"),
                                "%.2f" % dist(m, "itl_ms", "p50"), "%.2f" % dist(m, "itl_ms", "p99"),
                                "%.2f" % dist(m, "tpot_ms", "p50"), str(m["failed"])]))
        out.append("")
    pre = [(k, load(res, "prefix-" + k)) for k in ("1k", "16k")]
    if any(r for _, r in pre):
        out += ["### Warm prefix-hit TTFT (shared prefix, 8-token suffix, one request at a time)", "",
                row(["prefix", "TTFT p50 (ms)", "TTFT p99 (ms)", "TTFT max (ms)", "requests", "failed"]), row(["--:"] * 6)]
        for k, r in pre:
            if not r:
                continue
            for w in r.get("workloads", []):
                for m in w.get("runs", []):
                    out.append(row([k, "%.2f" % dist(m, "ttft_ms", "p50"), "%.2f" % dist(m, "ttft_ms", "p99"),
                                    "%.2f" % dist(m, "ttft_ms", "max"), str(m["requests"]), str(m["failed"])]))
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
