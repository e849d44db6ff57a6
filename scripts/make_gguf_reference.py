#!/usr/bin/env python3
"""Independent reference for sgrt's GGUF reader (tests/test_gguf.cpp).

Needs the PyPI packages `gguf` (ggml's own gguf-py: GGUFWriter, GGUFReader,
gguf.quants) and `numpy`:  pip install gguf numpy
Run by hand from the repository root; the outputs are committed:

  tests/data/gguf/tiny_<type>.gguf   one small GGUF per supported tensor type,
                                     written by GGUFWriter: metadata of every
                                     value type, tensors of odd shapes, random data
  tests/data/gguf/reference.txt      what each file holds: metadata (type and the
                                     value's exact bytes as gguf-py packs them),
                                     tensors (type, ggml shape, offset, bytes) and
                                     where their dequantized values are in
  tests/data/gguf/expected.f32       gguf.quants.dequantize of every tensor, f32 LE
  tests/data/gguf/smollm2.txt        for the real SmolLM2-135M-Instruct.Q4_1.gguf
                                     (scripts/get_models.sh), when present: every
                                     metadata entry's type, length and CRC-32 of its
                                     bytes, every tensor's type, shape, offset and the
                                     CRC-32 and sum of its dequantized f32 values

Usage: scripts/make_gguf_reference.py [SMOLLM2.gguf]
(default: $SGRT_SMOLLM2_GGUF, else ${SGRT_CACHE:-~/.cache/sgrt}/SmolLM2-135M-Instruct.Q4_1.gguf)
"""
import os
import struct
import sys
import zlib
from importlib.metadata import version
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "gguf"
rng = np.random.default_rng(20261130)

# Block fields that hold f16 scales: (byte offset in the block) for each type;
# random bytes there are replaced by finite f16 values so the comparison is
# about the decoding, not about NaN payloads.
F16_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q4_K: [0, 2], Q.Q6_K: [208]}

# (numpy shape, i.e. ggml ne reversed) per tensor: odd row counts, 1- to 4-D.
SHAPES_32 = {"a": (5, 96), "b.weight": (2, 3, 64), "c": (3, 1, 2, 32), "d": (64,)}
SHAPES_256 = {"a": (3, 256), "b.weight": (2, 512)}


