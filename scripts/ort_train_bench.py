#!/usr/bin/env python3
"""The Fashion-MNIST MLP's training step (784-H-10, ReLU, cross-entropy, AdamW) in
ONNX Runtime training, timed as make_gpt_reference.py --bench mlp times PyTorch's:
one JSON line with the median step. bench/train.cpp runs it beside PyTorch.

Needs onnxruntime-training from PyPI (CPU wheel for CPython 3.11): scripts/setup_ort.sh
installs it into a venv under ${SGRT_CACHE:-$HOME/.cache/sgrt}/ort-venv, and
bench_train runs that venv's interpreter when it exists.

    ~/.cache/sgrt/ort-venv/bin/python scripts/ort_train_bench.py --threads 1 --steps 30
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module, Optimizer

# onnxruntime-training 1.19 (its last release) reads models up to IR version 10.
IR_VERSION = 9


def mlp_model(batch, hidden, rng):
    """logits = relu(x W1^T + b1) W2^T + b2, weights as in make_gpt_reference.py."""
    w1 = (rng.standard_normal((hidden, 784)) * 0.03).astype(np.float32)
    w2 = (rng.standard_normal((10, hidden)) * 0.03).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "w1"), (np.zeros(hidden, np.float32), "b1"), (w2, "w2"), (np.zeros(10, np.float32), "b2"))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 784])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup-steps", type=int, default=1)
    cfg = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as d:
        artifacts.generate_artifacts(mlp_model(cfg.batch, cfg.hidden, rng), requires_grad=["w1", "b1", "w2", "b2"],
                                     loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=d)
        so = ort.SessionOptions()
        so.intra_op_num_threads = cfg.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
        module = Module(os.path.join(d, "training_model.onnx"), state, os.path.join(d, "eval_model.onnx"),
                        device="cpu", session_options=so)
        opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
        opt.set_learning_rate(1e-3)
        module.train()
        x = rng.random((cfg.batch, 784), dtype=np.float32)
        y = rng.integers(0, 10, cfg.batch).astype(np.int64)
        times = []
        for i in range(cfg.warmup_steps + cfg.steps):
            t0 = time.perf_counter()
            module(x, y)  # forward and backward; the loss comes back to the host
            opt.step()
            module.lazy_reset_grad()
            if i >= cfg.warmup_steps:
                times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(json.dumps({"framework": "onnxruntime", "model": "mlp", "samples_per_s": cfg.batch / median,
                      "step_s": median, "steps": cfg.steps, "threads": cfg.threads,
                      "onnxruntime": ort.__version__, "onnx": onnx.__version__}))


if __name__ == "__main__":
    main()
