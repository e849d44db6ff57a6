// Deployable graphs: a model with its weights folded into the file, so an edge
// box needs only the runtime and one .sg file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sgrt/session.h"
#include "sgrt/tokenizer.h"

namespace sgrt {

// Post-training quantization of the weights of inference matmuls. The weight
// formats are the recipes' (recipes.cpp): FP8 E4M3 per tensor or per output
// channel, FP4 E2M1 per input channel (Wang et al.), NVFP4 16-element blocks.
enum class ExportQuant { none, fp8, fp8_channel, fp4, nvfp4 };

// "" or "none", "fp8", "fp8-channel", "fp4", "nvfp4".
Status parse_export_quant(const std::string& name, ExportQuant* out);

struct ExportOptions {
  // Keep only the programs that do not train (eval, infer and the model's own,
  // such as a KV cache's prefill and decode_step); drop every tensor they do
  // not use (gradients, optimizer state) from the file and the arena.
  bool infer_only = false;
  // Needs infer_only: quantized weights are constants that training would not reach.
  ExportQuant quantize = ExportQuant::none;
  // Needs infer_only: every nn.lora adapter folded into its base weight,
  // W + (alpha / rank) B A in f32 (a q4_1/q8_0 base decoded first, then stored
  // f32 or as `quantize` says), the adapters' ops and tensors gone (docs/lora.md).
  bool merge_lora = false;
  // A text model's tokenizer, stored in the file (it replaces one the model
  // already carries): its vocabulary must be the last dimension of the
  // output "logits". sgrt/tokenizer_model.h reads it back.
  const Tokenizer* tokenizer = nullptr;
};

// s's model with s's current persistent state (parameters, optimizer and scale
// state) stored as buffers that Session::init writes back. The train state is
// not stored: Session::init sets it.
Status export_model(const Session& s, const ExportOptions& opts, std::vector<uint8_t>* out);
// The same, written atomically to path.
Status export_to_file(const Session& s, const ExportOptions& opts, const std::string& path);

// True when every parameter takes its initial value from the file (an exported graph).
bool carries_weights(const Model& m);

}  // namespace sgrt
