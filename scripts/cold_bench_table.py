#!/usr/bin/env python3
"""Issue 10's table from the results of scripts/gpu-cold-bench.sh.

    python3 scripts/cold_bench_table.py RESULTS_DIR

Reads floors.json, disk-floor.txt, engine-<preset>-<i>.json/.jsonl (treni-top run
reports and sessions), engine-<preset>-mapped.json, hf-<preset>-<i>.json
(scripts/hf_peer.py), the page-cache-cold runs and bench-64x1024.json, and
prints Markdown: the floors, then one row per target with min/median/max,
the target, the ratio and the peer measured in the same run.
"""
import glob
import json
import os
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def session(path):
    ev = []
    try:
        with open(path) as f:
            for i, line in enumerate(f):
                if i == 0:
                    continue
                try:
                    ev.append(json.loads(line))
                except ValueError:
                    break
    except OSError:
        pass
    return ev


def mmm(xs, fmt="{:.0f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return "{} / {} / {}".format(fmt.format(min(xs)), fmt.format(statistics.median(xs)), fmt.format(max(xs)))


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def stage(run, name):
    for s in run.get("stages", []):
        if s["name"] == name:
            return s
    return None


def engine_run(res, stem):
    r = load(os.path.join(res, stem + ".json"))
    if not r or not r.get("runs"):
        return None
    run = r["runs"][-1]
    q = run.get("requests") or {}
    up = stage(run, "decoder_tensor_upload") or {}
    ci = stage(run, "cuda_init") or {}
    attrs = up.get("attrs") or {}
    out = {
        "first_token_ms": run.get("cold_total_ms") if run.get("cold_end") == "first_token" else None,
        "healthy_ms": run.get("healthy_ms"),
        "upload_ms": up.get("duration_ms"),
        "upload_gbps": attrs.get("gb_per_s"),
        # share of the bytes the in-place copiers carried (0 without them)
        "inplace_share": (attrs.get("inplace_bytes") or 0) / attrs["bytes"] if attrs.get("bytes") else None,
        "bytes": attrs.get("bytes"),
        "cuda_init_ms": ci.get("duration_ms"),
        "unattributed": run.get("unattributed_share"),
        "warm_ttft_ms": (q.get("warm_ttft_ms") or {}).get("median"),
        "itl_ms": (q.get("warm_itl_ms") or {}).get("median"),
        "stages": run.get("stages", []),
        "prompt_tokens": None,
    }
    ev = session(os.path.join(res, stem + ".jsonl"))
    healthy = next((e["t"] for e in ev if e.get("kind") == "marker" and e["marker"]["name"] == "healthy"), None)
    rss = [(e["t"], e["sample"]["values"]["rss_bytes"]) for e in ev
           if e.get("kind") == "sample" and "rss_bytes" in e["sample"].get("values", {})]
    if healthy is not None:
        after = [v for t, v in rss if t >= healthy]
        out["rss_after_load"] = after[0] if after else None
    # Warm-up goes on after healthy (background graphs, cuBLASLt on its own
    # thread, the release of the upload's page-locked memory): the RSS the
    # server keeps is the one after the background warmup stage has ended.
    # A run that ended before it (the in-place copiers' release waits for
    # a pause in the requests, or its deadline) has no such figure: its
    # RSS would still count the registered page cache.
    warm_end = max((e["stage"]["end"] for e in ev if e.get("kind") == "stage" and e["stage"].get("name") == "warmup"
                    and (e["stage"].get("attrs") or {}).get("kind") == "background"), default=None)
    if warm_end is not None:
        after = [v for t, v in rss if t >= warm_end]
        out["rss_after_warmup"] = after[0] if after else None
    out["rss_peak"] = max((v for _, v in rss), default=None)
    for e in ev:
        if e.get("kind") == "request" and e["request"].get("prompt_tokens"):
            out["prompt_tokens"] = e["request"]["prompt_tokens"]
            break
    return out


def hf_run(res, stem):
    r = load(os.path.join(res, stem + ".json"))
    if not r or "first_token_s" not in r:
        return None
    itl = sorted(r.get("itl_ms") or [])
    warm_itl = sorted(x for w in r.get("warm", []) for x in w["itl_ms"])
    return {
        "first_token_ms": 1000 * r["first_token_s"],
        "import_ms": 1000 * r["import_s"], "load_ms": 1000 * r["model_load_s"],
        "itl_ms": med(warm_itl) if warm_itl else med(itl),
        "warm_ttft_ms": med([w["ttft_ms"] for w in r.get("warm", [])]),
        "prompt_tokens": r.get("prompt_tokens"),
    }


def stage_end(e, name, kind=None):
    for s in e["stages"]:
        if s["name"] == name and (kind is None or (s.get("attrs") or {}).get("kind") == kind):
            return s["start_ms"] + s["duration_ms"]
    return None


def variants(res, p, eng):
    """The ENGINE_VARIANTS runs of preset p beside its default runs."""
    rows = [("default", eng)]
    for k in range(1, 20):
        try:
            name = open(os.path.join(res, "variant-%d.txt" % k)).read().strip()
        except OSError:
            break
        runs = [engine_run(res, "engine-%s-var%d-%d" % (p, k, i)) for i in range(1, 10)]
        rows.append((name, [r for r in runs if r]))
    if len(rows) == 1:
        return
    print("Variants, same call (min / median / max):\n")
    print("| variant | runs | first token (ms) | healthy (ms) | upload (GB/s) | upload ends (ms) | load warm-up ends (ms) | first_request (ms) | ITL b1 (ms) | warm TTFT (ms) |")
    print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
    for name, runs in rows:
        def fr(e):
            return (stage(e, "first_request") or {}).get("duration_ms")
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, len(runs), mmm([e["first_token_ms"] for e in runs]), mmm([e["healthy_ms"] for e in runs]),
            mmm([e["upload_gbps"] for e in runs], "{:.1f}"), mmm([stage_end(e, "decoder_tensor_upload") for e in runs]),
            mmm([stage_end(e, "warmup", "load") for e in runs]), mmm([fr(e) for e in runs], "{:.1f}"),
            mmm([e["itl_ms"] for e in runs], "{:.2f}"), mmm([e["warm_ttft_ms"] for e in runs], "{:.2f}")))
    print()


