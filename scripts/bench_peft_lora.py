#!/usr/bin/env python3
"""LoRA training step of SmolLM2-135M on the CPU, sgrt against PyTorch + PEFT, side by side.

Both train rank-r adapters (alpha, dropout 0) on the seven projections of every
block of the same f32 base (the GGUF's weights decoded to f32, the head tied to
the embedding) with AdamW (weight decay 0), on the same [batch, block] token
ids, the loss a cross-entropy over every position (sgrt's masked loss with a
mask of ones). sgrt runs models/smollm2_lora.lua's train_step through its C API
(scripts/sgrt_capi.py) from a checkpoint this script makes first (`sgrt train
... --steps 1` with the same settings); PyTorch runs transformers' LlamaForCausalLM
wrapped by peft.get_peft_model, at its best on this CPU as bench/RESULTS.md
describes (OMP_WAIT_POLICY=passive, OPENBLAS_CORETYPE=SkylakeX where the CPU
has AVX-512, torch.set_num_threads). Not run by CI.

Every measurement is a fresh process (start-up and loading are not timed): one
untimed step, then --steps timed ones, their median. Repetitions interleave
(rep 1 of sgrt and PyTorch, then rep 2, ...); printed figures are medians over
the repetitions: step seconds, tokens/s and sgrt's speed over PyTorch's (> 1:
sgrt faster), and each process's peak RSS (VmHWM, loading included) and its
RSS after the timed steps. One JSON line per framework and thread count.

Setup: the virtualenv of scripts/check_peft_adapter.py (torch, transformers,
peft, gguf) and `cmake --build build --target sgrt sgrt_shared`.

    python3 scripts/make_wordnet_instructions.py -o wordnet.jsonl
    nice -n 10 ~/venv-peft/bin/python scripts/bench_peft_lora.py \\
        --gguf ~/.cache/sgrt/SmolLM2-135M-Instruct.Q4_1.gguf --data wordnet.jsonl [--threads 1,2] [--reps 3] [--steps 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HF_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def memory_kb():
    """(peak RSS, current RSS) of this process in kB, from /proc/self/status."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()[0] if value.split() else "0"
    return int(fields["VmHWM"]), int(fields["VmRSS"])


def batch_ids(batch, block, vocab):
    rng = np.random.default_rng(7)
    return rng.integers(0, vocab, size=(batch, block + 1)).astype(np.int32)  # tokens and targets shifted by one


def timed(step, steps):
    """The median seconds of `steps` calls of step() after one untimed call."""
    step()
    t = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def child_sgrt(args):
    sys.path.insert(0, HERE)
    from sgrt_capi import Session
    s = Session(args.checkpoint, args.lib)
    ids = batch_ids(args.batch, args.block, args.vocab)
    s.set_input("tokens", ids[:, :-1])
    s.set_input("targets", ids[:, 1:])
    s.set_input("mask", np.ones((args.batch, args.block), np.float32))

    def step():
        s.run("train_step")
        s.loss()  # read to completion
    return timed(step, args.steps)


def child_torch(args):
    import torch
    from peft import LoraConfig, get_peft_model
    from check_peft_adapter import hf_model
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    lora = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, target_modules=HF_TARGETS, bias="none",
                      task_type="CAUSAL_LM")
    model = get_peft_model(hf_model(args.gguf, tied=True), lora)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    ids = torch.from_numpy(batch_ids(args.batch, args.block, args.vocab).astype(np.int64))
    tokens, targets = ids[:, :-1], ids[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        opt.step()
    return timed(step, args.steps)


def has_avx512():
    with open("/proc/cpuinfo") as f:
        return "avx512f" in f.read()


def run_child(framework, threads, args, checkpoint):
    env = dict(os.environ)
    if framework == "sgrt":
        env["SGRT_NUM_THREADS"] = str(threads)
    else:
        env.update(OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        if has_avx512():
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
    cmd = [sys.executable, os.path.abspath(__file__), "--child", framework, "--threads", str(threads),
           "--checkpoint", checkpoint, "--gguf", args.gguf, "--lib", args.lib, "--steps", str(args.steps),
           "--rank", str(args.rank), "--alpha", str(args.alpha), "--batch", str(args.batch),
           "--block", str(args.block), "--lr", str(args.lr), "--vocab", str(args.vocab)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def make_checkpoint(args, ck):
    """models/smollm2_lora.lua under the bench's rank, alpha, batch and block, weights from the GGUF."""
    cmd = [args.sgrt, "train", os.path.join(ROOT, "models", "smollm2_lora.lua"), "--init-weights", args.gguf,
           "--data", args.data, "--steps", "1", "--checkpoint", ck, "--threads", "2", "--quiet",
           "--set", f"lora_rank={args.rank}", "--set", f"lora_alpha={args.alpha}", "--set", f"batch={args.batch}",
           "--set", f"block={args.block}", "--set", "lora_dropout=0", "--set", f"lr={args.lr}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # its eval line would break the JSON lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.expanduser("~/.cache/sgrt/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--data", default="wordnet.jsonl", help="the instruction set sgrt train needs for the checkpoint")
    ap.add_argument("--sgrt", default=os.path.join(ROOT, "build", "tools", "sgrt"))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "runtime", "libsgrt.so"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per process, after one untimed")
    ap.add_argument("--rank", type=int, default=8)  # models/smollm2_lora.lua's
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=["sgrt", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        args.threads = int(args.threads)
        step_s = child_sgrt(args) if args.child == "sgrt" else child_torch(args)
        peak, now = memory_kb()
        print(json.dumps({"step_s": step_s, "peak_rss_mb": peak / 1024, "rss_mb": now / 1024}))
        return

    tokens = args.batch * args.block
    print(json.dumps({"load_average_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
                      "model": "SmolLM2-135M f32 base", "rank": args.rank, "alpha": args.alpha, "batch": args.batch,
                      "block": args.block, "targets": "q,k,v,o,gate,up,down", "reps": args.reps, "steps": args.steps}),
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ck = os.path.join(tmp, "ck")
        make_checkpoint(args, ck)
        for threads in [int(t) for t in args.threads.split(",")]:
            runs = {"pytorch+peft": [], "sgrt": []}
            for _ in range(args.reps):
                runs["pytorch+peft"].append(run_child("torch", threads, args, ck))
                runs["sgrt"].append(run_child("sgrt", threads, args, ck))
            med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
            for name, m in med.items():
                line = {"framework": name, "threads": threads, "step_s": round(m["step_s"], 4),
                        "tokens_per_s": round(tokens / m["step_s"], 1), "peak_rss_mb": round(m["peak_rss_mb"]),
                        "rss_after_steps_mb": round(m["rss_mb"]), "step_s_reps": [round(r["step_s"], 4) for r in runs[name]]}
                if name == "sgrt":
                    line["vs_pytorch"] = round(med["pytorch+peft"]["step_s"] / m["step_s"], 3)
                print(json.dumps(line), flush=True)
    print(json.dumps({"load_average_after": " ".join(f"{x:.2f}" for x in os.getloadavg())}))


if __name__ == "__main__":
    main()
