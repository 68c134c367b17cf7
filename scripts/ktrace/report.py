#!/usr/bin/env python3
"""Where a step's GPU time goes, from a ktrace file (scripts/ktrace/ktrace.c).

Reads the kernel records of the busiest stream, cuts them into forward steps
at each embed_bf16 launch (the first kernel of every step), and for each
kind of step (decode, prefill, mixed; graph or eager; by rows) prints the
median step time split into kernel classes and the idle gaps between
kernels. A kernel's time is its exclusive interval: from the later of its
start and the previous kernel's end to its own end, so that under
programmatic dependent launch (a kernel starting while the one before it
still runs, waiting at griddepcontrol.wait) no time is counted twice; a gap
is time when no kernel of the stream ran.

Usage: report.py TRACE [--from-ns T] [--to-ns T] [--per-kernel] [--burst-gap-ms MS]
"""
import argparse
import collections
import statistics
import sys


# Kernel classes by name prefix, first match wins (attn_combine before the
# other attn_ kernels); any other kernel whose name holds one of
# CUBLAS_MARKS (lower case) is cuBLASLt's.
CLASSES = [
    (("attn_combine",), "attn_combine"),
    (("attn_", "paged_attention"), "attention"),
    (("gemm_skinny",), "gemm_own"),
    (("rmsnorm", "add_rmsnorm"), "norm"),
    (("qk_norm_rope_store",), "rope_store"),
    (("swiglu",), "swiglu"),
    (("argmax", "sample"), "sample"),
    (("embed",), "embed"),
    (("bias_add", "add_f32"), "bias_add"),
]
CUBLAS_MARKS = ("nvjet", "gemm", "xmma", "cutlass", "splitkreduce")


def klass(name):
    for prefixes, cls in CLASSES:
        if name.startswith(prefixes):
            return cls
    if any(m in name.lower() for m in CUBLAS_MARKS):
        return "gemm_cublaslt"
    return "other"


def load(path, lo, hi):
    ks, dropped = [], 0
    with open(path) as f:
        for line in f:
            p = line.split(maxsplit=10)
            if not p:
                continue
            if p[0] == "K" and len(p) == 11:
                s, e = int(p[1]), int(p[2])
                if lo <= s <= hi:
                    ks.append((s, e, int(p[3]), int(p[4]), int(p[5]), int(p[6]), int(p[7]), p[10].strip()))
            elif p[0] == "D":
                dropped += int(p[1])
    return ks, dropped


def steps_of(ks):
    """Yield (kernels of one step) on the busiest stream, cut at embed_bf16."""
    busy = collections.Counter()
    for k in ks:
        busy[k[2]] += k[1] - k[0]
    if not busy:
        return [], None
    main = busy.most_common(1)[0][0]
    ks = sorted((k for k in ks if k[2] == main), key=lambda k: k[0])
    out, cur = [], []
    for k in ks:
        if k[7].startswith("embed_bf16") and cur:
            out.append(cur)
            cur = []
        cur.append(k)
    if cur:
        out.append(cur)
    # The first piece may start mid-step (before the first embed): drop it.
    if out and not out[0][0][7].startswith("embed_bf16"):
        out = out[1:]
    return out, main


