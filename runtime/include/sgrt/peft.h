// LoRA adapters out in Hugging Face PEFT's format (docs/lora.md): a folder
// with adapter_model.safetensors and adapter_config.json that
// peft.PeftModel.from_pretrained(base, folder) loads.
//
// Adapters are the params NAME.lora_A [rank, in] and NAME.lora_B [out, rank]
// (nn.lora). A llama GGUF module name maps to the transformers LlamaForCausalLM
// one ("blk.3.attn_q" -> "model.layers.3.self_attn.q_proj", ffn_* -> mlp.*_proj);
// any other NAME is kept. A B whose projection feeds an interleaved rope (a
// GGUF's permuted q and k) gets its rows put back in Hugging Face's order.
// rank and alpha (read from the graph: the scale after x A^T is alpha / rank)
// must be the same for every adapter.
#pragma once
#include <string>

#include "sgrt/session.h"

namespace sgrt {

// "blk.N.attn_q" -> "model.layers.N.self_attn.q_proj"; other names unchanged.
std::string peft_module_name(const std::string& module);

// Writes DIR/adapter_model.safetensors (f32) and DIR/adapter_config.json
// (DIR is created if missing); base_model is the config's
// base_model_name_or_path ("": null). Invalid when the model has no adapters.
Status export_peft_adapter(const Session& s, const std::string& dir, const std::string& base_model);

}  // namespace sgrt
