#!/usr/bin/env python3
"""Issue 43's measurement of the built-in engine's sleep mode, driven over
HTTP against `treni-top serve` (scripts/gpu-sleep-wake.sh runs it):

  1. a cold start without sleep mode, page cache warm, after one not
     reported (first contact): process start (the
     process_start stage line) → first streamed token of a request sent as
     soon as the server listens, and its cuda_init stage;
  2. the same with --enable-sleep-mode --wake-on-request (the server the
     rest uses), then greedy text before any sleep and the process's GPU
     memory (nvidia-smi per process);
  3. ROUNDS level-1 rounds: POST /sleep?level=1 (its sleep stage line: the
     D2H copy, the host buffer's allocation), GPU memory asleep, then one
     streamed request that wakes the engine (--wake-on-request): the wake
     → first streamed token; then ROUNDS with POST /wake_up before the
     request (the wake alone); the same for level 2;
  4. CYCLES level-1 sleep/wake cycles with a 2-token request each: errors,
     and RSS and GPU memory every tenth cycle;
  5. results.json and a table (Markdown) against the floors of
     `treni-top doctor --floors --json` (FLOORS).

    python3 scripts/sleep_wake_bench.py BIN MODEL_DIR OUT_DIR FLOORS_JSON
Environment: ROUNDS (5), CYCLES (100), PORT (18600), DEVICE (cuda; cpu
for a dry run of this driver without a GPU).
"""
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

BIN, MODEL, OUT, FLOORS = sys.argv[1:5]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
CYCLES = int(os.environ.get("CYCLES", "100"))
PORT = int(os.environ.get("PORT", "18600"))
DEVICE = os.environ.get("DEVICE", "cuda")
PROMPT = ("Explain in one paragraph why the first request to a freshly started inference server is slower than "
          "the next ones, naming the caches, allocations and compilations that are warm afterwards.")
LOG = open(os.path.join(OUT, "bench.log"), "a")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, file=LOG, flush=True)


