#!/usr/bin/env python3
"""HF transformers as the cold-start peer of the built-in engine (issue 10).

One fresh process per cold run, as ../shared/docs/MACHINES.md describes the
peer: import transformers, load the tokenizer and the model (device_map
"cuda", bf16), and generate greedily with a streamer that timestamps every
token. Times are measured from the process's launch: the caller exports
HF_T0 (seconds since the epoch, taken just before exec, e.g. `date +%s.%N`);
without it, from the start of this interpreter's main module.

Prints one JSON object on stdout:
  import_s, tokenizer_s, model_load_s   (each stage's duration)
  first_token_s                         launch → first generated token
  itl_ms                                cold generation's inter-token gaps
  warm: [{ttft_ms, itl_ms: [...]}, ...] warm generations in the same process
  prompt_tokens, new_tokens, evicted

--evict drops the weight files from the page cache first (fsync + POSIX
fadvise DONTNEED), the same eviction treni-top's --evict-page-cache does.

--batch N --prompt-tokens P is the throughput peer instead: one greedy
`generate` of N prompts of P random token ids each (the same length, so no
padding), exactly --max-new-tokens new tokens each, after a warm-up
`generate` of the same shape and 2 new tokens (allocations, kernels);
prints batch, prompt_tokens, new_tokens, warmup_s, seconds (the timed
generate's wall time, synchronised) and output_tok_per_s.
"""
import argparse
import glob
import json
import os
import sys
import time

T0 = float(os.environ.get("HF_T0") or time.time())


def evict(model_dir):
    n = 0
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            n += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--prompt", help="the prompt (single-stream mode)")
    ap.add_argument("--batch", type=int, default=0, help="throughput mode: prompts generated together")
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="throughput mode: token ids a prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--warm", type=int, default=0, help="warm generations after the cold one")
    ap.add_argument("--evict", action="store_true")
    a = ap.parse_args()
    if not a.batch and not a.prompt:
        ap.error("give --prompt, or --batch N for the throughput mode")
    out = {"evicted": False}
    if a.evict:
        out["evicted_bytes"] = evict(a.model_dir)
        out["evicted"] = True

    t = time.time()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.streamers import BaseStreamer
    out["import_s"] = time.time() - t
    out["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}

    t = time.time()
    tok = AutoTokenizer.from_pretrained(a.model_dir)
    out["tokenizer_s"] = time.time() - t

    t = time.time()
    try:
        model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.bfloat16, device_map="cuda")
    except TypeError:  # older transformers
        model = AutoModelForCausalLM.from_pretrained(a.model_dir, torch_dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    out["model_load_s"] = time.time() - t

    if a.batch:
        return batch(model, a, out, torch)

    # The same chat framing the built-in engine's server applies (Qwen's
    # im_start/im_end), encoded without extra special tokens.
    text = "<|im_start|>user\n" + a.prompt + "<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids.to("cuda")
    out["prompt_tokens"] = int(ids.shape[1])

    class Clock(BaseStreamer):
        """Timestamps each generated token (the first put() is the prompt)."""

        def __init__(self):
            self.seen_prompt = False
            self.times = []

        def put(self, value):
            if not self.seen_prompt:
                self.seen_prompt = True
                return
            torch.cuda.synchronize()
            self.times.append(time.time())

        def end(self):
            pass

    def generate():
        c = Clock()
        start = time.time()
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=a.max_new_tokens, min_new_tokens=a.max_new_tokens,
                           do_sample=False, streamer=c, pad_token_id=0)
        return start, c.times

    start, times = generate()
    if not times:
        print(json.dumps({"error": "no token was generated"}))
        return 1
    out["first_token_s"] = times[0] - T0
    out["cold_ttft_ms"] = (times[0] - start) * 1000
    out["new_tokens"] = len(times)
    out["itl_ms"] = [(b - a_) * 1000 for a_, b in zip(times, times[1:])]
    out["warm"] = []
    for _ in range(a.warm):
        start, times = generate()
        out["warm"].append({"ttft_ms": (times[0] - start) * 1000,
                            "itl_ms": [(b - a_) * 1000 for a_, b in zip(times, times[1:])]})
    print(json.dumps(out))
    return 0


def batch(model, a, out, torch):
    """Throughput: one generate of a.batch prompts of a.prompt_tokens
    random ids (seeded), a.max_new_tokens each, after a warm-up generate."""
    g = torch.Generator().manual_seed(7)
    vocab = model.config.vocab_size
    ids = torch.randint(1000, vocab - 1000, (a.batch, a.prompt_tokens), generator=g).to("cuda")
    mask = torch.ones_like(ids)

    def run(n):
        torch.cuda.synchronize()
        t = time.time()
        with torch.inference_mode():
            y = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.time() - t, int(y.shape[1] - ids.shape[1])

    out["warmup_s"], _ = run(2)
    secs, new = run(a.max_new_tokens)
    out.update({"batch": a.batch, "prompt_tokens": a.prompt_tokens, "new_tokens": new, "seconds": secs,
                "output_tok_per_s": a.batch * new / secs})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
