#!/usr/bin/env python3
"""Compares NVFP4 block-scale rules on real tensors (docs/numerics.md, "NVFP4
block scales"): relative RMS error ||x - x'|| / ||x|| of quantize-dequantize
under each rule of scripts/quant_reference.py, per tensor and over all.

Needs: pip install numpy ml_dtypes gguf
Tensors: every 2-D weight of SmolLM2-135M-Instruct (scripts/get_models.sh),
dequantized from its GGUF, blocks along the stored rows (the contracting
dimension, as sgrt's GEMM uses them); optionally .npy files ([rows, cols] f32,
e.g. activations) given on the command line.

Usage: scripts/nvfp4_block_rules.py [--gguf FILE] [extra.npy ...]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quant_reference as ref  # noqa: E402


def gguf_weights(path):
    import gguf
    r = gguf.GGUFReader(path)
    for t in r.tensors:
        if len(t.shape) != 2:
            continue
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        yield t.name, x.reshape(-1, int(t.shape[0]))  # ggml's ne0 is the contiguous (row) length


def main():
    cache = os.environ.get("SGRT_CACHE", str(Path.home() / ".cache" / "sgrt"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.environ.get("SGRT_SMOLLM2_GGUF", cache + "/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("npy", nargs="*")
    ap.add_argument("--per-tensor", action="store_true", help="print every tensor's line")
    args = ap.parse_args()

    tensors = []
    if os.path.exists(args.gguf):
        tensors += list(gguf_weights(args.gguf))
    else:
        print(f"no GGUF at {args.gguf} (scripts/get_models.sh fetches it)", file=sys.stderr)
    tensors += [(p, np.load(p).astype(np.float32).reshape(-1, np.load(p).shape[-1])) for p in args.npy]
    if not tensors:
        sys.exit("nvfp4_block_rules.py: no tensors to measure")

    names = list(ref.RULES)
    sq = {n: 0.0 for n in names}
    total = 0.0
    wins = {n: 0 for n in names}
    raised = blocks = 0
    print("tensor".ljust(40) + "".join(n.rjust(15) for n in names))
    for name, x in tensors:
        norm = float(np.sum(x.astype(np.float64) ** 2))
        errs = {}
        for n in names:
            back = ref.quantize_nvfp4(x, rule=ref.RULES[n])[3]
            e = float(np.sum((x.astype(np.float64) - back) ** 2))
            sq[n] += e
            errs[n] = np.sqrt(e / norm)
        total += norm
        wins[min(errs, key=errs.get)] += 1
        b = ref.to_blocks(x, ref.NVFP4_BLOCK)
        ts = ref.tensor_scale(x, 0)
        a = ref.amax(b)
        raised += int(np.sum(ref.rule_raise(b, a, ts) != ref.rule_nearest(b, a, ts)))
        blocks += b.shape[0]
        if args.per_tensor:
            print(name[:40].ljust(40) + "".join(f"{errs[n]:15.5f}" for n in names))
    print(f"all {len(tensors)} tensors".ljust(40) + "".join(f"{np.sqrt(sq[n] / total):15.5f}" for n in names))
    print("tensors where lowest".ljust(40) + "".join(f"{wins[n]:15d}" for n in names))
    print(f"blocks the raise rule changes: {raised} of {blocks} ({100.0 * raised / blocks:.1f}%)")


if __name__ == "__main__":
    main()
