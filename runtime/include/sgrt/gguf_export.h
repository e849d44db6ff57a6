// A fine-tuned llama written back as a GGUF file, for llama.cpp and the tools
// built on it (docs/gguf.md): the base file's metadata (architecture,
// hyperparameters, tokenizer, chat template) and tensor list, in its order and
// ggml shapes, each tensor's values from the session, LoRA adapters merged.
#pragma once
#include <string>

#include "sgrt/dtype.h"
#include "sgrt/session.h"

namespace sgrt {

struct GgufExportOptions {
  // Type of the matrices sgrt holds in f32 (trained, merged, or decoded from
  // the base): f32, f16, bf16 or q8_0 (ggml's reference quantizer). Vectors
  // (the norms' weights) stay F32, as llama.cpp's converter writes them; a
  // frozen q4_1 / q8_0 matrix no adapter changed keeps its blocks bit for bit.
  DType matrix_dtype = DType::f32;
  // Fold the nn.lora adapters into their base weights (W + alpha / rank B A,
  // lora_merge.h). A model with adapters is refused without it: a GGUF holds
  // the model's own weights only.
  bool merge_lora = false;
};

struct GgufExportSummary {
  int tensors = 0, merged = 0, kept_blocks = 0;  // written; merged weights; block tensors copied as they are
  uint64_t bytes = 0;                            // the file's size
};

// Writes path atomically: on any error it is left as it was. Refused, naming
// the tensor: a base that is not a llama GGUF, a base tensor with no parameter
// of its name and shape (ggml's ne reversed), a parameter the base lacks (the
// adapters aside when merged), a value the chosen type cannot hold (not
// finite, or past F16's 65504), a row that is not whole Q8_0 blocks.
// general.file_type becomes the type holding most of the matrices' elements.
Status export_gguf(const Session& s, const std::string& base_gguf, const GgufExportOptions& opts, const std::string& path,
                   GgufExportSummary* summary = nullptr);

}  // namespace sgrt
