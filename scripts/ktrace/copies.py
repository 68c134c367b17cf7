#!/usr/bin/env python3
"""How busy the copy engine was during the weight upload, from a ktrace file.

Reads the host-to-device memcpy records (scripts/ktrace/ktrace.c, "C" lines,
copy kind 1) of at least --min-bytes each, takes the window from the first
one's start to the last one's end, and prints: the copies and their bytes,
the window, the time at least one copy ran (the union over streams) and the
time two or more ran at once, the idle gaps inside the window, each copy's
own rate (bytes over its duration), the window cut into --bucket-ms pieces
with the bytes copied in each, and the kernels that ran in the window. If
the union is close to the window, the copy engine was the limit, and its
rate while busy says how fast it read host memory; if there are gaps, the
copies were not fed fast enough.

Usage: copies.py TRACE [--min-bytes N] [--bucket-ms MS]
"""
import argparse
import signal
import statistics
import sys


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--bucket-ms", type=float, default=20.0)
    a = ap.parse_args()
    copies, kernels = [], []
    with open(a.trace) as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] == "C" and len(p) >= 7 and p[6] == "1" and int(p[5]) >= a.min_bytes:
                copies.append((int(p[1]), int(p[2]), p[3], int(p[5])))
            elif p[0] == "K" and len(p) >= 11:
                kernels.append((int(p[1]), int(p[2]), p[10]))
    if not copies:
        sys.exit("copies.py: no host-to-device copy of %d bytes or more in %s" % (a.min_bytes, a.trace))
    copies.sort()
    lo, hi = copies[0][0], max(c[1] for c in copies)
    total = sum(c[3] for c in copies)
    # Sweep the copies' edges: time with one or more running, two or more.
    edges = sorted([(c[0], 1) for c in copies] + [(c[1], -1) for c in copies])
    busy = multi = 0
    gaps = []
    depth, last = 0, lo
    for t, d in edges:
        if depth >= 1:
            busy += t - last
        if depth >= 2:
            multi += t - last
        if depth == 0 and t > last:
            gaps.append(t - last)
        depth += d
        last = t
    rates = [c[3] / max(1, c[1] - c[0]) for c in copies]  # bytes per ns = GB/s
    streams = sorted({c[2] for c in copies})
    ms = lambda ns: ns / 1e6
    print("host-to-device copies of ≥ %d bytes: %d on %d stream(s), %.2f GB" % (a.min_bytes, len(copies), len(streams), total / 1e9))
    print("window %.1f ms: %.1f GB/s over it" % (ms(hi - lo), total / (hi - lo)))
    print("a copy running %.1f ms (%.0f%%): %.1f GB/s while busy; two or more at once %.1f ms" % (
        ms(busy), 100 * busy / (hi - lo), total / max(1, busy), ms(multi)))
    big = [g for g in gaps if g > 50_000]
    print("idle inside the window %.1f ms in %d gaps (%d over 50 µs, %.1f ms of them; longest %.2f ms)" % (
        ms(sum(gaps)), len(gaps), len(big), ms(sum(big)), ms(max(gaps, default=0))))
    q = statistics.quantiles(rates, n=10) if len(rates) > 1 else rates * 9
    print("each copy's own rate, GB/s: min %.1f, p10 %.1f, median %.1f, p90 %.1f, max %.1f" % (
        min(rates), q[0], statistics.median(rates), q[-1], max(rates)))
    step = int(a.bucket_ms * 1e6)
    print("bytes copied per %.0f ms of the window (GB/s):" % a.bucket_ms)
    row = []
    for b0 in range(lo, hi, step):
        b1 = b0 + step
        n = 0.0
        for s, e, _, by in copies:
            o = min(e, b1) - max(s, b0)
            if o > 0:
                n += by * o / max(1, e - s)
        row.append("%.0f" % (n / step))
    print("  " + " ".join(row))
    inside = [(s, e, n) for s, e, n in kernels if e > lo and s < hi]
    kt = sum(min(e, hi) - max(s, lo) for s, e, _ in inside)
    print("kernels in the window: %d, %.1f ms of kernel time" % (len(inside), ms(kt)))


if __name__ == "__main__":
    main()
