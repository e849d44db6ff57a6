// Precision recipes: which format and which scale source each GEMM operand
// gets (docs/recipes.md says what each guarantees).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sgrt/dtype.h"
#include "sgrt/quant.h"
#include "sgrt/status.h"

namespace sgrt::compiler {

struct OperandFormat {
  DType dtype = DType::f32;
  QuantGranularity granularity = QuantGranularity::tensor;
  int history = 0;  // > 0: delayed scaling over this many steps
  // One scale per outer (non-contracted) index of the GEMM, so it applies after
  // the FP32 accumulation: each GEMM sets granularity to row or column from the
  // operand's side and transposition.
  bool outer = false;
  // Every scale fixed at compile time from Scalify's estimate (fp8-static): no
  // amax at run time; a bound, where Scalify proves one, still takes precedence.
  bool estimated = false;
  bool hadamard = false;    // random Hadamard transform along K first (set per GEMM)
  bool stochastic = false;  // stochastic rounding of the codes
};

struct Recipe {
  std::string name;
  bool low_precision = false;  // false: every matmul stays f32
  OperandFormat activation, weight;       // forward GEMM operands
  OperandFormat saved, grad;              // backward GEMMs: saved operands, incoming gradients
  bool fp4_dge = false;                   // weight gradients through the DGE derivative
  double clamp_alpha = 0;                 // > 0: activation outlier clamping with compensation
  bool keep_last_layer = false;           // the last forward matmul (the head) stays f32
  // > 0: this share of the matmuls with a weight, the last ones (at least the
  // head), stays f32, and so does every matmul of two activations (attention).
  double keep_last_share = 0;
  bool hadamard_wgrad = false;            // both weight-gradient operands through the Hadamard transform
  bool scales_static_when_bounded = true; // bounded tensors get compile-time scales
};

// sg.recipe's switches over the named recipe's own settings (unset: the recipe's).
struct RecipeSwitches {
  std::optional<bool> dge;            // FP4 weight gradients through the DGE derivative
  std::optional<double> clamp_alpha;  // activation outlier clamping quantile; 0: off
  std::optional<bool> per_channel;    // false: per-tensor scales where the recipe has per-row/column/outer ones
  std::optional<bool> hadamard;       // the weight gradient's random Hadamard transform (nvfp4-train)
  std::optional<bool> stochastic;     // stochastic rounding of the gradients (nvfp4-train)
};

Status find_recipe(const std::string& name, Recipe* out);
// The recipe with the switches applied; a switch the recipe has no use for is refused.
Status apply_switches(const RecipeSwitches& s, Recipe* r);
std::vector<std::string> recipe_names();

}  // namespace sgrt::compiler
