// LoRA adapters out in Hugging Face PEFT's format (docs/lora.md): a folder
// with adapter_model.safetensors and adapter_config.json that
// peft.PeftModel.from_pretrained(base, folder) loads; and such a folder back in.
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
#include <vector>

#include "sgrt/session.h"

namespace sgrt {

// "blk.N.attn_q" -> "model.layers.N.self_attn.q_proj"; other names unchanged.
std::string peft_module_name(const std::string& module);

// Writes DIR/adapter_model.safetensors (f32) and DIR/adapter_config.json
// (DIR is created if missing); base_model is the config's
// base_model_name_or_path ("": null). Invalid when the model has no adapters.
Status export_peft_adapter(const Session& s, const std::string& dir, const std::string& base_model);

// What a PEFT folder's adapter_config.json says the adapters are: what the
// model must be compiled with to take them. Refused: another peft_type, a
// target_modules pattern (a string) rather than a list, and what nn.lora is
// not (use_dora, use_rslora, lora_bias, fan_in_fan_out, a bias other than
// "none", modules_to_save, layers_to_transform, rank_pattern, alpha_pattern).
struct PeftConfig {
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> target_modules;  // "q_proj", "down_proj", ...
};
Status read_peft_config(const std::string& dir, PeftConfig* out);

// DIR/adapter_model.safetensors into the session's adapters, export's mapping
// undone: PEFT's key of every adapter of the model must be there and no other
// key, each of its shape; a B feeding an interleaved rope gets GGUF's row order;
// the config's alpha / r must be the graph's scale. Checked whole before any
// parameter is written.
Status import_peft_adapter(Session& s, const std::string& dir);

// Whether `path` names a folder, which an adapter path means to be PEFT's.
bool is_peft_folder(const std::string& path);

// A LoRA run's adapters from `path`: a PEFT folder (import_peft_adapter) or an
// sgrt safetensors file of the trained parameters (export-weights --trained).
Status import_adapters(Session& s, const std::string& path);

}  // namespace sgrt
