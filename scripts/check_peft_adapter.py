#!/usr/bin/env python3
"""Checks a LoRA adapter folder that `sgrt export-weights --peft` wrote: it
loads in PEFT and gives sgrt's own logits. Run by hand; not run by CI (it
needs a trained checkpoint, the SmolLM2 GGUF and PEFT; docs/lora.md).

Setup: a virtualenv outside the repository on Debian's python3 (3.11), whose
python3-torch (1.13) and numpy it reuses. transformers 4.47.1 is the newest
that runs on torch 1.13 (4.48 and 4.49 use torch 2's device context manager,
4.50 imports torch.distributed.tensor, 4.57 requires torch >= 2.2); 4.46.3
loads the GGUF too but leaves SmolLM2's head untied (below). --no-deps
because Debian's torch calls itself 1.13.0a0, which pip does not count as
peft's torch >= 1.13.0, so it would fetch a torch 2 wheel. Tested with
transformers 4.47.1 (and 4.46.3), peft 0.13.2 (and 0.15.2, 0.17.1, 0.18.1,
0.21.2), accelerate 0.34.2, gguf 0.19.0, tokenizers 0.21.4, safetensors 0.8.0,
torch 1.13.0a0, numpy 1.24.2.

    /usr/bin/python3 -m venv --system-site-packages ~/venv-peft
    ~/venv-peft/bin/pip install --no-deps transformers==4.47.1 "tokenizers>=0.21,<0.22" \
        "huggingface_hub>=0.24,<1.0" safetensors regex tqdm filelock fsspec gguf \
        accelerate==0.34.2 peft==0.13.2
    cmake --build build --target sgrt sgrt_shared          # tools/sgrt, runtime/libsgrt.so

    sgrt train models/smollm2_lora.lua --init-weights $G --steps 4 --checkpoint CK
    sgrt export-weights --checkpoint CK --peft -o ADAPTER
    sgrt export-weights --checkpoint CK -o FULL.safetensors
    ~/venv-peft/bin/python scripts/check_peft_adapter.py --gguf $G --adapter ADAPTER \
        --weights FULL.safetensors --checkpoint CK

1. numpy, float64: logits of a token sequence from the GGUF base with the
   adapters merged two ways must agree (max |diff| / max |logit| < 1e-9):
   sgrt's own convention (FULL.safetensors: NAME.lora_A/B in the GGUF's row
   order, W + (alpha/r) B A, then the q/k rows unpermuted as
   make_llama_reference.py does for the base) and PEFT's rule on the folder
   (Hugging Face names and row order, W_hf + (lora_alpha/r) B A, r and
   lora_alpha from adapter_config.json). A wrong name, row order or scale
   shows as an O(1) difference once the adapters are trained.
2. PEFT: transformers' LlamaForCausalLM from the GGUF (gguf_file=; the head
   tied to the embedding when the file has no output.weight, which
   transformers' GGUF loader before 4.47 does not infer), wrapped by
   peft.PeftModel.from_pretrained(model, ADAPTER): its logits must be within
   1e-3 (relative to the largest logit) of check 1's.
3. sgrt (with --checkpoint): the checkpoint's `infer` program through the C
   API (scripts/sgrt_capi.py, build/runtime/libsgrt.so) on a [batch, block]
   of token ids, against PEFT's logits on the same ids: within 1e-3 relative.
The adapters must move the logits by well over the tolerance (train a few
steps first), or checks 2 and 3 could not see adapters that PEFT dropped.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_reference import Llama, load  # noqa: E402
from sgrt_capi import DEFAULT_LIB  # noqa: E402

IDS = [1, 9690, 198, 2683, 314, 253, 3158, 30, 2, 198, 1, 520, 9531, 198]  # any ids: no tokenizer needed
HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
      "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
      "ffn_down": "mlp.down_proj"}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{name}: {t['dtype']}"
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").astype(np.float64).reshape(t["shape"])
    return out


def sgrt_merged(cfg, base, full, scale):
    """sgrt's convention: GGUF-order weights + scale B A; Llama() unpermutes q/k after."""
    w = dict(base)
    for name in full:
        if name.endswith(".lora_A"):
            module = name[:-len(".lora_A")]
            w[module + ".weight"] = w[module + ".weight"] + scale * full[module + ".lora_B"] @ full[name]
    return Llama(cfg, w)


def peft_merged(cfg, base, adapter, config):
    """PEFT's rule on Hugging Face weights: W_hf + lora_alpha / r * B A."""
    scale = config["lora_alpha"] / config["r"]
    model = Llama(cfg, dict(base))  # unpermutes the base's q/k into HF order
    for l in range(cfg["n_layer"]):
        for gguf_name, hf_name in HF.items():
            key = f"base_model.model.model.layers.{l}.{hf_name}"
            if key + ".lora_A.weight" in adapter:
                w = model.w[f"blk.{l}.{gguf_name}.weight"]
                model.w[f"blk.{l}.{gguf_name}.weight"] = w + scale * adapter[key + ".lora_B.weight"] @ adapter[key + ".lora_A.weight"]
    return model