def probe_runs(path):
    """The list of reads scripts/disk-probe.py printed last into path, or []."""
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return []


def disk_read_ms(path):
    """The time scripts/disk-probe.py's first mode took to read the weights (ms), or None."""
    runs = probe_runs(path)
    return 1000 * runs[0]["seconds"] if runs and not runs[0]["errors"] else None


def disk_floor(res):
    """The disk read rates with the page cache cold: one stream a file and
    eight (disk-floor.txt, scripts/disk-probe.py ranges:1:8 ranges:8:8;
    disk.json in the results of earlier sessions)."""
    runs = probe_runs(os.path.join(res, "disk-floor.txt"))
    if not runs:
        return load(os.path.join(res, "disk.json")) or {}
    rate = [None if r["errors"] else r["gb_per_s"] for r in runs[:2]] + [None]
    return {"sequential_gb_per_s": rate[0], "parallel_gb_per_s": rate[1]}


def main():
    res = sys.argv[1]
    fl = load(os.path.join(res, "floors.json")) or {}
    fl = fl.get("floors") or fl  # treni-top doctor --floors --json nests them
    disk = disk_floor(res)
    presets = sorted({os.path.basename(p).split("-")[1] for p in glob.glob(os.path.join(res, "engine-*-1.json"))},
                     key=lambda p: (0, float(p[:-1])) if p[:-1].replace(".", "").isdigit() else (1, p))
    init_floor = (fl.get("cu_init_ms") or 0) + (fl.get("ctx_retain_ms") or 0)
    pinned = max(fl.get("pinned_h2d_gb_per_s") or 0, fl.get("registered_h2d_gb_per_s") or 0)
    d2d = fl.get("d2d_gb_per_s") or 0
    disk_bw = max(disk.get("sequential_gb_per_s") or 0, disk.get("parallel_gb_per_s") or 0)

    print("### Floors (%s)\n" % fl.get("device", "?"))
    print("| floor | measured |\n| --- | --: |")
    print("| cuInit + primary context | %.0f ms (%.0f + %.0f) |" % (init_floor, fl.get("cu_init_ms", 0), fl.get("ctx_retain_ms", 0)))
    print("| H2D pinned / registered / pageable | %.1f / %.1f / %.1f GB/s |" % (
        fl.get("pinned_h2d_gb_per_s", 0), fl.get("registered_h2d_gb_per_s", 0), fl.get("pageable_h2d_gb_per_s", 0)))
    print("| device copy (read + write) | %.0f GB/s |" % d2d)
    for r in fl.get("page_cache_read") or []:
        print("| page cache → memory, %d threads: alone / beside a pinned H2D copy (its rate then) | %.1f / %.1f GB/s (%.1f) |" % (
            r["threads"], r["gb_per_s"], r["beside_h2d_gb_per_s"], r["h2d_beside_reads_gb_per_s"]))
    rf = fl.get("registered_file")
    if rf:
        print("| the file registered in place (%.1f ms a GiB): H2D alone / beside %d readers (their rate then) | %.1f / %.1f GB/s (%.1f) |" % (
            rf["register_ms"] * (1 << 30) / rf["bytes"], rf["threads"], rf["gb_per_s"], rf["beside_reads_gb_per_s"], rf["reads_beside_gb_per_s"]))
        if rf.get("register_populated_ms"):
            print("| … a fresh mapping populated first (4 threads), then registered (ms a GiB) | %.1f, then %.1f |" % (
                rf["populate_ms"] * (1 << 30) / rf["bytes"], rf["register_populated_ms"] * (1 << 30) / rf["bytes"]))
    print("| disk read, page cache cold (1 stream / 8 streams) | %.2f / %.2f GB/s |" % (
        disk.get("sequential_gb_per_s") or 0, disk.get("parallel_gb_per_s") or 0))
    print()

    rows = []
    for p in presets:
        eng = [engine_run(res, "engine-%s-%d" % (p, i)) for i in range(1, 10)]
        eng = [e for e in eng if e]
        hf = [hf_run(res, "hf-%s-%d" % (p, i)) for i in range(1, 10)]
        hf = [h for h in hf if h]
        mapped = engine_run(res, "engine-%s-mapped" % p)
        if not eng:
            continue
        wbytes = eng[0]["bytes"] or 0
        upload_floor_ms = 1000 * wbytes / (pinned * 1e9) if pinned else None
        ft_floor = init_floor + upload_floor_ms if upload_floor_ms else None
        ft = [e["first_token_ms"] for e in eng]
        hft = [h["first_token_ms"] for h in hf]
        # Decode reads every weight once: at the device copy rate (which
        # counts read + write bytes), wbytes take wbytes / d2d.
        itl_floor = 1000 * wbytes / (d2d * 1e9) if d2d else None
        print("### Qwen3-%s-shaped, %.2f GB of bf16 weights: %d engine runs, %d HF runs (min / median / max)\n" % (p.upper(), wbytes / 1e9, len(eng), len(hf)))
        print("| metric | built-in engine | target | ratio | HF transformers (same run) | engine ÷ HF |")
        print("| --- | --: | --: | --: | --: | --: |")

        def ratio(x, y):
            return "%.2f×" % (x / y) if x and y else "—"
        # Issue 15's targets: the first token within 1.15× (4B) or 1.25×
        # (0.6B) of the floor, healthy within 1.10×.
        bound = {"4b": 1.15, "0.6b": 1.25}.get(p)
        target_ft = "≤ %.2f× floor (%.0f ms)" % (bound, ft_floor) if bound and ft_floor else "—"
        print("| process start → first streamed token (ms) | %s | %s | %s of floor | %s | %s |" % (
            mmm(ft), target_ft, ratio(med(ft), ft_floor), mmm(hft), "1 : %.1f" % (med(hft) / med(ft)) if hft and med(ft) else "—"))
        hl = [e["healthy_ms"] for e in eng]
        print("| process start → healthy (ms) | %s | %s | %s of floor | | |" % (
            mmm(hl), "≤ 1.10× floor" if ft_floor else "—", ratio(med(hl), ft_floor)))
        up = [e["upload_gbps"] for e in eng]
        share = med([e.get("inplace_share") for e in eng])
        print("| decoder_tensor_upload (GB/s; ms%s) | %s; %s%s | ≥ 80%% of %.1f | %s | | |" % (
            "; share in place" if share else "", mmm(up, "{:.1f}"), mmm([e["upload_ms"] for e in eng]),
            "; %.0f%%" % (100 * share) if share else "", pinned, "%.0f%%" % (100 * med(up) / pinned) if pinned and med(up) else "—"))
        if mapped:
            print("| … the mapped path in the same run (GB/s) | %.1f | | staged %s | | |" % (mapped["upload_gbps"] or 0, ratio(med(up), mapped["upload_gbps"])))
        itl = [e["itl_ms"] for e in eng]
        itl_t = "≤ 1.3× floor (%.2f ms)" % itl_floor if p == "4b" and itl_floor else ("≤ 1.0 ms" if p == "0.6b" else "—")
        print("| decode ITL, batch 1 (ms) | %s | %s | %s of floor | %s | %s |" % (
            mmm(itl, "{:.2f}"), itl_t, ratio(med(itl), itl_floor), mmm([h["itl_ms"] for h in hf], "{:.1f}"),
            "1 : %.1f" % (med([h["itl_ms"] for h in hf]) / med(itl)) if hf and med(itl) else "—"))
        wt = [e["warm_ttft_ms"] for e in eng]
        print("| warm TTFT, %s-token prompt (ms; engine over HTTP) | %s | %s | | %s | %s |" % (
            eng[0].get("prompt_tokens") or "?", mmm(wt, "{:.2f}"), "≤ 8" if p == "4b" else "—", mmm([h["warm_ttft_ms"] for h in hf], "{:.1f}"),
            "1 : %.1f" % (med([h["warm_ttft_ms"] for h in hf]) / med(wt)) if hf and med(wt) else "—"))
        rss = [e.get("rss_after_load") for e in eng]
        print("| RSS when healthy (MB) | %s | | | | |" % mmm([r / 1e6 if r else None for r in rss]))
        rss = [e.get("rss_after_warmup") for e in eng]
        done = sum(r is not None for r in rss)
        note = "" if done == len(rss) else " (%d of %d runs: the others ended before the background warm-up)" % (done, len(rss))
        print("| RSS after load and warm-up (MB) | %s%s | %s | | | |" % (mmm([r / 1e6 if r else None for r in rss]), note, "≤ 300" if p == "4b" else "—"))
        print("| unattributed share of the cold start | %s | ≤ 2%% | | | |" % mmm([100 * (e["unattributed"] or 0) for e in eng], "{:.1f}%"))
        cold = engine_run(res, "engine-%s-evicted" % p)
        hcold = hf_run(res, "hf-%s-evicted" % p)
        if cold:
            dfloor = 1000 * wbytes / (disk_bw * 1e9) if disk_bw else None
            print("| page cache cold: start → first token (ms) | %.0f | ≤ 1.10× disk read (%s ms) | %s of it | %s | %s |" % (
                cold["first_token_ms"] or 0, "%.0f" % dfloor if dfloor else "?", ratio(cold["first_token_ms"], dfloor),
                "%.0f" % hcold["first_token_ms"] if hcold else "—", "1 : %.1f" % (hcold["first_token_ms"] / cold["first_token_ms"]) if hcold and cold["first_token_ms"] else "—"))
            around = [disk_read_ms(os.path.join(res, "disk-%s-evicted.txt" % w)) for w in ("before", "after")]
            around = [a for a in around if a]
            if around:
                dm = sum(around) / len(around)
                print("| … against the disk reads just before and after it (%s ms) | | | %s of their mean | | |" % (
                    " and ".join("%.0f" % a for a in around), ratio(cold["first_token_ms"], dm)))
                if ft_floor:
                    print("| … against that disk read + the warm floor (%.0f ms; issue 15's definition) | | ≤ 1.10× | %s | | |" % (
                        dm + ft_floor, ratio(cold["first_token_ms"], dm + ft_floor)))
        print()
        # The stage table of the median run.
        mid = sorted(eng, key=lambda e: e["first_token_ms"] or 0)[len(eng) // 2]
        print("Stages of the median engine run (ms from process start):\n")
        print("| stage | start | duration | share | attrs |\n| --- | --: | --: | --: | --- |")
        for s in mid["stages"]:
            a = json.dumps(s.get("attrs") or {})
            if s["name"] not in ("decoder_tensor_upload", "warmup", "kernel_load"):
                a = a[:160]
            print("| %s | %.1f | %.1f | %.1f%% | %s |" % (s["name"], s["start_ms"], s["duration_ms"], 100 * (s.get("share") or 0), a.replace("|", "/")))
        print()
        variants(res, p, eng)
        if hf:
            print("HF transformers stages (median of %d): import %.0f ms, model load %.0f ms, first token %.0f ms\n" % (
                len(hf), med([h["import_ms"] for h in hf]), med([h["load_ms"] for h in hf]), med(hft)))

    b = load(os.path.join(res, "bench-64x1024.json"))
    if b:
        for w in b.get("workloads", []):
            for run in w.get("runs", []):
                m = run.get("metrics", run)
                tp = m.get("tpot_ms") or {}
                print("64 concurrent streams, input 1024 / output 128 (4B-shaped): %.0f output tok/s (target ≥ 5,000), TPOT p50 %s / p99 %s ms, failed %s\n" % (
                    m.get("output_tok_per_s") or 0, tp.get("p50"), tp.get("p99"), m.get("failed")))


if __name__ == "__main__":
    main()
