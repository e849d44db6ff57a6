"""Block-scaled quantization written from the formulas (docs/numerics.md) with
numpy and ml_dtypes' casts: the independent reference for sgrt's MX and NVFP4
quantizers (kernels/cpu/quantize.cpp). Needs: pip install numpy ml_dtypes

Imported by scripts/make_quant_reference.py (test vectors) and
scripts/nvfp4_block_rules.py (the block-scale rule comparison). Vectorised over
blocks: x is viewed as [blocks, block size], zero-padded (zeros change no
block's amax or error).
"""
import numpy as np
import ml_dtypes as md

F32 = np.float32
E4M3_MAX, E2M1_MAX = 448.0, 6.0
MX_BLOCK, NVFP4_BLOCK = 32, 16
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}
ML_TYPE = {"e4m3": md.float8_e4m3fn, "e5m2": md.float8_e5m2, "e2m1": md.float4_e2m1fn}


def cast(x, fmt):
    """float32 -> the nearest-even value of `fmt`, saturating at its max. A NaN
    stays NaN, except in E2M1, which has none: +6 (as the CUDA toolkit's cvt)."""
    m = FMT_MAX[fmt]
    x = np.asarray(x, F32)
    if fmt == "e2m1":
        x = np.where(np.isnan(x), F32(m), x)
    return np.clip(x, -m, m).astype(ML_TYPE[fmt]).astype(F32)


def code(v, fmt):
    """Bit patterns of representable values (E2M1: 4 bits); NaN as the canonical 0x7F."""
    v = np.asarray(v, F32)
    c = v.astype(ML_TYPE[fmt]).view(np.uint8)
    return c & 0xF if fmt == "e2m1" else np.where(np.isnan(v), np.uint8(0x7F), c).astype(np.uint8)


