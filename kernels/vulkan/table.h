// The Vulkan backend's kernel table: (op, input dtypes, output dtypes) -> the
// dispatches that run it, with the arena byte ranges each reads and writes (for
// the barriers between dependent dispatches).
#pragma once
#include <string>
#include <vector>

#include "push.h"
#include "sgrt/kernel_table.h"
#include "sgrt/status.h"
#include "sgrt/tensor_info.h"

namespace sgrt::vk {

struct Range { uint64_t begin, end; };  // arena bytes [begin, end)

struct Dispatch {
  std::string shader;
  uint32_t op = 0;    // constant_id 0
  uint32_t size = 0;  // constant_id 1: a shader's own size (gemm_coop's workgroup, norm's and classifier's invocations a row)
  Push push;
  uint32_t groups[3] = {1, 1, 1};
  std::vector<Range> reads, writes;
};

// Range addresses from kScratchBase on are bytes of the scratch buffer (binding
// 2), so the barriers order its users as they order arena bytes.
constexpr uint64_t kScratchBase = 1ull << 62;

// The scratch words handed out so far: each op that needs some gets its own,
// after a region at the front that every op may use (split-K's partial sums,
// qmatmul's decoded operands), ordered by the barriers like arena bytes and not
// zero between ops. The region's size is the largest asked for: the backend
// lowers once to learn it, then, when it is not empty, again with `words`
// starting past it.
struct Scratch {
  uint32_t words = 0;
  uint32_t region_need = 0;  // the largest take_region so far
  // The first of n new words; their range is added to d's reads and writes.
  uint32_t take(uint32_t n, Dispatch* d);
  // The shared region's first word (0) for a use of n words; the caller lists
  // the range in its dispatches.
  uint32_t take_region(uint32_t n);
};

struct KernelOptions {
  bool coop = false;           // matmul on gemm_coop (FP16 operands, FP32 accumulation)
  bool coop_codes = false;     // qmatmul on gemm_coop where its operands are FP16 values exactly
  uint32_t coop_threads = 0;   // its workgroup size: 4 subgroups
  uint32_t max_groups = 65535; // maxComputeWorkGroupCount, all three axes
  uint32_t max_shared = 16384; // maxComputeSharedMemorySize (bytes)
  // Products whose 128x128 tiles make fewer workgroups than this run on 64x64
  // tiles (gemm_tiled64.comp): 0 keeps 128x128 everywhere, UINT32_MAX makes
  // every product 64x64 (tests, benchmarks).
  uint32_t gemm_small_grid = 0;
  // Products whose grid is smaller than this, with a long K, sum K in pieces
  // on more workgroups and add the pieces after (split-K); 0: never.
  uint32_t split_k_grid = 0;
  // Products with one side of C at most kThinSide long (LoRA's rank-r ones)
  // run on gemm_thin.comp; false: on the tiled shaders as any other.
  bool gemm_thin = true;
  // Tiled qmatmuls decode their code (or inner-scaled) operands into the
  // scratch region first (gemm_decode.comp) instead of in the tiled shader's
  // loads, while the decoded operands fit kDecodeFirstWords. Off by default:
  // on the H200 the GPT step ran as fast without it (fp8 173.7k against 171.4k
  // tokens/s) once the tiles' accumulators were registers, and 10 MiB smaller.
  bool decode_first = false;
  // Attention's tile pair (attention.glsl: R owned rows, S streamed rows) for
  // every attention dispatch; 0, 0: the largest that fits workgroup memory.
  uint32_t attention_rows = 0, attention_streamed = 0;
};

// A scale or an add folded into a product (runtime/src/product_fusion.h): the
// product writes tensor `out`, its sums times alpha, or plus `addend`'s
// elements; out = -1: none (it writes its own output).
struct Epilogue {
  int out = -1;
  float alpha = 1.0f;  // a scale's (addend = -1)
  int addend = -1;     // an add's other operand
};

struct Ctx;
// Fills *d (the op's last dispatch, its reads and writes already listed); may
// append earlier dispatches to *out.
using Lower = Status (*)(const Ctx&, Dispatch*, std::vector<Dispatch>*);

// The kernel table (table.cpp): (op, input dtypes, output dtypes) -> lowering.
const std::vector<KernelEntry<Lower>>& kernel_table();

// Appends the dispatches of `op` (the tag-th op of its program) to *out; an
// Unsupported error names the op, its dtypes and its source line when the
// table has no kernel for it or the shapes exceed what the shaders index.
// Scratch words the op needs come from *scratch. `epi`: for a matmul or
// qmatmul, the op folded into it.
Status lower_op(const OpInfoLoaded& op, const std::vector<TensorInfo>& tensors, uint32_t tag,
                const KernelOptions& opts, Scratch* scratch, std::vector<Dispatch>* out, const Epilogue& epi = {});

}  // namespace sgrt::vk