class Server:
    """A `treni-top serve` child: its stage lines as they come, by stage."""

    def __init__(self, name, port, *flags):
        self.port, self.lines, self.cv = port, [], threading.Condition()
        self.errlog = open(os.path.join(OUT, name + ".stderr"), "w")
        args = [BIN, "serve", "--model", MODEL, "--device", DEVICE, "--addr", "127.0.0.1:%d" % port,
                "--max-model-len", "4096", *flags]
        log("start", " ".join(args))
        self.p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.listening = False
        threading.Thread(target=self._read, daemon=True).start()
        with self.cv:
            if not self.cv.wait_for(lambda: self.listening or self.p.poll() is not None, timeout=120):
                raise SystemExit("serve did not listen within 120 s")
        if not self.listening:
            raise SystemExit("serve exited: see %s.stderr" % name)

    def _read(self):
        for line in self.p.stderr:
            self.errlog.write(line)
            self.errlog.flush()
            with self.cv:
                if "listening on http://" in line:
                    self.listening = True
                try:
                    j = json.loads(line)
                    if isinstance(j, dict) and "treni_stage" in j:
                        self.lines.append(j)
                except ValueError:
                    pass
                self.cv.notify_all()

    def stages(self, name):
        with self.cv:
            return [l for l in self.lines if l["stage"] == name]

    def wait_stages(self, name, n, timeout=30):
        with self.cv:
            self.cv.wait_for(lambda: len([l for l in self.lines if l["stage"] == name]) >= n, timeout=timeout)
        return self.stages(name)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()

    def post(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        t0 = time.perf_counter()
        c.request("POST", path)
        r = c.getresponse()
        body = r.read()
        ms = (time.perf_counter() - t0) * 1e3
        c.close()
        return r.status, ms, json.loads(body or b"{}")

    def stream(self, max_tokens=32):
        """A streamed greedy completion: (status, text, wall time of the
        first token, ms from sending to the first token)."""
        body = json.dumps({"model": os.path.basename(MODEL), "prompt": PROMPT, "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        text, first_wall, ttft = "", None, None
        if r.status != 200:
            return r.status, r.read().decode(errors="replace"), None, None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                if ch.get("text") and ttft is None:
                    ttft = (time.perf_counter() - t0) * 1e3
                    first_wall = time.time()
                text += ch.get("text", "")
            if "error" in ev:
                return 599, json.dumps(ev), None, None
        c.close()
        return 200, text, first_wall, ttft


def dur_ms(l):
    return (l["end_ns"] - l["start_ns"]) / 1e6


def gpu_mem(pid):
    """(this process's GPU memory MiB or None, the device's used MiB)."""
    proc, dev = None, None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        for l in out.splitlines():
            f = [x.strip() for x in l.split(",")]
            if len(f) == 2 and f[0] == str(pid):
                proc = float(f[1])
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        dev = float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
        log("nvidia-smi:", e)
    return proc, dev


def rss_mb(pid):
    for l in open("/proc/%d/status" % pid):
        if l.startswith("VmRSS:"):
            return int(l.split()[1]) / 1024
    return None


def cold(srv):
    status, text, first_wall, _ = srv.stream()
    if status != 200:
        raise SystemExit("cold request failed: %s %s" % (status, text))
    ps = srv.stages("process_start")[0]
    ci = srv.stages("cuda_init")
    return {"first_token_ms": first_wall * 1e3 - ps["start_ns"] / 1e6, "cuda_init_ms": dur_ms(ci[0]) if ci else 0.0, "text": text}


def mmm(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "n": len(xs)}


res = {"rounds": ROUNDS, "cycles": CYCLES}
floors = json.load(open(FLOORS))
res["floors"] = floors

# 1. The reference cold start, page cache warm (the synth wrote the files),
# after a first contact that is not reported (the tokenizer's cache, the
# driver's files), as scripts/gpu-cold-bench.sh does.
for name in ("cold-first-contact", "cold-plain"):
    ref = Server(name, PORT)
    res[name.replace("-", "_")] = cold(ref)
    ref.stop()
    log(name, res[name.replace("-", "_")])

# 2. The sleep-mode server.
# No prefix cache: every request prefills the whole prompt, so the greedy
# text after a wake (the cache is emptied by a sleep) must be the same bits.
srv = Server("sleep", PORT + 1, "--enable-sleep-mode", "--wake-on-request", "--prefix-cache=false")
res["cold_sleep_mode"] = cold(srv)
want = res["cold_sleep_mode"]["text"]
if DEVICE == "cuda":
    srv.wait_stages("warmup", 2)  # the background warm-up's line (a sleep would wait for it)
status, text, _, _ = srv.stream()
res["greedy_before"] = text
res["gpu_awake"] = gpu_mem(srv.p.pid)
res["rss_awake_mb"] = rss_mb(srv.p.pid)
mismatch = []


def check(text, what):
    if text != res["greedy_before"]:
        mismatch.append(what)
        log("MISMATCH", what, repr(text[:80]), "vs", repr(res["greedy_before"][:80]))


# 3. Rounds. A server scaled to zero sleeps for seconds or more before a
# request wakes it: the measured rounds stay asleep PAUSE seconds first.
# The back-to-back rounds wake at once, and the pause sweep shows how the
# wake's copy depends on the time since the sleep gave its memory back.


def round_(level, how, pause, first=False):
    n_sleep = len(srv.stages("sleep"))
    st, http_ms, body = srv.post("/sleep?level=%d" % level)
    slept = time.perf_counter()
    if st != 200:
        raise SystemExit("sleep failed: %s %s" % (st, body))
    sl = srv.wait_stages("sleep", n_sleep + 1)[-1]
    row = {"pause_s": pause, "sleep_http_ms": http_ms, "sleep_ms": dur_ms(sl), "sleep_attrs": sl["attrs"]}
    if first:
        row["gpu_asleep"] = gpu_mem(srv.p.pid)
        row["rss_asleep_mb"] = rss_mb(srv.p.pid)
    time.sleep(max(0.0, pause - (time.perf_counter() - slept)))
    n_wr = len(srv.stages("weights_restore"))
    wake_ms = 0.0
    if how == "explicit":
        st, wake_ms, body = srv.post("/wake_up")
        if st != 200:
            raise SystemExit("wake failed: %s %s" % (st, body))
    st, text, _, ttft = srv.stream()
    if st != 200:
        raise SystemExit("request after sleep failed: %s %s" % (st, text))
    row["wake_http_ms"], row["ttft_ms"] = wake_ms, ttft
    row["wake_to_first_token_ms"] = wake_ms + ttft
    wr = srv.wait_stages("weights_restore", n_wr + 1)[-1]
    kv = srv.stages("kv_alloc")[-1]
    row["weights_restore_ms"], row["weights_restore_attrs"] = dur_ms(wr), wr["attrs"]
    row["kv_alloc_ms"], row["kv_alloc_attrs"] = dur_ms(kv), kv["attrs"]
    gc = [l for l in srv.stages("graph_capture") if l["attrs"].get("graphs_kept") is not None]
    row["graphs_kept"] = gc[-1]["attrs"].get("graphs_kept") if gc else 0
    check(text, "level %d %s pause %.3f" % (level, how, pause))
    log("level", level, how, json.dumps(row))
    return row


PAUSE = float(os.environ.get("PAUSE", "0.5"))
plan = [("level1_request", 1, "request", PAUSE), ("level1_explicit", 1, "explicit", PAUSE),
        ("level1_back_to_back", 1, "request", 0.0),
        ("level2_request", 2, "request", PAUSE), ("level2_explicit", 2, "explicit", PAUSE)]
for key, level, how, pause in plan:
    res[key] = [round_(level, how, pause, first=(i == 0 and how == "request" and pause > 0)) for i in range(ROUNDS)]
res["pause_sweep"] = [round_(1, "explicit", p) for p in (0.0, 0.01, 0.025, 0.05, 0.1, 0.25) for _ in range(2)]

# 4. Cycles.
errors, samples = 0, []
for i in range(CYCLES):
    try:
        st1, _, _ = srv.post("/sleep?level=1")
        st2, _, _ = srv.post("/wake_up")
        st3, text, _, _ = srv.stream(max_tokens=2)
        if (st1, st2, st3) != (200, 200, 200):
            errors += 1
            log("cycle", i, "status", st1, st2, st3, text[:200])
    except Exception as e:  # a broken connection is an error of the cycle
        errors += 1
        log("cycle", i, "error", e)
    if i % 10 == 0 or i == CYCLES - 1:
        samples.append({"cycle": i + 1, "rss_mb": rss_mb(srv.p.pid), "gpu": gpu_mem(srv.p.pid)})
status, text, _, _ = srv.stream()
check(text, "after %d cycles" % CYCLES)
res["cycles_errors"], res["cycles_samples"] = errors, samples
res["greedy_mismatches"] = mismatch
srv.stop()
json.dump(res, open(os.path.join(OUT, "results.json"), "w"), indent=1)

# 5. The table.
f = floors.get("floors", floors)
h2d, d2h = f.get("pinned_h2d_gb_per_s"), f.get("pinned_d2h_gb_per_s")
wbytes = res["level1_request"][0]["sleep_attrs"].get("weights_bytes", 0)
fl_h2d = wbytes / (h2d * 1e9) * 1e3 if h2d else None
fl_d2h = wbytes / (d2h * 1e9) * 1e3 if d2h else None
cold_net = res["cold_plain"]["first_token_ms"] - res["cold_plain"]["cuda_init_ms"]


def fmt(m):
    return "—" if m is None else "%.1f / %.1f / %.1f (n=%d)" % (m["min"], m["median"], m["max"], m["n"])


def ratio(x, fl):
    return "—" if x is None or not fl else "%.2f×" % (x / fl)


l1 = res["level1_request"] + res["level1_explicit"] + res["level1_back_to_back"]
sleep1 = mmm([r["sleep_ms"] for r in l1 if r["sleep_attrs"].get("host_reused")])
first_sleep = res["level1_request"][0]["sleep_attrs"]
w1 = mmm([r["wake_to_first_token_ms"] for r in res["level1_request"]])
w1e = mmm([r["wake_to_first_token_ms"] for r in res["level1_explicit"]])
w1b = mmm([r["wake_to_first_token_ms"] for r in res["level1_back_to_back"]])
w2 = mmm([r["wake_to_first_token_ms"] for r in res["level2_request"]])
w2e = mmm([r["wake_to_first_token_ms"] for r in res["level2_explicit"]])
print()
print("| measure | min / median / max ms | floor or reference | ratio | target |")
print("| --- | --- | --- | --- | --- |")
print("| level-1 wake → first streamed token (the request wakes it, %g s after the sleep) | %s | weights %.2f GB ÷ pinned H2D %.1f GB/s = %.1f ms | %s | ≤ 1.20× |" % (
    PAUSE, fmt(w1), wbytes / 1e9, h2d or 0, fl_h2d or 0, ratio(w1 and w1["median"], fl_h2d)))
print("| level-1 POST /wake_up + request → first token (%g s after) | %s | same | %s | |" % (PAUSE, fmt(w1e), ratio(w1e and w1e["median"], fl_h2d)))
print("| level-1 wake → first token, the request right after the sleep | %s | same | %s | |" % (fmt(w1b), ratio(w1b and w1b["median"], fl_h2d)))
sweep = {}
for r in res["pause_sweep"]:
    sweep.setdefault(r["pause_s"], []).append(r["weights_restore_attrs"].get("gb_per_s", 0))
print("| level-1 weights_restore GB/s by time asleep (s: GB/s of each round) | %s | pinned H2D %.1f GB/s | | |" % (
    "; ".join("%g: %s" % (p, ", ".join("%.1f" % g for g in v)) for p, v in sorted(sweep.items())), h2d or 0))
print("| level-1 sleep (host buffer reused) | %s | weights ÷ pinned D2H %.1f GB/s = %.1f ms | %s | ≤ 1.20× |" % (
    fmt(sleep1), d2h or 0, fl_d2h or 0, ratio(sleep1 and sleep1["median"], fl_d2h)))
print("| level-1 first sleep (makes the host copy) | %.1f | host copy made and filled in %.1f ms, of which page-locking %.1f ms | | |" % (
    res["level1_request"][0]["sleep_ms"], first_sleep.get("host_alloc_ms", 0), first_sleep.get("host_register_ms", 0)))
print("| level-2 wake → first streamed token (the request wakes it, %g s after the sleep) | %s | cold start %.1f − cuda_init %.1f = %.1f ms | %s | ≤ 1.15× |" % (
    PAUSE, fmt(w2), res["cold_plain"]["first_token_ms"], res["cold_plain"]["cuda_init_ms"], cold_net, ratio(w2 and w2["median"], cold_net)))
print("| level-2 POST /wake_up + request → first token | %s | same | %s | |" % (fmt(w2e), ratio(w2e and w2e["median"], cold_net)))
print("| cold start with sleep mode (process → first token) | %.1f | without %.1f | | |" % (
    res["cold_sleep_mode"]["first_token_ms"], res["cold_plain"]["first_token_ms"]))
ga, gs1, gs2 = res["gpu_awake"], res["level1_request"][0]["gpu_asleep"], res["level2_request"][0]["gpu_asleep"]
print("| GPU memory, this process (nvidia-smi), MiB: awake / level 1 / level 2 | %s / %s / %s | device used: %s / %s / %s | | weights and KV gone |" % (
    ga[0], gs1[0], gs2[0], ga[1], gs1[1], gs2[1]))
kept = first_sleep
print("| what stays asleep, known to the engine | scratch %.1f MiB, norms %.2f MiB, cuBLASLt workspace %.1f MiB, %d graphs | the rest: context, module, driver | | |" % (
    kept.get("kept_step_scratch_bytes", 0) / 2**20, kept.get("kept_norms_bytes", 0) / 2**20,
    kept.get("kept_cublaslt_workspace_bytes", 0) / 2**20, kept.get("graphs_kept", 0)))
print("| RSS MB: awake / level-1 asleep / level-2 asleep | %.0f / %.0f / %.0f | | | |" % (
    res["rss_awake_mb"], res["level1_request"][0]["rss_asleep_mb"], res["level2_request"][0]["rss_asleep_mb"]))
s0, s1 = samples[0], samples[-1]
print("| %d level-1 cycles (sleep, wake, 2-token request, back to back): errors; RSS MB and GPU MiB, cycle %d → %d | %d errors; RSS %.0f → %.0f; GPU %s → %s | | | 0 errors, flat |" % (
    CYCLES, s0["cycle"], s1["cycle"], errors, s0["rss_mb"], s1["rss_mb"], s0["gpu"][0], s1["gpu"][0]))
print("| greedy text after every wake identical to before | %s | | | identical |" % (
    "yes (%d wakes)" % (5 * ROUNDS + 12 + CYCLES) if not mismatch else "NO: " + ", ".join(mismatch)))
print("| graphs kept across a wake (none captured again) | %s | | | |" % (res["level1_request"][-1]["graphs_kept"]))