def metadata(w: gguf.GGUFWriter) -> None:
    """One entry of every value type, arrays of several, and a nested array."""
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_int32("t.i32_pos", 7)
    w.add_float32("t.f32", 1e-5)
    w.add_bool("t.bool", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.string", "héllo wörld ✓ \n\ttabs 🙂")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_uint64("t.u64_small", 42)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 3.141592653589793)
    w.add_array("t.strings", ["<unk>", "Ġthe", "", "日本語", "a b"])
    w.add_key_value("t.i32s", [1, -2, 2**31 - 1, -(2**31)], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("t.f32s", [0.5, -1.25, 1e30, 1e-40], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("t.f64s", [0.1, -2.5], V.ARRAY, sub_type=V.FLOAT64)
    w.add_key_value("t.u8s", [0, 255, 7], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.u16s", [1, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("t.i64s", [-1, 2**40], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("t.u32s", [3000000000, 1], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("t.bools", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("t.nested", [[1, 2], [3], ["x", "yz"]], V.ARRAY, sub_type=V.ARRAY)


def random_blocks(qtype: Q, n_elems: int) -> np.ndarray:
    """Random raw blocks, f16 scale fields finite."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_elems // block_elems, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        scale = rng.uniform(-2.0, 2.0, size=blocks.shape[0]).astype(np.float16)
        blocks[:, off:off + 2] = scale.view(np.uint8).reshape(-1, 2)
    return blocks


def tensor_data(qtype: Q, name: str, shape: tuple) -> np.ndarray:
    """Bytes of the tensor as stored, numpy shape (..., bytes per row)."""
    n = int(np.prod(shape))
    if qtype in (Q.F32, Q.F16, Q.BF16) and name == "d":
        # every bit pattern class: zeros, subnormals, infinities, NaNs, extremes
        bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
        raw = bits.view(np.uint8) if qtype == Q.F32 else bits.astype(np.uint16).view(np.uint8)
        specials = {Q.F32: [0, 0x80000000, 1, 0x7F800000, 0xFF800000, 0x7FC00001, 0x7F7FFFFF],
                    Q.F16: [0, 0x8000, 1, 0x3FF, 0x7C00, 0xFC00, 0x7E01, 0x7BFF],
                    Q.BF16: [0, 0x8000, 1, 0x7F80, 0xFF80, 0x7FC1, 0x7F7F]}[qtype]
        width = 4 if qtype == Q.F32 else 2
        for i, s in enumerate(specials):
            raw[i * width:(i + 1) * width] = np.frombuffer(int(s).to_bytes(width, "little"), np.uint8)
        return raw.reshape(shape[:-1] + (-1,))
    if qtype in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1) and name == "a":
        values = rng.normal(0.0, 1.0, size=shape).astype(np.float32)  # what a converter does
        return gguf.quants.quantize(values, qtype).view(np.uint8).reshape(shape[:-1] + (-1,))
    return random_blocks(qtype, n).reshape(shape[:-1] + (-1,))


def hexbytes(b: bytes) -> str:
    return "x" + b.hex()


def decoded(vtype: V, value) -> str:
    """A value as gguf-py's reader decodes it, one token per scalar."""
    if vtype == V.STRING:
        return hexbytes(value.encode() if isinstance(value, str) else bytes(value))
    if vtype == V.FLOAT32:
        return struct.pack("<f", value).hex()
    if vtype == V.FLOAT64:
        return struct.pack("<d", value).hex()
    return str(int(value))


def write_tiny(f, expected: list, qtype: Q) -> None:
    name = f"tiny_{qtype.name.lower()}.gguf"
    w = gguf.GGUFWriter(OUT / name, "sgrt-test")
    if qtype == Q.BF16:
        w.add_custom_alignment(64)  # a non-default alignment, in its own file
    metadata(w)
    shapes = SHAPES_256 if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else SHAPES_32
    tensors = []
    for tname, shape in shapes.items():
        raw = np.ascontiguousarray(tensor_data(qtype, tname, shape))
        w.add_tensor(tname, raw, raw_dtype=qtype)  # uint8 rows: gguf-py derives the shape
        tensors.append((tname, shape, raw))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What the file holds, read back with gguf-py's reader.
    r = gguf.GGUFReader(OUT / name)
    f.write(f"file {name} {len(r.fields) - 3} {len(r.tensors)}\n")  # less the 3 GGUF.* header fields
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        start = field.offset + 8 + len(key.encode()) + 4
        value = bytes(r.data[start:field.offset + sum(int(p.nbytes) for p in field.parts)])
        if field.types[0] != V.ARRAY:
            text = decoded(field.types[0], field.contents())
        elif field.types[1] == V.ARRAY:
            text = "nested"  # gguf-py's reader does not decode arrays of arrays
        else:
            items = field.contents()
            text = " ".join([str(int(field.types[1])), str(len(items))] + [decoded(field.types[1], v) for v in items])
        f.write(f"kv {key} {int(field.types[0])} {hexbytes(value)} {text}\n")
    for (tname, shape, raw), t in zip(tensors, r.tensors):
        assert t.name == tname
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        dims = ",".join(str(d) for d in reversed(shape))
        f.write(f"tensor {tname} {int(qtype)} {dims} {t.data_offset - r.data_offset} {t.n_bytes} "
                f"{sum(len(v) for v in expected)} {values.size}\n")
        expected.append(values)


def smollm2_path() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    if os.environ.get("SGRT_SMOLLM2_GGUF"):
        return Path(os.environ["SGRT_SMOLLM2_GGUF"])
    cache = Path(os.environ.get("SGRT_CACHE", Path.home() / ".cache" / "sgrt"))
    return cache / "SmolLM2-135M-Instruct.Q4_1.gguf"


def write_smollm2(path: Path) -> None:
    r = gguf.GGUFReader(path)
    with open(OUT / "smollm2.txt", "w") as f:
        f.write(f"# scripts/make_gguf_reference.py (gguf {version('gguf')}, numpy {version('numpy')}) "
                f"from {path.name}, {path.stat().st_size} bytes\n")
        f.write("# kv KEY TYPE ELEMTYPE COUNT CRC32(value bytes)\n")
        f.write("# tensor NAME TYPE NE0,NE1,.. OFFSET BYTES CRC32(dequantized f32 LE) SUM(f64)\n")
        for key, field in r.fields.items():
            if key.startswith("GGUF."):
                continue
            start = field.offset + 8 + len(key.encode()) + 4
            value = bytes(r.data[start:field.offset + sum(int(p.nbytes) for p in field.parts)])
            elem = int(field.types[1]) if len(field.types) > 1 else int(field.types[0])
            count = len(field.data) if field.types[0] == V.ARRAY else 1
            f.write(f"kv {key} {int(field.types[0])} {elem} {count} {zlib.crc32(value):08x}\n")
        for t in r.tensors:
            values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
            dims = ",".join(str(int(d)) for d in t.shape)  # gguf-py's t.shape is already in ggml order
            f.write(f"tensor {t.name} {int(t.tensor_type)} {dims} {t.data_offset - r.data_offset} {t.n_bytes} "
                    f"{zlib.crc32(values.tobytes()):08x} {float(values.astype(np.float64).sum())!r}\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    expected: list = []
    with open(OUT / "reference.txt", "w") as f:
        f.write(f"# scripts/make_gguf_reference.py (gguf {version('gguf')}, numpy {version('numpy')})\n")
        f.write("# quant ID NAME BLOCK_ELEMS BLOCK_BYTES (gguf.GGML_QUANT_SIZES)\n")
        f.write("# file NAME N_KV N_TENSORS\n")
        f.write("# kv KEY TYPE xVALUEBYTES DECODED (scalar: int | f32/f64 LE hex | xUTF8HEX; "
                "array: ELEMTYPE COUNT DECODED...; nested)\n")
        f.write("# tensor NAME TYPE NE0,NE1,.. OFFSET BYTES FIRST_EXPECTED COUNT (into expected.f32)\n")
        for qtype, (elems, nbytes) in gguf.GGML_QUANT_SIZES.items():
            f.write(f"quant {int(qtype)} {qtype.name} {elems} {nbytes}\n")
        for qtype in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K):
            write_tiny(f, expected, qtype)
    np.concatenate(expected).astype("<f4").tofile(OUT / "expected.f32")
    real = smollm2_path()
    if real.is_file():
        write_smollm2(real)
        print(f"wrote {OUT}/smollm2.txt from {real}")
    else:
        print(f"{real} not found (scripts/get_models.sh fetches it): smollm2.txt left as it is")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
