#!/usr/bin/env python3
"""Check treni-top's tokenizer against Hugging Face on the same directory.

Usage (on a machine with transformers installed, e.g. the GPU machine):

    treni-top model synth --arch qwen3 --preset tiny --out /tmp/q   # or any HF model dir
    treni-top model tokenize /tmp/q "Hello, world!" "It's 42 o'clock" \
        "<|im_start|>user\nhi<|im_end|>\n" --json > /tmp/q-ids.jsonl
    python3 engine/tokenizer/testdata/hf_tokenizer_check.py /tmp/q /tmp/q-ids.jsonl

The JSON file holds one object per line with "text" and "ids" (and
optionally "decoded"), as `treni-top model tokenize --json` prints them.
The script loads DIR with AutoTokenizer (and, when available, the bare
`tokenizers` library), encodes each text without adding special tokens,
and compares ids and decoded text. Exit status 0 when all match, 1 on any
mismatch, 2 on bad usage.
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, ids_file = sys.argv[1], sys.argv[2]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    print(f"loaded {type(tok).__name__} from {model_dir}: {len(tok)} tokens")
    raw = None
    try:
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    except Exception as e:  # the bare library is optional
        print(f"(tokenizers.Tokenizer not checked: {e})")

    cases = [json.loads(l) for l in open(ids_file, encoding="utf-8") if l.strip()]
    if not cases:
        print(f"{ids_file} holds no cases", file=sys.stderr)
        return 2
    bad = 0
    for c in cases:
        text, want = c["text"], c["ids"]
        got = tok.encode(text, add_special_tokens=False)
        ok = got == want
        if raw is not None:
            got_raw = raw.encode(text, add_special_tokens=False).ids
            ok = ok and got_raw == want
        dec = tok.decode(want, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if "decoded" in c and dec != c["decoded"]:
            ok = False
        print(f"{'ok  ' if ok else 'FAIL'} {text!r}: ids {got}" + ("" if ok else f" want {want}, decoded {dec!r}"))
        bad += not ok
    if hasattr(tok, "apply_chat_template") and tok.chat_template:
        s = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
        print(f"chat template renders: {s!r}")
    print(f"{len(cases) - bad}/{len(cases)} match")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
