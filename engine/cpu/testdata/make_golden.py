#!/usr/bin/env python3
"""Golden logits for the CPU backend, from Hugging Face transformers.

For each architecture this writes engine/cpu/testdata/golden_<arch>.json:
for three fixed prompts (token ids below), the top-8 logits (ids and values)
at every prompt position, and 32 greedy tokens with the top two logits of
each greedy step. The Go test (engine/cpu/golden_test.go) regenerates the
same synth checkpoint with synth.Write and the same seed, checks that its
safetensors bytes have the sha256 recorded here, and compares.

The checkpoints are synth "tiny" presets made by the Go binary; the exact
flags (keep them in sync with goldenSpecs in golden_test.go):

    treni-top model synth --arch qwen3 --preset tiny --seed 4242 --dtype bf16 --out DIR/qwen3
    treni-top model synth --arch qwen2 --preset tiny --seed 4242 --dtype f16  --out DIR/qwen2
    treni-top model synth --arch llama --preset tiny --seed 4242 --dtype f32  --out DIR/llama

Run on the GPU machine (any machine with torch and transformers works; the
model runs in float32, on CUDA when available, with TF32 off):

    make build                      # here: bin/treni-top
    python3 engine/cpu/testdata/make_golden.py --treni-top bin/treni-top \
        --out engine/cpu/testdata

or, with checkpoints already made by the commands above:

    python3 engine/cpu/testdata/make_golden.py --root DIR --out engine/cpu/testdata

Then commit engine/cpu/testdata/golden_{qwen3,qwen2,llama}.json.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

SEED = 4242
PRESET = "tiny"
SPECS = [("qwen3", "bf16"), ("qwen2", "f16"), ("llama", "f32")]
TOPK = 8
GREEDY = 32

# Fixed prompts, as token ids (all below 4000, inside the tiny presets'
# vocabulary of the trained 4096-entry tokenizer).
PROMPTS = [
    [969, 1245, 425, 2957, 1625, 1964, 637, 372, 275],
    [84, 1647, 2253, 3762, 1188, 3281, 3137, 244, 912, 2134, 2201, 1478, 1136, 3196, 710, 3389, 437],
    [1075, 881, 3865, 3801, 108, 3398, 2627, 3307, 1069, 3281, 1116, 795, 678, 1272, 1189, 2571,
     3555, 3000, 3938, 3503, 3478, 3607, 1528, 358, 3463, 2484, 1385, 2754, 1591, 2075, 1022, 731,
     1016, 1942, 1149, 368, 3871, 3831, 3353, 3548],
]


def sha256_files(d):
    out = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".safetensors"):
            h = hashlib.sha256()
            with open(os.path.join(d, name), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[name] = h.hexdigest()
    return out


def load(d, torch, transformers):
    kw = dict(attn_implementation="eager")
    try:  # transformers 5 spells it dtype, 4 torch_dtype
        m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **kw)
    except TypeError:
        m = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, **kw)
    return m.float().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--treni-top", help="path of a treni-top binary to make the synth checkpoints with")
    ap.add_argument("--root", help="directory holding qwen3/ qwen2/ llama/ synth checkpoints already made")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    args = ap.parse_args()
    if not args.treni_top and not args.root:
        ap.error("give --treni-top BIN or --root DIR")

    import torch
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    root = args.root or tempfile.mkdtemp(prefix="treni-golden-")
    for arch, dtype in SPECS:
        d = os.path.join(root, arch)
        if args.treni_top:
            cmd = [args.treni_top, "model", "synth", "--arch", arch, "--preset", PRESET,
                   "--seed", str(SEED), "--dtype", dtype, "--out", d, "--force"]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        model = load(d, torch, transformers).to(dev)
        vocab = model.config.vocab_size
        prompts = []
        with torch.no_grad():
            for p in PROMPTS:
                if max(p) >= vocab:
                    sys.exit(f"{arch}: prompt id {max(p)} >= vocab {vocab}")
                ids = torch.tensor([p], device=dev)
                logits = model(ids).logits[0].float()
                top = torch.topk(logits, TOPK, dim=-1)
                # Greedy without a KV cache: every step is a full forward of
                # the growing sequence, the plainest possible reference.
                seq = list(p)
                greedy, g_ids, g_vals = [], [], []
                for _ in range(GREEDY):
                    last = model(torch.tensor([seq], device=dev)).logits[0, -1].float()
                    t2 = torch.topk(last, 2)
                    tok = int(t2.indices[0])
                    greedy.append(tok)
                    g_ids.append([int(i) for i in t2.indices])
                    g_vals.append([float(v) for v in t2.values])
                    seq.append(tok)
                prompts.append({
                    "tokens": p,
                    "top_ids": top.indices.tolist(),
                    "top_logits": top.values.tolist(),
                    "greedy": greedy,
                    "greedy_top2_ids": g_ids,
                    "greedy_top2_logits": g_vals,
                })
        out = {
            "format": "treni-top-cpu-golden-v1",
            "arch": arch,
            "preset": PRESET,
            "seed": SEED,
            "dtype": dtype,
            "vocab_size": vocab,
            "safetensors_sha256": sha256_files(d),
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "device": dev if dev == "cpu" else torch.cuda.get_device_name(0),
            "topk": TOPK,
            "prompts": prompts,
        }
        path = os.path.join(args.out, f"golden_{arch}.json")
        with open(path, "w") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)", flush=True)


if __name__ == "__main__":
    main()
