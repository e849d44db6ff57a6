#!/usr/bin/env python3
"""Writes a PEFT LoRA adapter folder made by PEFT itself for a llama GGUF, its
A and B both random (init_lora_weights=False: not a no-op), for checking
sgrt's import of PEFT folders against PEFT. Run by hand with the virtualenv of
scripts/check_peft_adapter.py (transformers, peft, torch) plus Jinja2, which
PEFT's save_pretrained needs for its model card
(`~/venv-peft/bin/pip install --no-deps Jinja2 MarkupSafe`); not run by CI.

    ~/venv-peft/bin/python scripts/make_peft_adapter.py --gguf $G -o peft_in
    sgrt train models/smollm2_lora.lua --init-weights $G --adapter peft_in --set lr=1e-30 --steps 1 --checkpoint ck_in
    sgrt export-weights --checkpoint ck_in -o full_in.safetensors
    ~/venv-peft/bin/python scripts/check_peft_adapter.py --gguf $G --adapter peft_in \\
        --weights full_in.safetensors --checkpoint ck_in

The step at lr 1e-30 leaves the imported adapters as they were; the check then
compares PEFT's logits from its own folder with sgrt's merge of what it
imported and with sgrt's `infer` on the checkpoint.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_peft_adapter import hf_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("-o", "--output", required=True, help="the adapter folder to write")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from gguf import GGUFReader
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(args.seed)
    tied = not any(t.name == "output.weight" for t in GGUFReader(args.gguf).tensors)
    model = hf_model(args.gguf, tied)
    config = LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=args.targets.split(","),
                        init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(model, config).save_pretrained(args.output)
    print(f"wrote {args.output}: r {args.rank}, lora_alpha {args.alpha}, targets {args.targets}")


if __name__ == "__main__":
    main()
