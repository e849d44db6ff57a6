#!/usr/bin/python3
"""The GPT of models/gpt.lua in PyTorch: a reference dump for tests, and a bench.

Reference (regenerates tests/data/gpt_reference.bin; needs Debian's python3-torch,
not needed by CI):

    /usr/bin/python3 scripts/make_gpt_reference.py [-o tests/data/gpt_reference.bin]

builds the tiny GPT (n_layer=2, n_embd=32, n_head=2, block=16, batch=2, vocab=256,
tied output head) with random weights, takes one batch of the default corpus,
and computes in float64: the loss, every parameter's gradient, and the loss on
the same batch after each of 3 AdamW steps (torch.optim.AdamW; decay on
matrices only, as sgrt's optimizer lowering; the learning rate follows sgrt's
cosine schedule with no warmup over 100 steps, min ratio 0.1).
tests/test_gpt_reference.cpp loads the weights into sgrt by name and compares.

File format, little-endian, version 1:
    char[8]  "SGGPTREF"
    u32      version (1)
    u32 x 7  n_layer, n_embd, n_head, block, batch, vocab, adam_steps
    f32 x 6  lr, beta1, beta2, eps, weight_decay, min_lr_ratio
    u32      schedule_total_steps
    i32[batch*block] tokens, i32[batch*block] targets
    u32      n_params; per parameter, in sgrt's declaration order:
               u32 name length, name (sgrt tensor name), u32 rank, u32 dims[rank],
               f32 value[numel], f32 grad[numel]
    u32      n_losses (adam_steps + 1); f32 losses: before any step, then after each

Bench (bench/train.cpp runs it; one JSON line on stdout):

    OMP_WAIT_POLICY=passive /usr/bin/python3 scripts/make_gpt_reference.py --bench gpt \
        --threads 2 --n_layer 4 --n_embd 256 --n_head 4 --block 128 --batch 16 --steps 10
    ... --bench mlp --batch 100 --hidden 500 --steps 50
    ... --device cuda    (PyTorch on the GPU: the peer of sgrt's CUDA and Vulkan backends)
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

CORPUS = "/usr/share/doc/jargon-text/jargon.txt.gz"


def param_specs(cfg):
    """(sgrt name, shape, kind) in models/gpt.lua's declaration order."""
    C, V, T = cfg.n_embd, cfg.vocab, cfg.block
    specs = [("wte.w", (V, C), "w"), ("wpe.w", (T, C), "w")]
    for l in range(cfg.n_layer):
        h = f"h{l}"
        specs += [(f"{h}.ln1.w", (C,), "gain"), (f"{h}.ln1.b", (C,), "b")]
        for p in ("q", "k", "v", "proj"):
            specs += [(f"{h}.attn.{p}.w", (C, C), "w"), (f"{h}.attn.{p}.b", (C,), "b")]
        specs += [(f"{h}.ln2.w", (C,), "gain"), (f"{h}.ln2.b", (C,), "b")]
        specs += [(f"{h}.mlp.fc1.w", (4 * C, C), "w"), (f"{h}.mlp.fc1.b", (4 * C,), "b")]
        specs += [(f"{h}.mlp.fc2.w", (C, 4 * C), "w"), (f"{h}.mlp.fc2.b", (C,), "b")]
    specs += [("ln_f.w", (C,), "gain"), ("ln_f.b", (C,), "b")]
    return specs


def make_params(cfg, dtype, gen):
    params = {}
    for name, shape, kind in param_specs(cfg):
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
        # Non-trivial gains and biases so their gradients are tested too.
        t = {"w": 0.02 * t, "gain": 1 + 0.1 * t, "b": 0.02 * t}[kind]
        params[name] = t.to(dtype).requires_grad_(True)
    return params


