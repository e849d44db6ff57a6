#!/usr/bin/env python3
"""Reference logits of SmolLM2-135M for sgrt's llama model, from numpy.

Needs (PyPI): numpy, gguf, tokenizers. Not run by CI.

    pip install numpy gguf tokenizers
    python3 scripts/make_llama_reference.py [--gguf FILE] [-o tests/data/llama_reference.txt]

An independent implementation: the GGUF is read and dequantized by the `gguf`
package; the forward pass follows Hugging Face's LlamaForCausalLM in float64:
the q and k weights are first permuted back from the GGUF converter's layout
(convert_hf_to_gguf.py's permute) and rotated by HF's rotate_half (pairs i,
i + head_dim/2), repeat_kv for the grouped-query heads, RMSNorm, SwiGLU, the
head tied to the embedding. sgrt instead rotates interleaved pairs on the
file's own weights (llama.cpp's convention), so a wrong convention fails.

Prompts are tokenized by scripts/make_tokenizer_reference.py's reference
tokenizer (HF `tokenizers`); the last one is rendered through the chat
template by hand (<|im_start|>role\\ncontent<|im_end|>\\n ...).

Dump format (text):
    prompt P N              prompt P has N tokens, then
    ids I ...               its ids
    pos T LSE ARGMAX MARGIN  for each position T: log-sum-exp of the logits,
                            the argmax, the gap between the two largest logits
    first V ...             logits of vocab ids 0..63
    top I:V ...             the 8 largest logits (id:value)
    greedy P N MARGIN       greedy continuation of prompt P: N ids, the
                            smallest top-2 gap met on the way, then
    ids I ...

Bench (JSON lines on stdout; the numpy side in float32 with BLAS on T threads):

    python3 scripts/make_llama_reference.py --bench [--threads T] [--prompt P] [--gen G] \
        [--sgrt-bench build/bench/bench_llama]

times one forward over a P-token prompt (the first tokens of the last tenth
of the Jargon File) and G greedy tokens after it, recomputing the prefix per
token (no KV cache here; sgrt's bench reports both ways); with --sgrt-bench,
first runs sgrt's bench with the same arguments.
"""
import argparse
import json
import os
import subprocess
import sys
import time

if "--threads" in sys.argv:  # BLAS reads these when numpy loads
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = sys.argv[sys.argv.index("--threads") + 1]

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_reference import build_reference, default_gguf, read_gguf  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village by the sea, there lived",
    "<|im_start|>user\nWhat is the boiling point of water in Celsius?<|im_end|>\n<|im_start|>assistant\n",
]
GREEDY_PROMPT, GREEDY_TOKENS = 3, 64
FIRST, TOP = 64, 8


def meta_value(r, key):
    return r.fields[key].contents()


def load(path, dtype=np.float64):
    r = gguf.GGUFReader(path)
    assert meta_value(r, "general.architecture") == "llama"
    cfg = {
        "n_layer": meta_value(r, "llama.block_count"),
        "n_head": meta_value(r, "llama.attention.head_count"),
        "n_kv": meta_value(r, "llama.attention.head_count_kv"),
        "base": float(meta_value(r, "llama.rope.freq_base")),
        "eps": float(meta_value(r, "llama.attention.layer_norm_rms_epsilon")),
    }
    w = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(dtype)
        w[t.name] = a.reshape(tuple(int(d) for d in reversed(t.shape)))
    return cfg, w


