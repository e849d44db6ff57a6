#include "recipes.h"

#include <algorithm>

namespace sgrt::compiler {
namespace {

using G = QuantGranularity;
constexpr OperandFormat kE4M3{DType::e4m3, G::tensor, 0};
constexpr OperandFormat kE5M2{DType::e5m2, G::tensor, 0};

Recipe low(const char* name, OperandFormat activation, OperandFormat weight, OperandFormat saved, OperandFormat grad) {
  Recipe r;
  r.name = name;
  r.low_precision = true;
  r.activation = activation;
  r.weight = weight;
  r.saved = saved;
  r.grad = grad;
  return r;
}

std::vector<Recipe> make_recipes() {
  std::vector<Recipe> r;
  Recipe fp32;
  fp32.name = "fp32";
  r.push_back(fp32);

  constexpr OperandFormat kBF16{DType::bf16, G::tensor, 0};
  r.push_back(low("bf16", kBF16, kBF16, kBF16, kBF16));

  // FP8-AMAX: E4M3 forward, E5M2 gradients, per-tensor scales from this step's amax.
  Recipe fp8 = low("fp8", kE4M3, kE4M3, kE4M3, kE5M2);
  r.push_back(fp8);

  // Transformer Engine / MS-AMP delayed scaling: activations and gradients from a
  // 16-step amax history; weights change every step, so they use their own amax.
  Recipe delayed = fp8;
  delayed.name = "fp8-delayed";
  delayed.activation.history = delayed.saved.history = delayed.grad.history = 16;
  r.push_back(delayed);

  // MXFP8: 32-element blocks along the contracting dimension, E8M0 scales.
  Recipe mx = low("mxfp8", {DType::e4m3, G::mx, 0}, {DType::e4m3, G::mx, 0}, {DType::e4m3, G::mx, 0},
                  {DType::e5m2, G::mx, 0});
  r.push_back(mx);

  // torchao's rowwise FP8: E4M3 for every operand of all three GEMMs, gradients
  // included, one power-of-two scale per outer index from this step's amax (a
  // tensor is quantized along a different axis in each GEMM that reads it).
  constexpr OperandFormat kE4M3Outer{DType::e4m3, G::tensor, 0, true};
  r.push_back(low("fp8-row", kE4M3Outer, kE4M3Outer, kE4M3Outer, kE4M3Outer));

  // DeepSeek-V3's blockwise FP8: E4M3 everywhere, activations and gradients in
  // 1x128 tiles along K, weights in 128x128 blocks (in the backward GEMMs too),
  // FP32 scales amax / 448; the GEMM promotes its FP32 sum every 128 elements of K.
  constexpr OperandFormat kE4M3Tile{DType::e4m3, G::tile1x128, 0};
  r.push_back(low("fp8-block", kE4M3Tile, {DType::e4m3, G::block128x128, 0}, kE4M3Tile, kE4M3Tile));

  // Scalify taken all the way: per-tensor FP8 as `fp8`, every scale static from
  // the propagated estimate, so a step computes no amax at all.
  constexpr OperandFormat kE4M3Static{DType::e4m3, G::tensor, 0, false, true};
  r.push_back(low("fp8-static", kE4M3Static, kE4M3Static, kE4M3Static, {DType::e5m2, G::tensor, 0, false, true}));

  // FP4 (Wang et al.): E2M1 forward GEMMs, activations per token with outlier
  // clamping, weights per input channel with the DGE; backward GEMMs in FP8.
  Recipe fp4 = low("fp4", {DType::e2m1, G::row, 0}, {DType::e2m1, G::column, 0}, kE4M3, kE5M2);
  fp4.fp4_dge = true;
  fp4.clamp_alpha = 0.99;
  fp4.keep_last_layer = true;
  r.push_back(fp4);

  // NVFP4: 16-element E2M1 blocks with E4M3 block scales and an FP32 tensor scale.
  Recipe nv = low("nvfp4", {DType::e2m1, G::nvfp4, 0}, {DType::e2m1, G::nvfp4, 0}, kE4M3, kE5M2);
  nv.keep_last_layer = true;
  r.push_back(nv);

  // NVIDIA's NVFP4 pre-training recipe: NVFP4 for all three GEMMs; weights in
  // 16x16 blocks (forward and backward read the same values), a random Hadamard
  // transform on both weight-gradient operands, stochastic rounding on gradients;
  // the last 15% of the linear layers (at least the head) and attention stay f32.
  constexpr OperandFormat kNv{DType::e2m1, G::nvfp4, 0};
  OperandFormat nv_grad = kNv;
  nv_grad.stochastic = true;
  Recipe nt = low("nvfp4-train", kNv, {DType::e2m1, G::nvfp4_16x16, 0}, kNv, nv_grad);
  nt.keep_last_share = 0.15;
  nt.hadamard_wgrad = true;
  r.push_back(nt);
  return r;
}

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> r = make_recipes();
  return r;
}

}  // namespace