def gpt_logits(cfg, p, tokens):
    """models/gpt.lua: pre-norm blocks, causal attention, tanh GELU, tied head."""
    B, T = tokens.shape
    C, H = cfg.n_embd, cfg.n_head
    x = p["wte.w"][tokens] + p["wpe.w"][None, :T]
    mask = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    for l in range(cfg.n_layer):
        h = f"h{l}"
        a = F.layer_norm(x, (C,), p[f"{h}.ln1.w"], p[f"{h}.ln1.b"], eps=1e-5)
        q, k, v = (F.linear(a, p[f"{h}.attn.{n}.w"], p[f"{h}.attn.{n}.b"]).view(B, T, H, C // H).transpose(1, 2)
                   for n in ("q", "k", "v"))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p[f"{h}.attn.proj.w"], p[f"{h}.attn.proj.b"])
        m = F.layer_norm(x, (C,), p[f"{h}.ln2.w"], p[f"{h}.ln2.b"], eps=1e-5)
        m = F.gelu(F.linear(m, p[f"{h}.mlp.fc1.w"], p[f"{h}.mlp.fc1.b"]), approximate="tanh")
        x = x + F.linear(m, p[f"{h}.mlp.fc2.w"], p[f"{h}.mlp.fc2.b"])
    x = F.layer_norm(x, (C,), p["ln_f.w"], p["ln_f.b"], eps=1e-5)
    return x @ p["wte.w"].t()


def gpt_loss(cfg, p, tokens, targets):
    return F.cross_entropy(gpt_logits(cfg, p, tokens).reshape(-1, cfg.vocab), targets.reshape(-1))


def make_optimizer(cfg, params):
    decay = [t for t in params.values() if t.dim() >= 2]
    rest = [t for t in params.values() if t.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)