def unpermute(weight, n_head):
    """Inverse of convert_hf_to_gguf.py's permute(weights, n_head, n_head_kv)."""
    out = weight.shape[0]
    return weight.reshape(n_head, out // n_head // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


class Llama:
    def __init__(self, cfg, w):
        self.c, self.w = cfg, w
        for l in range(cfg["n_layer"]):
            w[f"blk.{l}.attn_q.weight"] = unpermute(w[f"blk.{l}.attn_q.weight"], cfg["n_head"])
            w[f"blk.{l}.attn_k.weight"] = unpermute(w[f"blk.{l}.attn_k.weight"], cfg["n_kv"])
        self.head = w.get("output.weight", w["token_embd.weight"])

    def rmsnorm(self, x, name):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.c["eps"]) * self.w[name]

    def rope(self, x):  # x [H, T, Dh], HF rotate_half
        dh = x.shape[-1]
        inv = 1.0 / self.c["base"] ** (np.arange(0, dh, 2) / dh)
        ang = np.arange(x.shape[1])[:, None] * inv[None, :]
        ang = np.concatenate([ang, ang], axis=-1)
        rot = np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], axis=-1)
        return x * np.cos(ang) + rot * np.sin(ang)

    def hidden(self, ids):
        c, w = self.c, self.w
        x = w["token_embd.weight"][ids]
        T = len(ids)
        for l in range(c["n_layer"]):
            p = f"blk.{l}."
            h = self.rmsnorm(x, p + "attn_norm.weight")
            q = (h @ w[p + "attn_q.weight"].T).reshape(T, c["n_head"], -1).transpose(1, 0, 2)
            k = (h @ w[p + "attn_k.weight"].T).reshape(T, c["n_kv"], -1).transpose(1, 0, 2)
            v = (h @ w[p + "attn_v.weight"].T).reshape(T, c["n_kv"], -1).transpose(1, 0, 2)
            q, k = self.rope(q), self.rope(k)
            rep = c["n_head"] // c["n_kv"]
            k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)  # HF repeat_kv
            s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
            s = s + np.triu(np.full((T, T), -np.inf), 1)
            p_ = np.exp(s - s.max(-1, keepdims=True))
            p_ /= p_.sum(-1, keepdims=True)
            y = (p_ @ v).transpose(1, 0, 2).reshape(T, -1)
            x = x + y @ w[p + "attn_output.weight"].T
            h = self.rmsnorm(x, p + "ffn_norm.weight")
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        return self.rmsnorm(x, "output_norm.weight")

    def logits(self, ids):
        return self.hidden(ids) @ self.head.T


def top2_gap(z):
    a = np.partition(z, -2)[-2:]
    return float(abs(a[1] - a[0]))


def bench(args):
    if args.sgrt_bench:
        cmd = [args.sgrt_bench, "--gguf", args.gguf, "--threads", str(args.threads), "--prompt", str(args.prompt),
               "--gen", str(args.gen)]
        print(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout, end="", flush=True)
    import gzip
    tok = build_reference(read_gguf(args.gguf))
    with gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", errors="replace") as f:
        text = f.read()
    ids = tok.encode(text[len(text) * 9 // 10:][:64 * args.prompt], add_special_tokens=False).ids[:args.prompt]
    model = Llama(*load(args.gguf, np.float32))
    secs = []
    for _ in range(3):
        t0 = time.perf_counter()
        model.logits(np.array(ids))
        secs.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(args.gen - 1):  # the first token comes with the prompt's forward
        row = model.hidden(np.array(ids))[-1] @ model.head.T
        ids.append(int(row.argmax()))
    gen_s = time.perf_counter() - t0
    print(json.dumps({"bench": "llama_speed", "impl": "numpy", "threads": args.threads, "prompt": args.prompt,
                      "prompt_tok_s": round(args.prompt / sorted(secs)[1], 2), "gen": args.gen,
                      "gen_tok_s": round((args.gen - 1) / gen_s, 3)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=default_gguf())
    ap.add_argument("-o", "--out", default="tests/data/llama_reference.txt")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--sgrt-bench")
    args = ap.parse_args()
    if args.bench:
        return bench(args)
    tok = build_reference(read_gguf(args.gguf))
    model = Llama(*load(args.gguf))
    lines = [f"# scripts/make_llama_reference.py: numpy {np.__version__}, gguf, float64; {len(PROMPTS)} prompts"]
    prompt_ids = [tok.encode(p, add_special_tokens=False).ids for p in PROMPTS]
    for i, ids in enumerate(prompt_ids):
        z = model.logits(np.array(ids))
        lines += [f"prompt {i} {len(ids)}", "ids " + " ".join(map(str, ids))]
        for t, row in enumerate(z):
            m = row.max()
            lse = m + np.log(np.exp(row - m).sum())
            top = np.argsort(-row)[:TOP]
            lines.append(f"pos {t} {lse:.9g} {int(row.argmax())} {top2_gap(row):.6g}")
            lines.append("first " + " ".join(f"{v:.9g}" for v in row[:FIRST]))
            lines.append("top " + " ".join(f"{j}:{row[j]:.9g}" for j in top))
    ids = list(prompt_ids[GREEDY_PROMPT])
    out, gap = [], np.inf
    for _ in range(GREEDY_TOKENS):  # recomputes the prefix: slow, simple
        row = model.hidden(np.array(ids))[-1] @ model.head.T
        gap = min(gap, top2_gap(row))
        ids.append(int(row.argmax()))
        out.append(ids[-1])
    lines += [f"greedy {GREEDY_PROMPT} {len(out)} {gap:.6g}", "ids " + " ".join(map(str, out))]
    print("greedy:", repr(tok.decode(out)), "smallest top-2 gap", gap, file=sys.stderr)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
