// `--init-weights FILE.gguf` on a .lua model: the file's llama metadata
// (n_layer, n_embd, ...; sgrt/gguf_weights.h) become --set defaults, so
// models/llama.lua takes the file's shape; an explicit --set wins. The same
// for the LoRA shape of `--adapter`'s adapters.
#pragma once
#include <map>
#include <string>

#include "args.h"

namespace sgrt::tool {

bool is_gguf(const std::string& path);

// Adds the GGUF's config to a->sets for each key the command line does not
// set; *config gets the file's values. Nothing happens for a non-GGUF
// --init-weights or a compiled .sg model.
Status apply_gguf_config(Args* a, std::map<std::string, std::string>* config);

// --adapter A.safetensors (LoRA adapters, sgrt export-weights --trained): the
// rank of its first NAME.lora_A as --set lora_rank. --adapter DIR (a PEFT
// folder): its config's r, lora_alpha and target_modules as lora_rank,
// lora_alpha and lora_targets (q_proj -> q, ..., down_proj -> down:
// models/llama.lua's). Each unless the command line sets it. A file without
// adapters is refused.
Status apply_adapter_config(Args* a);

}  // namespace sgrt::tool