def to_blocks(x, size):
    """[rows, cols] -> [rows * nb, size], zero-padded."""
    rows, cols = x.shape
    nb = -(-cols // size)
    p = np.zeros((rows, nb * size), F32)
    p[:, :cols] = x
    return p.reshape(rows * nb, size)


def from_blocks(b, rows, cols):
    return b.reshape(rows, -1)[:, :cols]


def amax(b):
    """Per-block max |x|, NaN if the block holds a NaN."""
    return np.where(np.isnan(b).any(axis=1), F32(np.nan), np.max(np.abs(b), axis=1)).astype(F32)


# MX (OCP MX v1.0 layout, sgrt's scale choice): a block of 32 with a finite,
# non-zero amax gets the E8M0 scale 2^-e, e = floor(log2(fmt_max / amax)) clamped
# to [-126, 127], so no element saturates; an all-zero block 2^0; a block holding
# a NaN or an infinity the NaN scale 0xFF (OCP MX v1.0 §6.3). Elements are
# x * 2^e cast to the format, e = 0 in a NaN-scaled block (its decode is NaN).
# floor(log2(q)) from frexp of the f64 quotient: the exact quotient of two f32s is
# never within 2^-48 of a power of two without being one, so rounding to f64 keeps
# the floor.
def quantize_mx(x, fmt):
    """-> (element codes [rows, cols], E8M0 codes [rows, nb])."""
    rows, cols = x.shape
    b = to_blocks(x, MX_BLOCK)
    a = amax(b)
    ok = np.isfinite(a) & (a > 0)
    q = np.float64(FMT_MAX[fmt]) / np.where(ok, a, F32(1)).astype(np.float64)
    e = np.where(ok, np.clip(np.frexp(q)[1] - 1, -126, 127), 0)
    s = np.where(np.isfinite(a), 127 - e, 0xFF).astype(np.uint8)
    elems = cast(b * np.ldexp(F32(1), e).astype(F32)[:, None], fmt)
    return from_blocks(code(elems, fmt), rows, cols), s.reshape(rows, -1)


# NVFP4 (NVIDIA's two-level scaling): an FP32 tensor scale ts = amax / (6 * 256)
# (256, not E4M3's 448: room for four over six's 1.5x larger block scale),
# at least 2^-118 (so 1 / (s * ts) stays finite), kept from `prev` when the
# tensor's amax is 0, inf or NaN (1 when there is no usable previous one); per
# block of 16 an E4M3 scale s; elements x / (s * ts) cast to E2M1 (saturating).
MIN_TS = F32(2.0 ** -118)
SIX_SCALE_MAX = 256.0


def tensor_scale(x, prev):
    a = np.max(np.abs(x)) if not np.isnan(x).any() else np.nan
    if not np.isfinite(a) or a == 0:
        return F32(prev) if prev > 0 and np.isfinite(prev) else F32(1)
    return max(F32(a) / F32(E2M1_MAX * SIX_SCALE_MAX), MIN_TS)


def mult(s, ts):
    """Per-block element multiplier 1 / (s * ts); 0 for a zero scale."""
    d = (s * ts).astype(F32)
    return np.where(d > 0, F32(1) / np.where(d > 0, d, F32(1)), F32(0)).astype(F32)


def encode(b, s, ts):
    """Blocks b with scale values s -> E2M1 values."""
    return cast(b * mult(s, ts)[:, None], "e2m1")


def block_sse(b, a, s, ts):
    """Per block: the sum of ((x - x') * 2^k)^2, 2^k putting amax in [1, 2), in f32
    and in element order: the quantity sgrt's backends compare, rounded as they do."""
    k = np.clip(-(np.frexp(np.where(a > 0, a, F32(1)))[1] - 1), -126, 127)
    p = np.ldexp(F32(1), k).astype(F32)
    unit = ((s * ts).astype(F32) * p).astype(F32)
    back = encode(b, s, ts) * unit[:, None]
    d = (b * p[:, None]).astype(F32) - back
    sse = np.zeros(b.shape[0], F32)
    for i in range(b.shape[1]):
        sse = sse + d[:, i] * d[:, i]
    return sse


def next_e4m3(s):
    """The next E4M3 value above s (s < 448)."""
    return (s.astype(md.float8_e4m3fn).view(np.uint8) + 1).astype(np.uint8).view(md.float8_e4m3fn).astype(F32)


# Block-scale rules: (blocks, amax, ts) -> E4M3 scale values.
def rule_nearest(b, a, ts):
    """NVIDIA's recipe: amax / (6 ts) rounded to nearest E4M3; elements saturate."""
    return cast(a / (F32(E2M1_MAX) * ts), "e4m3")


def rule_raise(b, a, ts):
    """Nearest, then one E4M3 code up while an element would saturate."""
    s = rule_nearest(b, a, ts)
    while True:
        up = (a * mult(s, ts) > E2M1_MAX) & (s < E4M3_MAX)
        if not up.any():
            return s
        s = np.where(up, next_e4m3(np.where(up, s, F32(0))), s)


def rule_four_over_six(b, a, ts):
    """"Four over six" (Cook et al., 2025): map the block's amax to 6 or to 4,
    whichever gives the block the smaller error (6 on a tie)."""
    s6, s4 = rule_nearest(b, a, ts), cast(a / (F32(4) * ts), "e4m3")
    with np.errstate(invalid="ignore"):
        return np.where(block_sse(b, a, s4, ts) < block_sse(b, a, s6, ts), s4, s6)


RULES = {"nearest": rule_nearest, "raise": rule_raise, "four_over_six": rule_four_over_six}


def quantize_nvfp4(x, prev_ts=0.0, rule=rule_four_over_six):
    """-> (E2M1 codes [rows, cols], E4M3 codes [rows, nb], ts, dequantized x)."""
    rows, cols = x.shape
    ts = tensor_scale(x, prev_ts)
    b = to_blocks(x, NVFP4_BLOCK)
    s = rule(b, amax(b), ts).astype(F32)
    e = encode(b, s, ts)
    back = e * s[:, None] * ts
    return (from_blocks(code(e, "e2m1"), rows, cols), code(s, "e4m3").reshape(rows, -1), ts,
            from_blocks(back, rows, cols))