std::vector<std::string> recipe_names() {
  std::vector<std::string> n;
  for (const Recipe& r : recipes()) n.push_back(r.name);
  return n;
}

Status find_recipe(const std::string& name, Recipe* out) {
  for (const Recipe& r : recipes())
    if (r.name == name) {
      *out = r;
      return Status::Ok();
    }
  std::string avail;
  for (const std::string& n : recipe_names()) avail += (avail.empty() ? "" : ", ") + n;
  return Status::Invalid("unknown recipe '" + name + "' (available: " + avail + ")");
}

Status apply_switches(const RecipeSwitches& s, Recipe* r) {
  auto channel = [](const OperandFormat& f) {
    return f.outer || f.granularity == G::row || f.granularity == G::column;
  };
  const std::initializer_list<OperandFormat*> all = {&r->activation, &r->weight, &r->saved, &r->grad};
  bool has_channels = std::any_of(all.begin(), all.end(), [&](const OperandFormat* f) { return channel(*f); });
  if (s.per_channel && !has_channels)
    return Status::Invalid("recipe '" + r->name + "' has no per-channel scales for 'granularity' to switch");
  if (s.per_channel == false)
    for (OperandFormat* f : all)
      if (channel(*f)) *f = {f->dtype, G::tensor, f->history};
  if (s.dge) {
    if (!r->fp4_dge && !(r->weight.dtype == DType::e2m1 && channel(r->weight)))
      return Status::Invalid("recipe '" + r->name + "': 'dge' applies to E2M1 weights with per-channel scales (fp4)");
    r->fp4_dge = *s.dge;
  }
  if (r->fp4_dge && r->weight.granularity != G::column)
    return Status::Invalid("recipe '" + r->name + "': 'dge' needs the weights' per-channel scales (with granularity = \"tensor\", set dge = false)");
  if (s.hadamard) {
    if (!r->hadamard_wgrad) return Status::Invalid("recipe '" + r->name + "' has no Hadamard transform for 'hadamard' to switch (nvfp4-train)");
    r->hadamard_wgrad = *s.hadamard;
  }
  if (s.stochastic) {
    if (!r->grad.stochastic) return Status::Invalid("recipe '" + r->name + "' has no stochastic rounding for 'stochastic' to switch (nvfp4-train)");
    r->grad.stochastic = *s.stochastic;
  }
  if (s.clamp_alpha) {
    if (!r->low_precision) return Status::Invalid("recipe '" + r->name + "' quantizes nothing for 'clamp' to act on");
    if (*s.clamp_alpha != 0 && !(*s.clamp_alpha > 0.5 && *s.clamp_alpha < 1))
      return Status::Invalid("'clamp' is a quantile in (0.5, 1), or false; got " + std::to_string(*s.clamp_alpha));
    r->clamp_alpha = *s.clamp_alpha;
  }
  return Status::Ok();
}

}  // namespace sgrt::compiler