def analyse(step, nxt_start):
    names = {k[7] for k in step}
    dec = any(n.startswith("attn_dec") for n in names)
    pre = any(n.startswith(("attn_mma_hd", "attn_mma_mid")) for n in names)
    kind = "mixed" if dec and pre else "decode" if dec else "prefill" if pre else (
        "decode_w1" if any(n.startswith("attn_mma_w1") for n in names) else "other")
    # attn_mma_w1 alone: decode rows that were not all single-token tiles, or
    # a decode without attn_dec.
    if kind == "prefill" and any(n.startswith("attn_mma_w1") for n in names):
        kind = "mixed"
    rows = step[0][4]  # embed_bf16's grid x = the step's token rows
    graph = step[0][3] != 0
    t0 = step[0][0]
    end = nxt_start if nxt_start is not None else max(k[1] for k in step)
    cls = collections.Counter()
    per = collections.Counter()
    raw = collections.defaultdict(list)  # (name, grid) -> [exclusive ns, duration ns] a launch
    gap = 0
    prev_end = t0
    for k in step:
        s, e = k[0], k[1]
        if s > prev_end:
            gap += s - prev_end
            per["(gap before " + klass(k[7]) + ")"] += s - prev_end
        eff = max(0, e - max(s, prev_end))
        cls[klass(k[7])] += eff
        per[k[7]] += eff
        raw[(k[7], k[4], k[5], k[6])].append((eff, e - s))
        prev_end = max(prev_end, e)
    tail = max(0, end - prev_end)  # host time until the next step's first kernel
    return dict(kind=kind, rows=rows, graph=graph, span=end - t0, busy=sum(cls.values()), gap=gap, tail=tail,
                cls=cls, per=per, raw=raw, n=len(step), t0=t0, end=end)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--from-ns", type=int, default=0)
    ap.add_argument("--to-ns", type=int, default=1 << 62)
    ap.add_argument("--per-kernel", action="store_true", help="also list kernels by exclusive time")
    ap.add_argument("--min-steps", type=int, default=3)
    ap.add_argument("--burst-gap-ms", type=float, default=150)
    ap.add_argument("--min-burst-steps", type=int, default=20)
    a = ap.parse_args()
    ks, dropped = load(a.trace, a.from_ns, a.to_ns)
    if not ks:
        sys.exit("no kernel records in %s (was CUDA_INJECTION64_PATH set, and the program idle a moment before it stopped?)" % a.trace)
    steps, main_stream = steps_of(ks)
    if not steps:
        sys.exit("no forward step (embed_bf16) in the trace")
    res = [analyse(s, steps[i + 1][0][0] if i + 1 < len(steps) else None) for i, s in enumerate(steps)]
    print("trace %s: %d kernels, stream %d, %d steps; records dropped: %d" % (a.trace, len(ks), main_stream, len(res), dropped))
    # Bursts: runs of steps with no idle stretch longer than --burst-gap-ms
    # between them (a benchmark's runs, the server's warm-up).
    bursts, cur = [], [res[0]]
    for r in res[1:]:
        if r["t0"] - (cur[-1]["end"] - cur[-1]["tail"]) > a.burst_gap_ms * 1e6:
            bursts.append(cur)
            cur = []
        cur.append(r)
    bursts.append(cur)
    t_first = res[0]["t0"]
    for bi, b in enumerate(bursts):
        if len(b) < a.min_burst_steps:
            continue
        # The burst ends with its last kernel, not with the idle time
        # before the next burst.
        b[-1]["end"] -= b[-1]["tail"]
        b[-1]["span"] -= b[-1]["tail"]
        b[-1]["tail"] = 0
        report(b, "burst %d: %.3f s after the first step" % (bi, (b[0]["t0"] - t_first) / 1e9), a)


def report(res, title, a):
    span = res[-1]["end"] - res[0]["t0"]
    print("\n== %s: %d steps over %.1f ms" % (title, len(res), span / 1e6))
    tot = collections.Counter()
    for r in res:
        tot["kernels"] += r["busy"]
        tot["gaps inside steps"] += r["gap"]
        tot["host time between steps"] += r["tail"]
    for k, v in tot.items():
        print("  %-26s %9.1f ms (%4.1f%%)" % (k, v / 1e6, 100 * v / span))
    groups = collections.defaultdict(list)
    for r in res:
        groups[(r["kind"], "graph" if r["graph"] else "eager", r["rows"])].append(r)
    print("  by step kind (median over the steps of a kind; ms; rows = the step's token rows):")
    for key in sorted(groups, key=lambda k: -sum(r["span"] for r in groups[k])):
        g = groups[key]
        if len(g) < a.min_steps and sum(r["span"] for r in g) < 0.02 * span:
            continue
        med = lambda f: statistics.median(f(r) for r in g) / 1e6
        share = sum(r["span"] for r in g) / span
        print("  %-9s %-5s rows %5d: %4d steps, %5.1f%% of the time; step %.3f = kernels %.3f + gaps %.3f + host %.3f; %d kernels" %
              (key[0], key[1], key[2], len(g), 100 * share, med(lambda r: r["span"]), med(lambda r: r["busy"]),
               med(lambda r: r["gap"]), med(lambda r: r["tail"]), int(statistics.median(r["n"] for r in g))))
        classes = collections.Counter()
        for r in g:
            classes.update(r["cls"])
        print("      mean: " + ", ".join("%s %.3f" % (c, v / len(g) / 1e6) for c, v in classes.most_common()))
        if a.per_kernel:
            per = collections.Counter()
            for r in g:
                per.update(r["per"])
            for n, v in per.most_common(16):
                print("      %9.3f  %s" % (v / len(g) / 1e6, n[:110]))
            launches = collections.defaultdict(list)
            for r in g:
                for key2, xs in r["raw"].items():
                    launches[key2].extend(xs)
            print("      launches (per step; median exclusive / median duration in us; name, grid):")
            for key2, xs in sorted(launches.items(), key=lambda kv: -sum(x[0] for x in kv[1]))[:20]:
                print("      %6.1f x %7.1f / %7.1f  %s %dx%dx%d" % (len(xs) / len(g), statistics.median(x[0] for x in xs) / 1e3,
                      statistics.median(x[1] for x in xs) / 1e3, key2[0][:70], key2[1], key2[2], key2[3]))

if __name__ == "__main__":
    main()
