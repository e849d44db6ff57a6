#!/usr/bin/python3
"""models/llama.lua's LoRA fine-tuning step in plain PyTorch: bench_train's peer
for its `lora` workload (SmolLM2-135M's shape, random base weights).

The same computation as sgrt's train_step with --set lora_rank=R: token
embedding; n_layer pre-norm blocks (RMSNorm, grouped-query causal attention
with rotary positions on interleaved pairs, SwiGLU); a final RMSNorm; the head
tied to the embedding. Rank-R adapters (x W^T + alpha/R x A^T B^T, no dropout)
on the seven projections, the base frozen; AdamW (weight decay 0) on the
adapters only; the cross-entropy over every position. Attention goes through
F.scaled_dot_product_attention where PyTorch has it (2.0 on: fused flash or
memory-efficient kernels on CUDA), else an explicit masked softmax. This is
what PEFT computes (scripts/bench_peft_lora.py times PEFT itself, on the CPU
from the real weights); this one needs only torch, so it runs wherever a GPU
box's PyTorch does.

    OMP_WAIT_POLICY=passive python3 scripts/llama_lora_torch.py [--device cuda] [--threads 2] [--steps 10]

One JSON line: step_s (the median of --steps timed steps after
--warmup_steps, each run to completion), tokens_per_s, the device and torch.
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F

from make_gpt_reference import blas_in_use, median_step_s

TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


class LoraLlama:
    def __init__(self, cfg, dev, gen):
        dh = cfg.n_embd // cfg.n_head
        kv = cfg.n_kv_head * dh
        shapes = {"q": (cfg.n_embd, cfg.n_embd), "k": (kv, cfg.n_embd), "v": (kv, cfg.n_embd),
                  "o": (cfg.n_embd, cfg.n_embd), "gate": (cfg.ffn, cfg.n_embd), "up": (cfg.ffn, cfg.n_embd),
                  "down": (cfg.n_embd, cfg.ffn)}
        normal = lambda *shape: (torch.randn(shape, generator=gen) * 0.02).to(dev)
        self.cfg, self.dh = cfg, dh
        self.embd = normal(cfg.vocab, cfg.n_embd)
        self.layers, self.adapters = [], []
        for _ in range(cfg.n_layer):
            layer = {"attn_norm": torch.ones(cfg.n_embd, device=dev), "ffn_norm": torch.ones(cfg.n_embd, device=dev)}
            for name, (out, inp) in shapes.items():
                a = normal(cfg.rank, inp).requires_grad_(True)
                b = torch.zeros(out, cfg.rank, device=dev, requires_grad=True)
                layer[name] = (normal(out, inp), a, b)
                self.adapters += [a, b]
            self.layers.append(layer)
        self.out_norm = torch.ones(cfg.n_embd, device=dev)
        # rope on interleaved pairs (2i, 2i + 1): angle pos * base^(-2i / dh)
        inv = cfg.rope_base ** (-torch.arange(0, dh, 2, dtype=torch.float32) / dh)
        ang = torch.arange(cfg.block, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().to(dev), ang.sin().to(dev)
        self.mask = torch.ones(cfg.block, cfg.block, dtype=torch.bool, device=dev).tril()

    def linear(self, x, w):
        base, a, b = w
        return F.linear(x, base) + (self.cfg.alpha / self.cfg.rank) * F.linear(F.linear(x, a), b)

    def rmsnorm(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.eps) * g

    def rope(self, x):  # x [B, T, H, dh]
        pairs = x.reshape(*x.shape[:-1], self.dh // 2, 2)
        c, s = self.cos[None, :, None, :], self.sin[None, :, None, :]
        even, odd = pairs[..., 0], pairs[..., 1]
        return torch.stack((even * c - odd * s, even * s + odd * c), -1).reshape(x.shape)

    def attention(self, q, k, v):  # [B, T, H or KV, dh] -> [B, H, T, dh]
        group = self.cfg.n_head // self.cfg.n_kv_head
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = (q @ k.transpose(-2, -1)) / self.dh ** 0.5
        return s.masked_fill(~self.mask, float("-inf")).softmax(-1) @ v

    def loss(self, tokens, targets):
        cfg, (B, T) = self.cfg, tokens.shape
        x = self.embd[tokens]
        for p in self.layers:
            h = self.rmsnorm(x, p["attn_norm"])
            q = self.rope(self.linear(h, p["q"]).view(B, T, cfg.n_head, self.dh))
            k = self.rope(self.linear(h, p["k"]).view(B, T, cfg.n_kv_head, self.dh))
            v = self.linear(h, p["v"]).view(B, T, cfg.n_kv_head, self.dh)
            x = x + self.linear(self.attention(q, k, v).transpose(1, 2).reshape(B, T, cfg.n_embd), p["o"])
            h = self.rmsnorm(x, p["ffn_norm"])
            x = x + self.linear(F.silu(self.linear(h, p["gate"])) * self.linear(h, p["up"]), p["down"])
        logits = self.rmsnorm(x, self.out_norm) @ self.embd.t()
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup_steps", type=int, default=2)
    # SmolLM2-135M and models/smollm2_lora.lua's fine-tune
    for name, default in (("n_layer", 30), ("n_embd", 576), ("n_head", 9), ("n_kv_head", 3), ("ffn", 1536),
                          ("vocab", 49152), ("block", 64), ("batch", 4), ("rank", 8)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--rope_base", type=float, default=100000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--lr", type=float, default=2e-3)
    cfg = ap.parse_args()
    torch.set_num_threads(cfg.threads)
    dev = torch.device(cfg.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(1)
    model = LoraLlama(cfg, dev, gen)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.block), generator=gen).to(dev)
    targets = torch.randint(0, cfg.vocab, (cfg.batch, cfg.block), generator=gen).to(dev)
    opt = torch.optim.AdamW(model.adapters, lr=cfg.lr, weight_decay=0.0)
    median = median_step_s(lambda: model.loss(tokens, targets), opt, sync, cfg.warmup_steps, cfg.steps)
    tokens_per_step = cfg.batch * cfg.block
    print(json.dumps({"framework": "pytorch", "model": "llama_lora", "tokens_per_s": tokens_per_step / median,
                      "step_s": median, "steps": cfg.steps, "device": str(dev), "threads": torch.get_num_threads(),
                      "attention": "sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit",
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "blas": blas_in_use(),
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
