#!/usr/bin/env python3
"""Mixed load against a running `treni-top serve`, for scripts/soak.sh.

For --seconds it runs, side by side:
  streams    clients each sending streamed chat completions (some with
             logit_bias, min_p or repetition_penalty, some not streamed),
             one request in three hung up after a few chunks;
  malformed  one client sending requests the server must refuse with a
             given 4xx (bad JSON, wrong types, unknown model, a context
             too long, out-of-vocabulary logit_bias, a wrong method, bytes
             that are not HTTP);
  stallers   clients sending a request head and a few bytes of its body
             (Content-Length or chunked), then nothing: the server must
             answer 408 once its --body-timeout has passed, and close;
  metrics    one GET /metrics a second;
  sampler    the server's RSS and open descriptors every --every seconds,
             from /proc/PID.
Then it waits for the server to go idle (nothing running or waiting, no KV
block used) and writes a JSON summary to --out: the counts, every sample,
and the final reading. Only the standard library: it runs where the
server runs.
"""
import argparse
import http.client
import json
import os
import random
import socket
import threading
import time

PROMPTS = [
    "Write one sentence about the sea.",
    "List three colours.",
    "What is a cold start?",
    "Count from one to ten.",
    "Describe a quiet morning in a city.",
    "Say hello in two languages.",
]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}
        self.errors = []

    def add(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n

    def error(self, key, what):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + 1
            if len(self.errors) < 50:
                self.errors.append(f"{key}: {what}")


def proc_reading(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


def metrics(host, port):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read().decode()
        if resp.status != 200:
            raise RuntimeError(f"/metrics answered {resp.status}")
    finally:
        conn.close()
    out = {}
    for line in body.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        base = name.split("{", 1)[0]
        if "finished_reason" in name:
            base += "{" + name.split("finished_reason=", 1)[1].split("}")[0].strip('"') + "}"
        try:
            out[base] = out.get(base, 0) + float(value)
        except ValueError:
            pass
    return out


def stream_client(i, a, host, port, stop, st):
    rng = random.Random(1000 + i)
    while not stop.is_set():
        hang = rng.random() < 1 / 3
        stream = hang or rng.random() < 0.85
        body = {
            "model": a.model,
            "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
            "max_tokens": rng.randint(8, a.max_tokens),
            "temperature": rng.choice([0, 0.7, 1.0]),
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        r = rng.random()
        if r < 0.1:
            body["logit_bias"] = {str(rng.randrange(0, 256)): rng.choice([-50, 5, 20])}
        elif r < 0.2:
            body["min_p"] = 0.05
            body["repetition_penalty"] = 1.2
        kind = "hangup" if hang else ("stream" if stream else "plain")
        conn = http.client.HTTPConnection(host, port, timeout=600)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                st.error(kind + "_error", f"status {resp.status}: {resp.read()[:200]!r}")
                continue
            if not stream:
                obj = json.loads(resp.read())
                if obj["choices"][0]["finish_reason"] in ("stop", "length") and obj["usage"]["completion_tokens"] >= 1:
                    st.add("plain_ok")
                else:
                    st.error("plain_error", f"answer {obj}")
                continue
            after = rng.randint(1, 4)
            chunks, finish, done, usage = 0, None, False, None
            while True:
                line = resp.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                obj = json.loads(payload)
                if "error" in obj:
                    st.error(kind + "_error", f"error event {obj}")
                    break
                for ch in obj.get("choices", []):
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
                if obj.get("usage"):
                    usage = obj["usage"]
                chunks += 1
                if hang and chunks >= after:
                    # Hang up mid-stream: the socket goes away under the
                    # server's next write.
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    conn.sock.close()
                    st.add("hangup_done")
                    break
            if hang:
                if chunks < after:
                    st.add("hangup_finished_first")  # a short answer ended first
                continue
            if done and finish in ("stop", "length") and usage and usage["completion_tokens"] >= 1:
                st.add("stream_ok")
            else:
                st.error("stream_error", f"done {done}, finish {finish}, usage {usage}, {chunks} chunks")
        except Exception as e:  # noqa: BLE001 - every failure is counted
            if hang:
                st.add("hangup_done")
            else:
                st.error(kind + "_error", repr(e))
        finally:
            conn.close()


def raw_exchange(host, port, data, timeout=120):
    """Sends data on a fresh connection and returns the status of the
    answer (0 when none came) and whether the server then closed."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(data)
        buf = b""
        while b"\r\n" not in buf:
            part = s.recv(4096)
            if not part:
                return 0, True
            buf += part
        status = int(buf.split(b" ", 2)[1])
        closed = False
        while True:
            part = s.recv(65536)
            if not part:
                closed = True
                break
        return status, closed
    except socket.timeout:
        return 0, False
    finally:
        s.close()


def malformed_client(a, host, port, stop, st):
    m = a.model
    too_long = json.dumps({"model": m, "prompt": "hi", "max_tokens": 10**6})
    cases = [
        ("POST", "/v1/completions", '{"model":', "application/json", 400),
        ("POST", "/v1/chat/completions", json.dumps({"model": m, "messages": "hi"}), "application/json", 400),
        ("POST", "/v1/completions", json.dumps({"model": "nope", "prompt": "hi"}), "application/json", 404),
        ("POST", "/v1/completions", too_long, "application/json", 400),
        ("POST", "/v1/completions", json.dumps({"model": m, "prompt": "hi", "logit_bias": {"99999999": 1}}), "application/json", 400),
        ("POST", "/v1/completions", json.dumps({"model": m, "prompt": "hi", "min_p": 2}), "application/json", 400),
        ("POST", "/v1/completions", json.dumps({"model": m, "prompt": "hi", "repetition_penalty": 0}), "application/json", 400),
        ("POST", "/v1/completions", json.dumps({"model": m, "prompt": "hi", "temperature": "hot"}), "application/json", 400),
        ("POST", "/v1/completions", "model=x", "application/x-www-form-urlencoded", 415),
        ("GET", "/v1/completions", None, None, 405),
        ("POST", "/v1/chat/completions", json.dumps({"model": m, "messages": [{"role": "wizard", "content": "hi"}]}), "application/json", 400),
    ]
    rng = random.Random(7)
    while not stop.is_set():
        if rng.random() < 0.1:
            status, _ = raw_exchange(host, port, b"THIS IS NOT HTTP\r\n\r\n", timeout=30)
            if status == 400:
                st.add("malformed_ok")
            else:
                st.error("malformed_error", f"not HTTP: status {status}")
        else:
            method, path, body, ctype, want = rng.choice(cases)
            conn = http.client.HTTPConnection(host, port, timeout=60)
            try:
                headers = {"Content-Type": ctype} if ctype else {}
                conn.request(method, path, body, headers)
                resp = conn.getresponse()
                payload = resp.read()
                err = json.loads(payload).get("error", {}) if payload.startswith(b"{") else {}
                if resp.status == want and err.get("message"):
                    st.add("malformed_ok")
                else:
                    st.error("malformed_error", f"{method} {path} {body!r:.80}: {resp.status} {payload[:160]!r}, want {want}")
            except Exception as e:  # noqa: BLE001
                st.error("malformed_error", repr(e))
            finally:
                conn.close()
        stop.wait(0.2)


def staller(i, a, host, port, stop, st):
    rng = random.Random(50 + i)
    while not stop.is_set():
        body = json.dumps({"model": a.model, "prompt": "hello", "max_tokens": 4}).encode()
        if rng.random() < 0.5:
            head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            data = head + body[:7]
        else:
            head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            data = head + b"7\r\n" + body[:7] + b"\r\n"
        t0 = time.monotonic()
        try:
            status, closed = raw_exchange(host, port, data, timeout=a.body_timeout * 4 + 30)
        except Exception as e:  # noqa: BLE001
            st.error("stalled_error", repr(e))
            continue
        if status == 408 and closed:
            st.add("stalled_408")
            st.add("stalled_wait_ms", int((time.monotonic() - t0) * 1000))
        else:
            st.error("stalled_error", f"status {status}, closed {closed}")


def metrics_poller(host, port, stop, st, last):
    while not stop.is_set():
        try:
            last.update(metrics(host, port))
            st.add("metrics_ok")
        except Exception as e:  # noqa: BLE001
            st.error("metrics_error", repr(e))
        stop.wait(1)


def sampler(a, host, port, stop, samples, t0, last):
    while True:
        rss, fds = proc_reading(a.pid)
        samples.append({"t": round(time.monotonic() - t0, 1), "rss": rss, "fds": fds,
                        "kv_used": last.get("treni_kv_blocks_used"), "conns": last.get("treni_http_connections_open")})
        if stop.wait(a.every):
            return


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--stallers", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--body-timeout", type=float, default=30)
    p.add_argument("--every", type=float, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    st, stop, stop_sampler = Stats(), threading.Event(), threading.Event()
    samples, last = [], {}
    t0 = time.monotonic()
    threads = [threading.Thread(target=sampler, args=(a, host, port, stop_sampler, samples, t0, last))]
    threads += [threading.Thread(target=stream_client, args=(i, a, host, port, stop, st)) for i in range(a.streams)]
    threads += [threading.Thread(target=staller, args=(i, a, host, port, stop, st)) for i in range(a.stallers)]
    threads += [threading.Thread(target=malformed_client, args=(a, host, port, stop, st)),
                threading.Thread(target=metrics_poller, args=(host, port, stop, st, last))]
    for t in threads:
        t.start()
    stop.wait(a.seconds)
    stop.set()
    for t in threads[1:]:
        t.join()
    load_end = time.monotonic() - t0
    # Idle: nothing running or waiting, no KV block held, only the poll's
    # own connection open.
    idle = {}
    for _ in range(600):
        idle = metrics(host, port)
        if (idle.get("treni_num_requests_running", 1) == 0 and idle.get("treni_num_requests_waiting", 1) == 0
                and idle.get("treni_kv_blocks_used", 1) == 0 and idle.get("treni_http_connections_open", 2) <= 1):
            break
        time.sleep(0.1)
    time.sleep(1)  # the poll's connection closes on the server's side too
    stop_sampler.set()
    threads[0].join()
    rss, fds = proc_reading(a.pid)
    out = {"seconds": a.seconds, "load_end_s": round(load_end, 1), "counts": st.c, "errors": st.errors,
           "samples": samples, "final": {"rss": rss, "fds": fds, "metrics": idle}}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
