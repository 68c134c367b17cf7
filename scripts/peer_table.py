#!/usr/bin/env python3
"""The peer table of scripts/gpu-peer.sh: the built-in engine ÷ each peer
on the same GPU, checkpoint and workloads.

    python3 scripts/peer_table.py RESULTS_DIR

Reads engine-run-<i>.json and ollama-run-<i>.json (treni-top run reports),
hf-run-<i>.json and hf-batch.json (scripts/hf_peer.py), engine-bench.json
and ollama-bench.json (treni-top bench reports) and setup.txt. A ratio
below 1 in a time row, or above 1 in the throughput row, means the engine
is ahead.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cold_bench_table import engine_run, hf_run, load, med, mmm  # noqa: E402


def runs(res, stem, read):
    out = [read(res, "%s-%d" % (stem, i)) for i in range(1, 10)]
    return [r for r in out if r]


def bench_tps(res, stem):
    r = load(os.path.join(res, stem + ".json"))
    for w in (r or {}).get("workloads", []):
        for m in w.get("runs", []):
            return m
    return None


def table(res):
    """The peer table's Markdown lines, or [] when nothing ran."""
    eng, oll, hf = runs(res, "engine-run", engine_run), runs(res, "ollama-run", engine_run), runs(res, "hf-run", hf_run)
    eb, ob = bench_tps(res, "engine-bench"), bench_tps(res, "ollama-bench")
    hb = load(os.path.join(res, "hf-batch.json"))
    if not (eng or oll or hf or eb or ob or hb):
        return []
    try:
        setup = open(os.path.join(res, "setup.txt")).read().strip()
    except OSError:
        setup = "?"
    out = ["### The engine beside its peers, same GPU and checkpoint (%s)" % setup, "",
           "Engine and Ollama through treni-top (`run` for the first three rows, `bench` for the last); HF transformers "
           "in its own process (scripts/hf_peer.py: no HTTP, so its warm TTFT has no server in it). "
           "Ratios are engine ÷ peer: below 1 is the engine ahead in a time, above 1 in the throughput. "
           "Values are min / median / max where there were several runs.", "",
           "| metric | built-in engine | Ollama v0.9.6 (llama.cpp CUDA) | engine ÷ Ollama | HF transformers | engine ÷ HF |",
           "| --- | --: | --: | --: | --: | --: |"]

    def ratio(a, b):
        return "%.2f" % (a / b) if a and b else "—"

    def row(name, e, o, h, fmt):
        out.append("| %s | %s | %s | %s | %s | %s |" % (name, mmm(e, fmt), mmm(o, fmt), ratio(med(e), med(o)),
                                                     mmm(h, fmt), ratio(med(e), med(h))))
    row("cold first token, page cache warm (ms)", [r["first_token_ms"] for r in eng], [r["first_token_ms"] for r in oll],
        [r["first_token_ms"] for r in hf], "{:.0f}")
    row("warm TTFT, 52-token prompt (ms)", [r["warm_ttft_ms"] for r in eng], [r["warm_ttft_ms"] for r in oll],
        [r["warm_ttft_ms"] for r in hf], "{:.2f}")
    row("ITL, batch 1 (ms)", [r["itl_ms"] for r in eng], [r["itl_ms"] for r in oll], [r["itl_ms"] for r in hf], "{:.2f}")
    e = [eb["output_tok_per_s"]] if eb and not eb["failed"] else []
    o = [ob["output_tok_per_s"]] if ob and not ob["failed"] else []
    h = [hb["output_tok_per_s"]] if hb and "output_tok_per_s" in hb else []
    row("64 streams, 1024 in / 128 out, fresh prompts (output tok/s)", e, o, h, "{:.0f}")
    out.append("")
    for name, m in (("engine", eb), ("Ollama", ob)):
        if m and m["failed"]:
            out.append("%s's 64 streams: %d of %d requests failed (%s); no throughput." % (name, m["failed"], m["requests"], m.get("errors_by_kind")))
    if hb and "output_tok_per_s" not in hb:
        out.append("HF's batch: %s" % (hb.get("error") or "no result"))
    return out


def main():
    print("\n".join(table(sys.argv[1])))


if __name__ == "__main__":
    main()
