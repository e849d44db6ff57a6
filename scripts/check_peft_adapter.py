#!/usr/bin/env python3
"""Checks a LoRA adapter folder that `sgrt export-weights --peft` wrote.

Needs (PyPI): numpy, gguf. The PEFT part also needs torch, transformers and
peft; without them it is skipped with a message (exit 0). Not run by CI
(it needs a trained checkpoint and the SmolLM2 GGUF; docs/lora.md).

    sgrt export-weights --checkpoint CK --peft -o ADAPTER
    sgrt export-weights --checkpoint CK -o FULL.safetensors
    python3 scripts/check_peft_adapter.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
        --adapter ADAPTER --weights FULL.safetensors

1. numpy, float64: logits of a token sequence from the GGUF base with the
   adapters merged two ways must agree (max |diff| / max |logit| < 1e-9):
   sgrt's own convention (FULL.safetensors: NAME.lora_A/B in the GGUF's row
   order, W + (alpha/r) B A, then the q/k rows unpermuted as
   make_llama_reference.py does for the base) and PEFT's rule on the folder
   (Hugging Face names and row order, W_hf + (lora_alpha/r) B A, r and
   lora_alpha from adapter_config.json). A wrong name, row order or scale
   shows as an O(1) difference once the adapters are trained.
2. PEFT: transformers' LlamaForCausalLM from the GGUF (gguf_file=), wrapped by
   peft.PeftModel.from_pretrained(model, ADAPTER): its logits must be within
   1e-3 (relative to the largest logit) of check 1's.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_reference import Llama, load, unpermute  # noqa: E402

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--adapter", required=True, help="the folder sgrt export-weights --peft wrote")
    ap.add_argument("--weights", required=True, help="sgrt export-weights of the same checkpoint (all params)")
    args = ap.parse_args()

    cfg, base = load(args.gguf)
    with open(os.path.join(args.adapter, "adapter_config.json")) as f:
        config = json.load(f)
    adapter = read_safetensors(os.path.join(args.adapter, "adapter_model.safetensors"))
    full = read_safetensors(args.weights)
    n_adapters = sum(k.endswith(".lora_A") for k in full)
    assert n_adapters * 2 == len(adapter), f"{len(adapter)} tensors in the folder, {n_adapters} adapters in the weights"
    b_norm = max(np.abs(v).max() for k, v in full.items() if k.endswith(".lora_B"))
    assert b_norm > 0, "every lora_B is zero: train first, or the check cannot see a wrong name or order"

    ours = sgrt_merged(cfg, base, full, config["lora_alpha"] / config["r"]).logits(IDS)
    theirs_np = peft_merged(cfg, base, adapter, config)
    ref = theirs_np.logits(IDS)
    base_logits = Llama(cfg, dict(base)).logits(IDS)
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    moved = np.abs(base_logits - ref).max() / np.abs(ref).max()
    print(f"numpy: {n_adapters} adapters, r {config['r']}, lora_alpha {config['lora_alpha']}; "
          f"sgrt vs PEFT rule max rel diff {err:.2e} (the adapters move the logits by {moved:.2e})")
    assert err < 1e-9, "the PEFT folder does not reproduce sgrt's adapted model"

    try:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"skipping the PEFT load: {e.name} is not installed (pip install torch transformers peft)")
        return
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(args.gguf)),
                                                 gguf_file=os.path.basename(args.gguf), torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(model, args.adapter)
    model.eval()
    with torch.no_grad():
        got = model(torch.tensor([IDS])).logits[0].double().numpy()
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"PEFT: transformers + peft logits vs the numpy PEFT-rule logits, max rel diff {err:.2e}")
    assert err < 1e-3, "PEFT's logits differ"


if __name__ == "__main__":
    main()
