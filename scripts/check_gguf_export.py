#!/usr/bin/env python3
"""Checks a GGUF that `sgrt export-weights -o FILE.gguf --gguf-base BASE` wrote,
with ggml's own tools rather than sgrt's reader:

 1. gguf-py (PyPI `gguf`) reads it: every metadata entry of BASE in its order
    with the same value but general.file_type, BASE's tensors in its order and
    ggml shapes;
 2. with --f32 REF.gguf (the same export with --dtype f32): each F16 / BF16 /
    Q8_0 tensor is byte for byte gguf.quants.quantize of REF's values;
 3. when llama-cpp-python is installed (PyPI `llama-cpp-python`, built from
    source): llama.cpp's greedy chat answer to --prompt equals `sgrt run
    models/llama.lua --init-weights FILE --chat`'s.

Not run by CI (PyPI packages). Prints one line per check; exits 1 on a mismatch.

    ~/venv-peft/bin/python scripts/check_gguf_export.py --gguf merged.gguf \\
        --base ~/.cache/sgrt/SmolLM2-135M-Instruct.Q4_1.gguf [--f32 merged_f32.gguf]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM = "Answer briefly."


def field_value(f):
    return [bytes(f.parts[i]) for i in f.data]


def check_layout(out, base):
    keys = [k for k in base.fields if not k.startswith("GGUF.")]
    got = [k for k in out.fields if not k.startswith("GGUF.")]
    if keys != got:
        return f"metadata keys differ: {set(keys) ^ set(got)}"
    for k in keys:
        if k != "general.file_type" and field_value(base.fields[k]) != field_value(out.fields[k]):
            return f"metadata '{k}' differs"
    names = [(t.name, list(t.shape)) for t in base.tensors]
    if names != [(t.name, list(t.shape)) for t in out.tensors]:
        return "the tensor list (names, order, shapes) differs"
    return None


def check_encodings(out, ref):
    ref_t = {t.name: t for t in ref.tensors}
    compared = 0
    for t in out.tensors:
        if t.tensor_type not in (Q.F16, Q.BF16, Q.Q8_0):
            continue
        r = ref_t[t.name]
        if r.tensor_type != Q.F32:
            continue
        x = np.array(r.data, dtype=np.float32).reshape(-1, int(r.shape[0]))
        want = gguf.quants.quantize(x, t.tensor_type).reshape(-1).view(np.uint8)
        got = np.array(t.data).reshape(-1).view(np.uint8)
        if not np.array_equal(want, got):
            return None, f"{t.name}: {int((want != got).sum())} of {want.size} bytes differ from gguf-py's {t.tensor_type.name}"
        compared += 1
    return compared, None


def llama_cpp_child(path, prompt, tokens):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=256, n_threads=2, verbose=False)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    r = llm.create_chat_completion(messages=msgs, max_tokens=tokens, temperature=0.0, top_k=1)
    print(r["choices"][0]["message"]["content"].strip())


def llama_cpp_answer(path, prompt, tokens):
    """llama.cpp's answer, or None with why: run in a child process, which a crash inside llama.cpp ends."""
    cmd = [sys.executable, os.path.abspath(__file__), "--llama-cpp-child", "--gguf", path, "--base", "-",
           "--prompt", prompt, "--tokens", str(tokens)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"llama.cpp failed (exit {r.returncode}): {r.stderr.strip()[-200:]}"
    return r.stdout.strip(), None


def sgrt_answer(sgrt, path, prompt, tokens):
    cmd = [sgrt, "run", os.path.join(ROOT, "models", "llama.lua"), "--init-weights", path, "--chat", "--system", SYSTEM,
           "--prompt", prompt, "--tokens", str(tokens)]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()
    return "\n".join(l for l in lines if not l.startswith("prompt: ")).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--f32", help="the same export with --dtype f32")
    ap.add_argument("--sgrt", default=os.path.join(ROOT, "build", "tools", "sgrt"))
    ap.add_argument("--prompt", default='What does "lucid" mean?')
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--llama-cpp-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_cpp_child:
        return llama_cpp_child(args.gguf, args.prompt, args.tokens)
    out, base = gguf.GGUFReader(args.gguf), gguf.GGUFReader(args.base)
    failed = False
    err = check_layout(out, base)
    print(f"layout against the base: {err or 'ok'}")
    failed |= err is not None
    if args.f32:
        n, err = check_encodings(out, gguf.GGUFReader(args.f32))
        print(f"encodings against gguf-py: {err or f'ok ({n} tensors)'}")
        failed |= err is not None
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama.cpp: llama-cpp-python is not installed; skipped")
    else:
        a, err = llama_cpp_answer(args.gguf, args.prompt, args.tokens)
        b = sgrt_answer(args.sgrt, args.gguf, args.prompt, args.tokens)
        print(f"llama.cpp: {err or repr(a)}\nsgrt:      {b!r}\ngreedy answers: {'equal' if a == b else 'DIFFER'}")
        failed |= a != b
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
