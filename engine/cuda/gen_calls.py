#!/usr/bin/env python3
"""Regenerates shim_calls.h from the function table in shim.h.

cgo cannot call C function pointers, so every entry of struct tt_cuda gets a
static inline caller tt_<name>(table, args...). Run from this folder:
    python3 gen_calls.py
"""
import re

h = open("shim.h").read()
body = h[h.index("typedef struct tt_cuda {"):h.index("} tt_cuda;")]
body = re.sub(r"\s*\n\s*", " ", body)
out = [
    "// Code generated from shim.h by gen_calls.py; DO NOT EDIT.",
    "// cgo cannot call C function pointers, so every table entry gets a",
    "// static inline caller.",
    "#ifndef TRENI_CUDA_CALLS_H",
    "#define TRENI_CUDA_CALLS_H",
    '#include "shim.h"',
    "",
]
for m in re.finditer(r"tt_CUresult \(\*(\w+)\)\(([^;]*)\);", body):
    name, args = m.group(1), m.group(2).strip()
    params = [] if args == "void" else [a.strip() for a in args.split(",")]
    decl = ["%s a%d" % (p, i) for i, p in enumerate(params)]
    names = ["a%d" % i for i in range(len(params))]
    out.append("static inline tt_CUresult tt_%s(tt_cuda *c%s) { return c->%s(%s); }"
               % (name, "".join(", " + d for d in decl), name, ", ".join(names)))
out += ["", "#endif", ""]
open("shim_calls.h", "w").write("\n".join(out))
