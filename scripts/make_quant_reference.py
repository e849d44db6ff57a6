#!/usr/bin/env python3
"""Test vectors for sgrt's MX and NVFP4 quantizers (tests/test_quant_reference.cpp)
from scripts/quant_reference.py: numpy and ml_dtypes' casts, not sgrt's code.

Needs: pip install numpy ml_dtypes
Run by hand from the repository root; the output is committed:

  tests/data/quant_reference.txt   one case per block of lines:
    case <name> <mx_e4m3 | mx_e5m2 | mx_e2m1 | nvfp4> <rows> <cols> <prev tensor scale, f32 bits>
    x <f32 bits of every element, row-major>
    scales <E8M0 / E4M3 block scale codes, [rows][blocks]>
    codes <element codes, row-major (E2M1: one per element)>
    ts <the NVFP4 tensor scale's f32 bits>  (nvfp4 only)
    eval <f32 bits of dequant(x) @ dequant(w)^T for the case's x and the case
          named w_<name>: what an nvfp4 qmatmul computes>  (nvfp4 x cases only)
  All numbers are hex.

The cases test the scale choice itself: random data whose rows span 2^-12 ..
2^12, heavy-tailed blocks where "four over six" picks 4 and others 6, amax on
and next to the power-of-two boundaries of the MX exponent, and blocks that are
all zero, subnormal only, or hold a NaN or an infinity; NVFP4 tensors that are
all zero (no previous tensor scale), subnormal only, or hold a NaN with a kept
previous scale.

Usage: scripts/make_quant_reference.py
"""
from pathlib import Path

import numpy as np

import quant_reference as ref

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "quant_reference.txt"
rng = np.random.default_rng(20261130)
F32 = np.float32


def hexs(a, dtype):
    return " ".join(format(int(v), "x") for v in np.asarray(a).astype(dtype).ravel())


def f32_bits(a):
    return hexs(np.asarray(a, F32).view(np.uint32), np.uint32)


def spread(rows, cols):
    """Rows of normal data with magnitudes 2^-12 .. 2^12."""
    x = rng.standard_normal((rows, cols)).astype(F32)
    return (x * np.ldexp(F32(1), rng.integers(-12, 13, size=(rows, 1)))).astype(F32)


def heavy(rows, cols):
    """Student-t (3 degrees of freedom): blocks with one large element."""
    return rng.standard_t(3, size=(rows, cols)).astype(F32)


def mx_edges():
    """Per block: amax exactly at, just below and just above fmt_max * 2^j."""
    x = rng.uniform(-0.5, 0.5, size=(6, 32)).astype(F32)
    for r, (fm, j) in enumerate([(448, 0), (448, -3), (6, 2), (57344, -20), (6, -1), (448, 5)]):
        x[r, r] = F32(fm * 2.0 ** j)
        x[r, r + 7] = np.nextafter(F32(fm * 2.0 ** j), F32(0))
    x[1, 9] = np.nextafter(F32(448 * 2.0 ** -3), F32(1e9))  # above: one exponent lower
    return x


def special_blocks(block):
    """Row r, block 0..5: normal, all zero, f32 subnormals only, NaN, inf, -inf."""
    x = rng.standard_normal((2, 6 * block)).astype(F32)
    x[:, block:2 * block] = 0
    x[:, 2 * block:3 * block] = (rng.standard_normal((2, block)) * 1e-40).astype(F32)
    x[0, 3 * block + 3] = np.nan
    x[1, 4 * block + 1] = np.inf
    x[0, 5 * block] = -np.inf
    return x


def tiny_scales():
    """Blocks whose E4M3 scale is an E4M3 subnormal, next to a block at the tensor's max."""
    x = rng.standard_normal((2, 48)).astype(F32)
    x[0, :16] *= F32(1000)
    x[:, 16:] *= F32(2.0 ** -10)
    return x


def main():
    lines = []

    def case(name, kind, x, prev=0.0, w=None):
        rows, cols = x.shape
        lines.append(f"case {name} {kind} {rows} {cols} {format(int(np.float32(prev).view(np.uint32)), 'x')}")
        lines.append("x " + f32_bits(x))
        if kind == "nvfp4":
            q, s, ts, back = ref.quantize_nvfp4(x, prev)
            lines.extend(["scales " + hexs(s, np.uint8), "codes " + hexs(q, np.uint8), "ts " + f32_bits([ts])])
            return back
        q, s = ref.quantize_mx(x, kind[3:])
        lines.extend(["scales " + hexs(s, np.uint8), "codes " + hexs(q, np.uint8)])

    for fmt in ("e4m3", "e5m2", "e2m1"):
        case("spread", "mx_" + fmt, spread(5, 70))
        case("edges", "mx_" + fmt, mx_edges())
        case("special", "mx_" + fmt, special_blocks(32))
    case("spread", "nvfp4", spread(5, 70))
    case("heavy", "nvfp4", heavy(8, 64))
    case("special", "nvfp4", special_blocks(16))
    case("tiny_scales", "nvfp4", tiny_scales())
    case("zero", "nvfp4", np.zeros((3, 20), F32))
    case("subnormal", "nvfp4", (rng.standard_normal((2, 32)) * 1e-40).astype(F32))
    nan = heavy(2, 32)
    nan[1, 5] = np.nan
    case("nan_kept", "nvfp4", nan, prev=0.25)
    # Eval: y = x w^T through two fresh quantizations (the stale scale of a
    # training step must not be used), for x and 4 x.
    w = heavy(6, 40)
    wb = case("w_eval", "nvfp4", w)
    x = spread(3, 40)
    for name, xi in (("eval", x), ("eval4", (x * F32(4)).astype(F32))):
        xb = case(name, "nvfp4", xi)
        lines.append("eval " + f32_bits((xb.astype(np.float64) @ wb.astype(np.float64).T).astype(F32)))
    OUT.write_text("# scripts/make_quant_reference.py (numpy + ml_dtypes); do not edit\n" + "\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
