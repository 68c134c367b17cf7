#!/usr/bin/env python3
"""Check that `treni-top model synth` checkpoints load in Hugging Face
transformers and give finite logits.

For every model directory on the command line: AutoModelForCausalLM
.from_pretrained(dir, dtype=float32), one forward pass over a fixed prompt,
assert every logit is finite and the shape is [1, T, vocab_size], check the
loaded weights match the files (embedding checksum), and print one line per
model. With --dump DIR, also write DIR/<name>.logits.json (prompt ids, last
position's logits, per-position argmax) so the built-in engine's CPU and CUDA
backends can be compared against transformers on the same random weights.

Exit status: 0 when every model passed, 1 otherwise.

    python3 engine/model/testdata/hf_load_check.py /tmp/synth/qwen3-tiny /tmp/synth/llama-tiny
"""
import argparse
import json
import math
import os
import sys
import time


def prompt_ids(path, vocab):
    """The fixed prompt: the chat-ish text through the model's own tokenizer
    when transformers can load it, else fixed ids below vocab."""
    text = "Hello, world! The quick brown fox jumps over the lazy dog."
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if ids and max(ids) < vocab:
            return ids, "tokenizer"
    except Exception as e:  # a tokenizer problem must not hide the model check
        print(f"  note: tokenizer did not load ({type(e).__name__}: {e}); using fixed ids", file=sys.stderr)
    return [(17 * i + 3) % vocab for i in range(16)], "fixed"


def check(path, dump_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    name = os.path.basename(os.path.normpath(path))
    cfg = AutoConfig.from_pretrained(path)
    t0 = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    load_s = time.perf_counter() - t0
    model.eval()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(dev)
    ids, src = prompt_ids(path, cfg.vocab_size)
    x = torch.tensor([ids], device=dev)
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    ok = True
    problems = []
    if tuple(logits.shape) != (1, len(ids), cfg.vocab_size):
        ok = False
        problems.append(f"logits shape {tuple(logits.shape)} != (1, {len(ids)}, {cfg.vocab_size})")
    finite = bool(torch.isfinite(logits).all())
    if not finite:
        ok = False
        problems.append("non-finite logits")
    # transformers reports missing/unexpected keys as warnings; a missing key
    # would have been freshly initialised, so compare a checksum of the
    # embedding as loaded with the file's bytes via safetensors.
    try:
        from safetensors import safe_open

        emb_name = "model.embed_tokens.weight"
        idx = os.path.join(path, "model.safetensors.index.json")
        fname = json.load(open(idx))["weight_map"][emb_name] if os.path.exists(idx) else "model.safetensors"
        with safe_open(os.path.join(path, fname), framework="pt") as f:
            want = f.get_tensor(emb_name).float()
        got = model.get_input_embeddings().weight.detach().float().cpu()
        if not torch.equal(want, got):
            ok = False
            problems.append("loaded embedding differs from the file")
    except ImportError:
        pass
    n_params = sum(p.numel() for p in model.parameters())
    last = logits[0, -1]
    print(
        f"{'PASS' if ok else 'FAIL'} {name}: {type(model).__name__} {n_params} params, "
        f"{cfg.num_hidden_layers} layers, vocab {cfg.vocab_size}, dtype float32 on {dev}, "
        f"prompt {len(ids)} ids ({src}), logits {tuple(logits.shape)} finite={finite} "
        f"|max|={logits.abs().max().item():.4g} mean={logits.mean().item():.4g} std={logits.std().item():.4g} "
        f"argmax(last)={int(last.argmax())} load {load_s:.2f}s"
        + ("" if ok else " :: " + "; ".join(problems))
    )
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        out = {
            "model": name,
            "transformers_class": type(model).__name__,
            "ids": ids,
            "last_logits": [float(v) for v in last.cpu()],
            "argmax": [int(v) for v in logits[0].argmax(-1).cpu()],
        }
        with open(os.path.join(dump_dir, name + ".logits.json"), "w") as f:
            json.dump(out, f)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="synth model directories")
    ap.add_argument("--dump", help="write <name>.logits.json reference outputs here")
    args = ap.parse_args()
    import torch
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, cuda {torch.cuda.is_available()}")
    failed = 0
    for d in args.dirs:
        try:
            if not check(d, args.dump):
                failed += 1
        except Exception as e:
            failed += 1
            print(f"FAIL {d}: {type(e).__name__}: {e}")
    print(f"{len(args.dirs) - failed}/{len(args.dirs)} passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