def rel_diff(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def hf_model(gguf_path, tied):
    """transformers' f32 model of the GGUF; tied: the head is the embedding (its GGUF loader does not infer it)."""
    import torch
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                                gguf_file=os.path.basename(gguf_path), torch_dtype=torch.float32,
                                                tie_word_embeddings=tied)


def peft_model(gguf_path, adapter, tied):
    from peft import PeftModel
    model = PeftModel.from_pretrained(hf_model(gguf_path, tied), adapter)
    model.eval()
    return model


def peft_logits(model, ids, adapters=True):
    import contextlib
    import torch
    with torch.no_grad(), (contextlib.nullcontext() if adapters else model.disable_adapter()):
        return model(torch.tensor(np.asarray(ids, dtype=np.int64))).logits.double().numpy()


def sgrt_logits(checkpoint, lib, vocab):
    """The checkpoint's infer program on a [batch, block] of ids: IDS first, then random ids."""
    from sgrt_capi import Session
    s = Session(checkpoint, lib)
    _, shape = s.info("tokens")
    ids = np.random.default_rng(0).integers(0, vocab, size=shape).astype(np.int32)
    ids[0, :len(IDS)] = IDS
    s.set_input("tokens", ids)
    s.run("infer")
    logits = s.output("logits").astype(np.float64)
    s.close()
    return ids, logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--adapter", required=True, help="the folder sgrt export-weights --peft wrote")
    ap.add_argument("--weights", required=True, help="sgrt export-weights of the same checkpoint (all params)")
    ap.add_argument("--checkpoint", help="the checkpoint itself: also compare sgrt's logits (needs libsgrt.so)")
    ap.add_argument("--lib", help="sgrt's shared library (default build/runtime/libsgrt.so)")
    args = ap.parse_args()

    cfg, base = load(args.gguf)
    tied = "output.weight" not in base
    vocab = base["token_embd.weight"].shape[0]
    with open(os.path.join(args.adapter, "adapter_config.json")) as f:
        config = json.load(f)
    adapter = read_safetensors(os.path.join(args.adapter, "adapter_model.safetensors"))
    full = read_safetensors(args.weights)
    n_adapters = sum(k.endswith(".lora_A") for k in full)
    assert n_adapters * 2 == len(adapter), f"{len(adapter)} tensors in the folder, {n_adapters} adapters in the weights"
    b_norm = max(np.abs(v).max() for k, v in full.items() if k.endswith(".lora_B"))
    assert b_norm > 0, "every lora_B is zero: train first, or the check cannot see a wrong name or order"

    ours = sgrt_merged(cfg, base, full, config["lora_alpha"] / config["r"]).logits(IDS)
    ref = peft_merged(cfg, base, adapter, config).logits(IDS)
    base_logits = Llama(cfg, dict(base)).logits(IDS)
    del full, base
    err, moved = rel_diff(ours, ref), rel_diff(base_logits, ref)
    print(f"numpy: {n_adapters} adapters, r {config['r']}, lora_alpha {config['lora_alpha']}; "
          f"sgrt vs PEFT rule max rel diff {err:.2e} (the adapters move the logits by {moved:.2e})")
    assert err < 1e-9, "the PEFT folder does not reproduce sgrt's adapted model"
    assert moved > 1e-2, "the adapters barely move the logits: train longer, or a dropped adapter goes unseen"

    try:
        import peft
        import torch
        import transformers
    except ImportError as e:
        print(f"skipping the PEFT load: {e.name} is not installed (see the setup at the top of this script)")
        return
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    model = peft_model(args.gguf, args.adapter, tied)
    err = rel_diff(peft_logits(model, [IDS])[0], ref)
    print(f"PEFT: transformers + peft logits vs the numpy PEFT-rule logits, max rel diff {err:.2e}")
    assert err < 1e-3, "PEFT's logits differ"

    if args.checkpoint:
        ids, got = sgrt_logits(args.checkpoint, args.lib or DEFAULT_LIB, vocab)
        theirs = peft_logits(model, ids)
        err, moved = rel_diff(got, theirs), rel_diff(peft_logits(model, ids, adapters=False), theirs)
        print(f"sgrt: the checkpoint's infer logits {list(got.shape)} vs PEFT's on the same ids, max rel diff "
              f"{err:.2e} (the adapters move PEFT's by {moved:.2e})")
        assert err < 1e-3, "sgrt's logits differ from PEFT's"
        assert moved > 1e-2, "the adapters barely move PEFT's logits: did PEFT load them?"


if __name__ == "__main__":
    main()
