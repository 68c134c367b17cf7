#!/usr/bin/env python3
"""Checks a treni-top session recorded around `ollama serve` (scripts/e2e-ollama.sh
on CPU, scripts/gpu-ollama.sh on the GPU machine): stages from Ollama's own
log, the runner subprocess in the process tree, and treni-top's cold TTFT
against Ollama's own load_duration + prompt_eval_duration (the tolerance is
justified in scripts/e2e-ollama.sh). With --gpu it also checks that NVML
attributed GPU memory to Ollama's process tree.
Usage: ollama_session_check.py SESSION.jsonl [--gpu]"""
import json, sys

path = sys.argv[1]
gpu = "--gpu" in sys.argv[2:]
with open(path) as f:
    header = json.loads(f.readline())
    events = [json.loads(l) for l in f if l.strip()]

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

stages = {}
for e in events:
    if e["kind"] == "stage":
        s = e["stage"]
        stages.setdefault(s["name"], []).append(s)
from_log = sorted(n for n, ss in stages.items() if any(s.get("source", "").startswith("log:") for s in ss))
print("stages:", ", ".join(f"{n} ({max(s['end']-s['start'] for s in ss)/1e6:.1f} ms, {ss[0].get('source','')})" for n, ss in sorted(stages.items())))
if not from_log:
    fail("no stage came from Ollama's own log")

procs = [e["sample"]["values"].get("procs", 0) for e in events
         if e["kind"] == "sample" and e["sample"]["source"] == "process"]
max_procs = max(procs, default=0)
print(f"process tree: up to {max_procs:.0f} processes (ollama serve + runner)")
if max_procs < 2:
    fail("the runner subprocess never appeared in the process tree")

cold = None
for e in events:
    if e["kind"] == "request" and e["request"].get("phase") == "cold" and e["request"].get("done"):
        cold = e["request"]
if cold is None:
    fail("no finished cold request")
if cold.get("error"):
    fail("cold request failed: " + cold["error"])
timings = None
for e in events:
    m = e.get("marker") or {}
    if m.get("name") == "server_timings" and (m.get("attrs") or {}).get("label") == "cold_1":
        timings = m["attrs"]
if timings is None:
    fail("Ollama gave no load_duration/prompt_eval_duration for cold_1")

ours = cold["first_token"] / 1e6
theirs = timings["load_ms"] + timings["prompt_eval_ms"]
tol = 250.0
diff = ours - theirs
warm = [e["request"] for e in events if e["kind"] == "request" and e["request"].get("phase") == "warm" and e["request"].get("done") and not e["request"].get("error")]
warm_ttft = sorted(q["first_token"] / 1e6 for q in warm)
print(f"cold TTFT (treni-top, client side): {ours:9.1f} ms")
print(f"Ollama load_duration:               {timings['load_ms']:9.1f} ms")
print(f"Ollama prompt_eval_duration:        {timings['prompt_eval_ms']:9.1f} ms")
print(f"Ollama load + prompt_eval:          {theirs:9.1f} ms")
print(f"difference (ours - Ollama):         {diff:+9.1f} ms  (allowed -5 .. +{tol:.0f} ms)")
if warm_ttft:
    print(f"warm TTFT median over {len(warm_ttft)}: {warm_ttft[len(warm_ttft)//2]:.1f} ms; cold penalty x{ours / warm_ttft[len(warm_ttft)//2]:.1f}")
if diff < -5 or diff > tol:
    fail("cold TTFT disagrees with Ollama's own figures beyond the tolerance")
if gpu:
    proc_gpu = [v for e in events if e["kind"] == "sample" and e["sample"]["source"].startswith("gpu")
                for k, v in e["sample"]["values"].items() if k == "gpu_proc_mem_bytes"]
    peak = max(proc_gpu, default=0)
    print(f"GPU memory of Ollama's process tree (NVML): peak {peak/2**30:.2f} GiB over {len(proc_gpu)} samples")
    if peak <= 0:
        fail("NVML never attributed GPU memory to Ollama's process tree")
print("PASS")
