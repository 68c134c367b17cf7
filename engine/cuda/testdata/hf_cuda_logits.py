#!/usr/bin/env python3
"""Dump transformers' logits at every prompt position of a synth checkpoint,
for the CUDA backend's check against transformers (TestGPUHFLogits in
engine/cuda/greedy_gpu_test.go, run by scripts/gpu-cuda-greedy.sh).

The model is loaded twice on the GPU: in bfloat16 (transformers' own bf16
numerics, the yardstick for what bf16 costs) and in float32 with TF32 off
(the reference). For each fixed prompt (token ids, no tokenizer) and dtype
it writes a raw little-endian float32 [T, vocab] file, and meta.json lists
the prompts and files.

    python3 engine/cuda/testdata/hf_cuda_logits.py MODEL_DIR OUT_DIR
"""
import json
import os
import sys
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def prompts(vocab):
    # Three prompts: short, one block and a bit, several blocks (KV block
    # size 16 in the Go test), ids spread over the whole vocabulary.
    lens = [7, 19, 45]
    return [[(i * 7919 + (k + 1) * 104729 + 31) % vocab for i in range(n)] for k, n in enumerate(lens)]


def write_f32(t, path):
    try:
        t.contiguous().numpy().astype("<f4").tofile(path)
    except (ImportError, RuntimeError):  # torch without numpy
        import struct

        v = t.reshape(-1).tolist()
        with open(path, "wb") as f:
            f.write(struct.pack("<%df" % len(v), *v))


def main():
    model_dir, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg = AutoConfig.from_pretrained(model_dir)
    ps = prompts(cfg.vocab_size)
    meta = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "vocab": cfg.vocab_size,
        "prompts": ps,
        "files": {},
    }
    for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        t0 = time.perf_counter()
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dt)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dt)
        model.to("cuda").eval()
        load = time.perf_counter() - t0
        for k, ids in enumerate(ps):
            with torch.no_grad():
                lg = model(input_ids=torch.tensor([ids], device="cuda")).logits[0].float().cpu()
            assert tuple(lg.shape) == (len(ids), cfg.vocab_size), lg.shape
            assert bool(torch.isfinite(lg).all()), "non-finite logits"
            fn = f"{name}_{k}.f32"
            write_f32(lg, os.path.join(out, fn))
            meta["files"][f"{name}/{k}"] = fn
        print(
            f"HF {os.path.basename(os.path.normpath(model_dir))} {name}: {type(model).__name__}, "
            f"attn {getattr(model.config, '_attn_implementation', '?')}, load+upload {load:.1f}s, "
            f"prompts {[len(p) for p in ps]}, last argmax {int(lg[-1].argmax())}",
            flush=True,
        )
        del model
        torch.cuda.empty_cache()
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f)


if __name__ == "__main__":
    main()
