// attention and attention_grad (semantics: kernels/cpu/attention.cpp) on
// attention.comp and attention_grad.comp; attention.glsl has the layout.
#include <cmath>

#include "lowering.h"

namespace sgrt::vk {
namespace {

constexpr int64_t kMaxHead = 128;  // attention.glsl's ACC_PER_THREAD covers rows x 128
constexpr uint32_t kKeysVariant = 1u << 8;  // attention_grad.comp: dk and dv; attention.comp: the cache append

// A shader's tile pair (TQ query rows, TK key rows) and its workgroup memory
// (the .comp's declarations): `q_tiles` [TQ, Dh + 1] and `k_tiles` [TK, Dh + 1]
// tiles, `scores` [TQ, TK + 1] tiles and `rows` [TQ] vectors.
struct Tiles {
  int64_t tq, tk;
  int q_tiles, k_tiles, scores, rows;
  uint64_t shared_bytes(int64_t dh) const {
    return 4ull * ((q_tiles * tq + k_tiles * tk) * (dh + 1) + scores * tq * (tk + 1) + rows * tq);
  }
};
constexpr Tiles kForward{16, 16, 1, 2, 1, 3};   // attention.comp: Qs; Ks, Vs; P; max, sum, rescale
constexpr Tiles kBackward{16, 8, 2, 2, 3, 1};   // attention_grad.comp: Qs, dYs; Ks, Vs; P, dS, D_part; lse

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// (q, k, v) -> (y, lse): one dispatch; (q, k, v, y, lse, dy) -> (dq, dk, dv):
// the dq rows, then the dk, dv rows (independent: both only read the inputs);
// kv_attention (q, k, v, k_cache, v_cache, pos) -> (y, k_cache, v_cache): the
// append to the caches, then the forward over them (attention.comp).
Status attention(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  bool kv = c.op.code == OpCode::KvAttention, fwd = kv || c.op.code == OpCode::Attention;
  const Shape& qs = c.in(0).type.shape;
  int64_t B = qs[0], T = qs[1], H = c.op.attrs.i("n_head"), dh = qs[2] / H, hkv = c.in(1).type.shape[2] / dh;
  if (dh > kMaxHead)
    return Status::Unsupported("head size " + std::to_string(dh) + " exceeds the vulkan attention kernel's " +
                               std::to_string(kMaxHead));
  const Tiles& tiles = fwd ? kForward : kBackward;
  uint64_t shared = tiles.shared_bytes(dh);
  if (shared > c.opts.max_shared)
    return Status::Unsupported("head size " + std::to_string(dh) + " needs " + std::to_string(shared) +
                               " bytes of workgroup memory; the device has " + std::to_string(c.opts.max_shared));
  if (ceil_div(T, tiles.tk) > c.opts.max_groups || B * H > c.opts.max_groups)
    return Status::Unsupported("attention of " + std::to_string(B * H) + " heads of " + std::to_string(T) +
                               " rows exceeds the dispatch grid");
  d->shader = fwd ? "attention" : "attention_grad";
  d->size = u32(dh);
  if (kv) {
    const Shape& cache = c.in(3).type.shape;
    d->push.off[0] = c.word(c.in(0));
    d->push.off[1] = c.word(c.out(1));  // the caches, updated in place
    d->push.off[2] = c.word(c.out(2));
    d->push.off[3] = c.word(c.out(0));
    d->push.off[4] = c.word(c.in(5));
    d->push.dim[0] = c.word(c.in(1));
    d->push.dim[1] = c.word(c.in(2));
    d->push.dim[2] = u32(cache[1]);
  } else if (fwd) {
    for (size_t i = 0; i < 3; ++i) d->push.off[i] = c.word(c.in(i));
    d->push.off[3] = c.word(c.out(0));
    d->push.off[4] = c.word(c.out(1));
  } else {
    for (size_t i = 0; i < 6; ++i) d->push.off[i] = c.word(c.in(i));
    for (size_t i = 0; i < 3; ++i) d->push.dim[i] = c.word(c.out(i));
  }
  d->push.n = u32(B);
  d->push.p[0] = u32(T);
  d->push.p[1] = u32(H);
  d->push.p[2] = u32(hkv);
  d->push.f[0] = 1.f / std::sqrt(static_cast<float>(dh));  // as the CPU's
  d->groups[0] = u32(ceil_div(T, tiles.tq));
  d->groups[1] = u32(B * H);
  if (kv) {
    Dispatch append = *d;
    append.op |= kKeysVariant;
    append.groups[0] = groups_for(B * T * hkv * dh, c.opts);
    append.groups[1] = 1;
    out->push_back(append);
  }
  if (fwd) return Status::Ok();
  out->push_back(*d);  // dq
  d->op |= kKeysVariant;
  d->groups[0] = u32(ceil_div(T, tiles.tk));
  d->groups[1] = u32(B * hkv);
  return Status::Ok();
}

}  // namespace sgrt::vk