def scheduled_lr(cfg, step):
    """sgrt's cosine schedule, no warmup (kernels/cpu/optimizer.cpp)."""
    progress = min(1.0, step / max(1, cfg.total_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def corpus_batch(cfg, gen):
    data = gzip.open(CORPUS).read() if os.path.exists(CORPUS) else bytes(range(256)) * 64
    starts = torch.randint(0, len(data) * 9 // 10 - cfg.block - 1, (cfg.batch,), generator=gen)
    win = torch.tensor([list(data[s:s + cfg.block + 1]) for s in starts.tolist()], dtype=torch.long)
    return win[:, :-1].contiguous(), win[:, 1:].contiguous()


def write_reference(cfg, path):
    gen = torch.Generator().manual_seed(1234)
    params = make_params(cfg, torch.float64, gen)
    tokens, targets = corpus_batch(cfg, gen)
    loss = gpt_loss(cfg, params, tokens, targets)
    loss.backward()
    grads = {n: t.grad.detach().clone() for n, t in params.items()}
    values = {n: t.detach().clone() for n, t in params.items()}
    opt = make_optimizer(cfg, params)
    losses = [loss.item()]
    for step in range(cfg.adam_steps):
        for g in opt.param_groups:
            g["lr"] = scheduled_lr(cfg, step)
        opt.zero_grad()
        gpt_loss(cfg, params, tokens, targets).backward()
        opt.step()
        with torch.no_grad():
            losses.append(gpt_loss(cfg, params, tokens, targets).item())
    with open(path, "wb") as f:
        f.write(b"SGGPTREF")
        f.write(struct.pack("<8I", 1, cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.block, cfg.batch, cfg.vocab, cfg.adam_steps))
        f.write(struct.pack("<6f", cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.min_lr_ratio))
        f.write(struct.pack("<I", cfg.total_steps))
        for t in (tokens, targets):
            f.write(t.to(torch.int32).numpy().tobytes())
        f.write(struct.pack("<I", len(values)))
        for name, shape, _ in param_specs(cfg):
            f.write(struct.pack("<I", len(name)) + name.encode())
            f.write(struct.pack(f"<I{len(shape)}I", len(shape), *shape))
            f.write(values[name].to(torch.float32).numpy().tobytes())
            f.write(grads[name].to(torch.float32).numpy().tobytes())
        f.write(struct.pack(f"<I{len(losses)}f", len(losses), *losses))
    print(f"{path}: loss {losses[0]:.6f}, after AdamW steps {['%.6f' % l for l in losses[1:]]}", file=sys.stderr)


def blas_in_use():
    """The BLAS library this process mapped (Debian's torch calls libblas.so.3)."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower() and line.split()[-1].startswith("/")}
    return sorted(os.path.realpath(l) for l in libs)


def median_step_s(loss_fn, opt, sync, warmup_steps, steps):
    """The median seconds of `steps` optimizer steps after `warmup_steps`, each
    timed to completion (sync: the GPU's, as sgrt's step reads its loss)."""
    times = []
    for i in range(warmup_steps + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
        sync()
        if i >= warmup_steps:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def bench(cfg):
    torch.set_num_threads(cfg.threads)
    torch.set_num_interop_threads(cfg.threads)
    gen = torch.Generator().manual_seed(1)
    dev = torch.device(cfg.device)
    # A GPU step is timed to completion, as sgrt's (which reads its loss).
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if cfg.bench == "gpt":
        params = {n: t.detach().to(dev).requires_grad_(True) for n, t in make_params(cfg, torch.float32, gen).items()}
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.block), generator=gen).to(dev)
        targets = torch.randint(0, cfg.vocab, (cfg.batch, cfg.block), generator=gen).to(dev)
        loss_fn = lambda: gpt_loss(cfg, params, tokens, targets)
        per_step, unit = cfg.batch * cfg.block, "tokens_per_s"
    else:
        w1 = (torch.randn(cfg.hidden, 784, generator=gen) * 0.03).to(dev).requires_grad_(True)
        b1 = torch.zeros(cfg.hidden, device=dev, requires_grad=True)
        w2 = (torch.randn(10, cfg.hidden, generator=gen) * 0.03).to(dev).requires_grad_(True)
        b2 = torch.zeros(10, device=dev, requires_grad=True)
        params = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
        x = torch.rand(cfg.batch, 784, generator=gen).to(dev)
        y = torch.randint(0, 10, (cfg.batch,), generator=gen).to(dev)
        loss_fn = lambda: F.cross_entropy(F.linear(F.linear(x, w1, b1).relu(), w2, b2), y)
        per_step, unit = cfg.batch, "samples_per_s"
    median = median_step_s(loss_fn, make_optimizer(cfg, params), sync, cfg.warmup_steps, cfg.steps)
    print(json.dumps({"framework": "pytorch", "model": cfg.bench, unit: per_step / median, "step_s": median,
                      "steps": cfg.steps, "device": str(dev), "threads": torch.get_num_threads(),
                      "interop_threads": torch.get_num_interop_threads(),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "blas": blas_in_use(),
                      # torch.set_num_threads does not reach a generic libblas.so.3: the
                      # caller sets OpenBLAS's own count (bench/train.cpp does).
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
                      "torch": torch.__version__,
                      "config": [f.strip(" -,") for f in torch.__config__.show().replace(",", "\n").splitlines()
                                 if "BLAS_INFO" in f or "CPU capability" in f]}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "gpt_reference.bin"))
    ap.add_argument("--bench", choices=["gpt", "mlp"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the bench only)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup_steps", type=int, default=2)
    ap.add_argument("--n_layer", type=int, default=2)
    ap.add_argument("--n_embd", type=int, default=32)
    ap.add_argument("--n_head", type=int, default=2)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=500)
    cfg = ap.parse_args()
    cfg.vocab, cfg.adam_steps, cfg.total_steps = 256, 3, 100
    cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.min_lr_ratio = 1e-2, 0.9, 0.99, 1e-8, 0.1, 0.1
    if cfg.bench:
        bench(cfg)
    else:
        write_reference(cfg, cfg.output)


if __name__ == "__main__":
    main()
