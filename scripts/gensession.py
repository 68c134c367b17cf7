#!/usr/bin/env python3
"""Generate a large session file shaped like a long `treni-top run`, for the
memory and speed figures of report, replay and diff
(scripts/import-bench.sh, docs/BENCHMARKS.md "Import and report of large
logs").

    scripts/gensession.py EVENTS OUT

Five cold runs of a CUDA server, each with its launch, stages, healthy
marker, a cold request and warm requests of 200 tokens, and then samples
(GPU every 10 ms while cold and 100 ms after, process tree and page cache)
and log lines until the file holds EVENTS events: most of a long session is
samples and log lines, as a recorded one is. Nothing here is a real run.
"""
import json
import sys

MS = 1_000_000
STAGES = [("runtime_init", 0, 120), ("cuda_init", 120, 410), ("page_cache", 130, 900), ("tensor_index_build", 410, 440),
          ("decoder_tensor_upload", 440, 1400), ("kv_alloc", 1400, 1460), ("kernel_load", 1460, 1900), ("http_ready", 1900, 1950)]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gensession.py EVENTS OUT")
    total = int(sys.argv[1])
    header = {"format": "treni-top-session", "version": "1.1", "tool_version": "gensession", "created": "2026-11-22T03:00:00Z",
              "host": {"hostname": "bench", "os": "linux", "arch": "amd64", "cpus": 16}, "gpus": [{"index": 0, "name": "NVIDIA H200"}],
              "target": {"kind": "builtin", "server_kind": "treni", "command": ["treni-top", "serve", "--model", "demo"]},
              "model_files": [{"path": "/models/demo/model.safetensors", "bytes": 8_000_000_000}]}
    n = 0
    runs = 5
    per_run = total // runs
    with open(sys.argv[2], "w", buffering=1 << 20) as f:
        def emit(e):
            nonlocal n
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
            n += 1
        f.write(json.dumps(header, separators=(",", ":")) + "\n")
        t = 0
        for run in range(runs):
            start = t
            emit({"t": t, "kind": "marker", "run": run, "marker": {"name": "run_start"}})
            emit({"t": t, "kind": "process", "run": run, "process": {"action": "start", "pid": 1000 + run, "server_kind": "treni"}})
            for name, a, b in STAGES:
                emit({"t": start + b * MS, "kind": "stage", "run": run, "stage": {"name": name, "start": start + a * MS, "end": start + b * MS,
                      "source": "engine", "attrs": {"bytes": 8e9, "gb_per_s": 24.5}}})
            emit({"t": start + 1950 * MS, "kind": "marker", "run": run, "marker": {"name": "healthy", "attrs": {"url": "http://127.0.0.1:8080"}}})
            sent = start + 1960 * MS
            for i in range(21):
                tokens = [(40 + 4 * k) * MS for k in range(200)]
                req = {"id": "r%d-%d" % (run, i), "label": "cold_1" if i == 0 else "warm_%d" % i, "phase": "cold" if i == 0 else "warm",
                       "endpoint": "chat", "sent": sent, "first_byte": 30 * MS, "first_event": 35 * MS, "first_token": tokens[0],
                       "tokens": tokens, "end": tokens[-1] + MS, "prompt_tokens": 12, "completion_tokens": 200, "status": 200, "done": True}
                emit({"t": sent + tokens[-1] + MS, "kind": "request", "run": run, "request": req})
                sent += 900 * MS
            t = sent
            i = 0
            while n < per_run * (run + 1):
                step = 10 * MS if t - start < 30_000 * MS else 100 * MS
                t += step
                i += 1
                emit({"t": t, "kind": "sample", "run": run, "sample": {"source": "gpu0", "values": {
                    "gpu_mem_used_bytes": 60e9 + i, "gpu_util_pct": 97, "gpu_power_w": 512.5, "pcie_rx_bytes_per_s": 1.2e9, "pcie_tx_bytes_per_s": 1.1e7,
                    "gpu_sm_clock_mhz": 1980}}})
                emit({"t": t, "kind": "sample", "run": run, "sample": {"source": "process", "values": {
                    "rss_bytes": 7.1e9 + i, "cpu_pct": 101.5, "read_bytes": 8e9, "procs": 3}}})
                if i % 10 == 0:
                    emit({"t": t, "kind": "sample", "run": run, "sample": {"source": "pagecache", "values": {
                        "weights_resident_bytes": 8e9, "weights_total_bytes": 8e9, "sys_cached_bytes": 2e10}}})
                emit({"t": t, "kind": "log", "run": run, "log": {"stream": "stderr", "pid": 1000 + run,
                      "text": "2026/11/22 03:00:%02d.%06d serve: request %d done: 200 tokens in 812 ms (prefill 12 tokens, 246 tok/s)" % (i % 60, i, i)}})
            emit({"t": t, "kind": "process", "run": run, "process": {"action": "exit", "pid": 1000 + run, "expected": True}})
            t += 1000 * MS
        emit({"t": t, "kind": "marker", "marker": {"name": "session_end", "attrs": {"events": n, "dropped": 0}}})


if __name__ == "__main__":
    main()
