// attention and attention_grad (semantics: kernels/cpu/attention.cpp) on
// attention.comp and attention_grad.comp; attention.glsl has the layout.
#include <algorithm>
#include <array>
#include <cmath>

#include "lowering.h"

namespace sgrt::vk {
namespace {

constexpr int64_t kMaxHead = 128;  // attention.glsl packs Dh into 8 bits of its shape constant
constexpr int64_t kThreads = 128;  // attention.glsl's workgroup
constexpr uint32_t kKeysVariant = 1u << 8;  // attention_grad.comp: dk and dv; attention.comp: the cache append

// A dispatch's tile pair: R owned rows, S streamed rows (attention.glsl).
struct Tiles {
  int64_t r, s;
};
constexpr std::array<Tiles, 6> kTilePairs{{{32, 32}, {32, 16}, {16, 16}, {16, 8}, {8, 8}, {8, 4}}};  // largest first

// Workgroup memory in bytes, as the .comp files declare it (rows of Dh + 1 words):
// attention.comp: Qs [R], Ks, Vs [S], P [R, S + 1]; attention_grad.comp: Qs, dYs
// [queries], Ks, Vs [keys], P, dS [queries, keys + 1], D_part [128], row_lse [queries].
uint64_t shared_bytes(bool fwd, bool keys_variant, Tiles t, int64_t dh) {
  if (fwd) return 4ull * ((t.r + 2 * t.s) * (dh + 1) + t.r * (t.s + 1));
  int64_t q = keys_variant ? t.s : t.r, k = keys_variant ? t.r : t.s;
  return 4ull * (2 * (q + k) * (dh + 1) + 2 * q * (k + 1) + kThreads + q);
}

// The tile pair opts names, else the largest whose workgroup memory the device
// gives: bigger tiles pass fewer barriers per score; Dh = 64 takes (32, 32)
// where a device gives 48 KiB, Dh = 128 (16, 16) or (16, 8).
Status pick_tiles(bool fwd, bool keys_variant, int64_t dh, const KernelOptions& opts, Tiles* out) {
  if (opts.attention_rows) {
    *out = {opts.attention_rows, opts.attention_streamed};
    uint64_t need = shared_bytes(fwd, keys_variant, *out, dh);
    if (need > opts.max_shared)
      return Status::Unsupported("attention tiles " + std::to_string(out->r) + "," + std::to_string(out->s) +
                                 " need " + std::to_string(need) + " bytes of workgroup memory at head size " +
                                 std::to_string(dh) + "; the device has " + std::to_string(opts.max_shared));
    return Status::Ok();
  }
  for (Tiles t : kTilePairs)
    if (shared_bytes(fwd, keys_variant, t, dh) <= opts.max_shared) {
      *out = t;
      return Status::Ok();
    }
  return Status::Unsupported("head size " + std::to_string(dh) + " needs " +
                             std::to_string(shared_bytes(fwd, keys_variant, kTilePairs.back(), dh)) +
                             " bytes of workgroup memory; the device has " + std::to_string(opts.max_shared));
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
uint32_t shape_constant(int64_t dh, Tiles t) { return u32(dh | t.r << 8 | t.s << 16); }  // constant_id 1
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
  // The forward (or dq) tiles, then dk, dv's: each dispatch is specialized on its own.
  Tiles tiles{}, key_tiles{};
  SG_TRY(pick_tiles(fwd, false, dh, c.opts, &tiles));
  if (!fwd) SG_TRY(pick_tiles(false, true, dh, c.opts, &key_tiles));
  int64_t fewest_rows = fwd ? tiles.r : std::min(tiles.r, key_tiles.r);
  if (ceil_div(T, fewest_rows) > c.opts.max_groups || B * H > c.opts.max_groups)
    return Status::Unsupported("attention of " + std::to_string(B * H) + " heads of " + std::to_string(T) +
                               " rows exceeds the dispatch grid");
  d->shader = fwd ? "attention" : "attention_grad";
  d->size = shape_constant(dh, tiles);
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
  d->groups[0] = u32(ceil_div(T, tiles.r));
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
  d->size = shape_constant(dh, key_tiles);
  d->groups[0] = u32(ceil_div(T, key_tiles.r));
  d->groups[1] = u32(B * hkv);
  return Status::Ok();
}

}  // namespace sgrt::vk
