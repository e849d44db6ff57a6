#!/usr/bin/env python3
"""Independent reference for the encodings sgrt's GGUF export writes
(tests/test_gguf_export.cpp): f32 values and gguf-py's (ggml's own Python
package) Q8_0, F16 and BF16 encodings of them, as gguf.quants.quantize
computes them.

Needs the PyPI package `gguf` and numpy:  pip install gguf numpy
Run by hand from the repository root; the output is committed:

  tests/data/gguf/encode.bin   u32 rows | u32 cols | rows x cols f32 values |
                               their Q8_0 blocks | F16 halves | BF16 halves
                               (little endian, row-major, a row = whole blocks)

The values: normal rows of growing scale (1e-3 to 1e3), one row of zeros,
one with a lone outlier per block, one near F16's smallest normals (F16
subnormals and zeros), one whose elements are exact multiples of their
block's step plus a half (the quantizer's ties).
"""
import struct
from importlib.metadata import version
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "gguf" / "encode.bin"
ROWS, COLS = 16, 96


def values() -> np.ndarray:
    rng = np.random.default_rng(20261203)
    x = np.empty((ROWS, COLS), dtype=np.float32)
    for r in range(ROWS - 4):
        x[r] = rng.normal(0.0, 10.0 ** (r / 2 - 3), COLS)
    x[ROWS - 4] = 0.0
    x[ROWS - 3] = rng.normal(0.0, 0.01, COLS)
    x[ROWS - 3, ::32] = 40.0
    x[ROWS - 2] = rng.normal(0.0, 3e-5, COLS)
    # Blocks whose largest magnitude is 127 have the step d = 1: k + 0.5 are ties.
    x[ROWS - 1] = (rng.integers(-126, 126, COLS) + 0.5).astype(np.float32)
    x[ROWS - 1, ::32] = 127.0
    return x


def main() -> None:
    x = values()
    q8 = gguf.quants.quantize(x, Q.Q8_0)
    f16 = gguf.quants.quantize(x, Q.F16)
    bf16 = gguf.quants.quantize(x, Q.BF16)
    with open(OUT, "wb") as f:
        f.write(struct.pack("<II", ROWS, COLS))
        for a in (x, q8, f16, bf16):
            f.write(np.ascontiguousarray(a).tobytes())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes; gguf {version('gguf')})")


if __name__ == "__main__":
    main()
