"""A minimal ctypes binding of sgrt's C API (runtime/include/sgrt/sgrt.h) for
the reference scripts: load a checkpoint that `sgrt train --checkpoint DIR`
wrote, set inputs, run a program, read an output. Needs numpy and the shared
library (`cmake --build build --target sgrt_shared`: build/runtime/libsgrt.so).
The CPU thread count is read from SGRT_NUM_THREADS when the library first runs.
"""
import ctypes
import os

import numpy as np

DEFAULT_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "runtime", "libsgrt.so")
_F32, _I32 = 0, 7  # sgrt_dtype values
_MAX_RANK = 8


class _TensorInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int), ("shape", ctypes.c_int64 * _MAX_RANK),
                ("bytes", ctypes.c_size_t)]


class Session:
    """An sgrt session on the CPU holding a checkpoint's model and weights."""

    def __init__(self, checkpoint, lib=DEFAULT_LIB):
        self.lib = ctypes.CDLL(os.path.abspath(lib))
        self.lib.sgrt_last_error.restype = ctypes.c_char_p
        self.s = ctypes.c_void_p()
        self._ok(self.lib.sgrt_create(ctypes.byref(self.s)), "sgrt_create")
        self._ok(self.lib.sgrt_load_file(self.s, os.path.join(checkpoint, "model.sg").encode(), b"cpu"), "load")
        step = ctypes.c_int64()
        self._ok(self.lib.sgrt_load_checkpoint(self.s, checkpoint.encode(), ctypes.byref(step)), "load_checkpoint")
        self.step = step.value

    def _ok(self, status, what):
        if status != 0:
            raise RuntimeError(f"sgrt {what}: {self.lib.sgrt_last_error().decode()}")

    def info(self, name):
        """(numpy dtype, shape) of an input, output or metric."""
        t = _TensorInfo()
        self._ok(self.lib.sgrt_tensor(self.s, name.encode(), ctypes.byref(t)), f"tensor {name}")
        dtype = {_F32: np.float32, _I32: np.int32}[t.dtype]
        return dtype, tuple(t.shape[:t.rank])

    def set_input(self, name, value):
        dtype, shape = self.info(name)
        a = np.ascontiguousarray(value, dtype=dtype).reshape(shape)
        dims = (ctypes.c_int64 * len(shape))(*shape)
        code = _F32 if dtype == np.float32 else _I32
        self._ok(self.lib.sgrt_set_input(self.s, name.encode(), code, dims, len(shape),
                                         a.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(a.nbytes)), f"set {name}")

    def run(self, program):
        self._ok(self.lib.sgrt_run(self.s, program.encode()), program)

    def output(self, name):
        dtype, shape = self.info(name)
        a = np.empty(shape, dtype=dtype)
        self._ok(self.lib.sgrt_get_output(self.s, name.encode(), a.ctypes.data_as(ctypes.c_void_p),
                                          ctypes.c_size_t(a.nbytes)), f"get {name}")
        return a

    def loss(self):
        v = ctypes.c_float()
        self._ok(self.lib.sgrt_get_metric(self.s, b"loss", ctypes.byref(v)), "loss")
        return v.value

    def close(self):
        if self.s:
            self.lib.sgrt_destroy(self.s)
            self.s = ctypes.c_void_p()
