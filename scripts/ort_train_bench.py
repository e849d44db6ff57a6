#!/usr/bin/env python3
"""A training step in ONNX Runtime training, timed as make_gpt_reference.py --bench
times PyTorch's: one JSON line with the median step. bench/train.cpp runs it beside
PyTorch. Two models:
  mlp  the Fashion-MNIST MLP (784-H-10, ReLU, cross-entropy, AdamW), built here;
  gpt  models/gpt.lua's GPT: make_gpt_reference.py's PyTorch model exported to ONNX
       (opset 17) with its LayerNormalizations given the mean and inverse standard
       deviation outputs ORT's gradient builder reads.

Needs onnxruntime-training from PyPI (CPU wheel for CPython 3.11): scripts/setup_ort.sh
installs it into a venv under ${SGRT_CACHE:-$HOME/.cache/sgrt}/ort-venv, and
bench_train runs that venv's interpreter when it exists.

    ~/.cache/sgrt/ort-venv/bin/python scripts/ort_train_bench.py --threads 1 --steps 30
    ~/.cache/sgrt/ort-venv/bin/python scripts/ort_train_bench.py --model gpt --n_layer 4 \
        --n_head 4 --n_embd 256 --block 128 --batch 16 --threads 1 --steps 3
"""
import argparse
import json
import os
import statistics
import sys
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


def gpt_model(cfg, path):
    """The GPT with make_gpt_reference.py's weights, exported to `path`; returns
    the model, its parameters' names and the tokens and targets of one batch."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_gpt_reference as ref

    cfg.vocab = 256
    gen = torch.Generator().manual_seed(1)
    params = ref.make_params(cfg, torch.float32, gen)

    class Gpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for n, t in params.items():
                self.register_parameter(n.replace(".", "_"), torch.nn.Parameter(t.detach().clone()))

        def forward(self, tokens):
            p = {n: getattr(self, n.replace(".", "_")) for n in params}
            return ref.gpt_logits(cfg, p, tokens).reshape(-1, cfg.vocab)

    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.block), generator=gen)
    targets = torch.randint(0, cfg.vocab, (cfg.batch * cfg.block,), generator=gen)
    torch.onnx.export(Gpt(), (tokens,), path, opset_version=17, input_names=["tokens"], output_names=["logits"],
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    model = onnx.load(path)
    model.ir_version = IR_VERSION
    for k, node in enumerate(model.graph.node):
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([f"ln{k}_mean", f"ln{k}_inv_std"])
    names = [n.replace(".", "_") for n in params]
    return model, names, tokens.numpy().astype(np.int64), targets.numpy().astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=500)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=256)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup-steps", type=int, default=1)
    cfg = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as d:
        if cfg.model == "gpt":
            model, trained, x, y = gpt_model(cfg, os.path.join(d, "gpt.onnx"))
            per_step, unit = cfg.batch * cfg.block, "tokens_per_s"
        else:
            model, trained = mlp_model(cfg.batch, cfg.hidden, rng), ["w1", "b1", "w2", "b2"]
            x = rng.random((cfg.batch, 784), dtype=np.float32)
            y = rng.integers(0, 10, cfg.batch).astype(np.int64)
            per_step, unit = cfg.batch, "samples_per_s"
        artifacts.generate_artifacts(model, requires_grad=trained, loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=d)
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
        times = []
        for i in range(cfg.warmup_steps + cfg.steps):
            t0 = time.perf_counter()
            module(x, y)  # forward and backward; the loss comes back to the host
            opt.step()
            module.lazy_reset_grad()
            if i >= cfg.warmup_steps:
                times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(json.dumps({"framework": "onnxruntime", "model": cfg.model, unit: per_step / median,
                      "step_s": median, "steps": cfg.steps, "threads": cfg.threads,
                      "onnxruntime": ort.__version__, "onnx": onnx.__version__}))


if __name__ == "__main__":
    main()
