// The frozen quantized base of a LoRA model (sg.lora{base = "q4_1"}, docs/lora.md):
// stores frozen weights as GGUF blocks and reads them through dequant_matmul.
#pragma once
#include "graph.h"

namespace sgrt::compiler {

// Every f32 param whose base_dtype is a block format (q8_0, q4_1) and that is
// frozen (or any param of an infer_only graph), rank 2 with whole blocks per
// row, and read only as W in x @ W^T matmuls or as an embedding table takes
// that dtype; its matmuls become dequant_matmul. Other params stay f32. Runs
// before the programs are built, so autodiff sees dequant_matmul.
Status store_frozen_base(Graph& g);

}  // namespace sgrt::compiler
