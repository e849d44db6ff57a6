// A frozen quantized base (q8_0 / q4_1 blocks) read in place: dequant_matmul.comp,
// and the kind bits embedding.comp decodes a block table with.
#include "lowering.h"

namespace sgrt::vk {

uint32_t block_kind(DType t) { return t == DType::q8_0 ? 1u : t == DType::q4_1 ? 2u : 0u; }

// (x [..., Q], w [N, K]) -> y [..., P]: Q = K, P = N, or with transpose_w Q = N, P = K.
Status dequant_matmul(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  const TensorType& w = c.in(1).type;
  const bool trans = c.op.attrs.i("transpose_w", 0) != 0;
  const int64_t q = trans ? w.shape[0] : w.shape[1], p = trans ? w.shape[1] : w.shape[0];
  const int64_t m = p > 0 ? numel(c.out(0).type.shape) / p : 0;  // rows of x and y (q may be 0)
  constexpr int64_t kTile = 64;  // dequant_matmul.comp: 64x64 tiles of y
  d->shader = "dequant_matmul";
  d->op = (trans ? 1u : 0u) | block_kind(w.dtype) << 1;
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.in(1));
  d->push.off[2] = c.word(c.out(0));
  d->push.p[0] = static_cast<uint32_t>(m);
  d->push.p[1] = static_cast<uint32_t>(q);
  d->push.p[2] = static_cast<uint32_t>(p);
  d->push.n = static_cast<uint32_t>(dtype_bytes(w.dtype, w.shape[1]));
  d->groups[0] = static_cast<uint32_t>((p + kTile - 1) / kTile);
  d->groups[1] = static_cast<uint32_t>((m + kTile - 1) / kTile);
  if (d->groups[0] > c.opts.max_groups || d->groups[1] > c.opts.max_groups)
    return Status::Unsupported("dequant_matmul of " + std::to_string(m) + "x" + std::to_string(p) + " exceeds the dispatch grid");
  return Status::Ok();
}

}  // namespace sgrt::vk
