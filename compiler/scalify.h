// Scalify's scale propagation (NUMERICS.md §3), run by the compiler over a whole
// program ahead of time. Each tensor gets an estimated scale (a power of two:
// the magnitude its values are expected to have) and, where the op guarantees
// one, a bound on |x|. The precision pass turns a bound into a static
// quantization scale and falls back to a runtime source elsewhere.
#pragma once
#include <string>
#include <vector>

#include "graph.h"

namespace sgrt::compiler {

// P(x): round down to a power of two (x > 0).
double pow2_floor(double x);

// Scalify's rules, on (scale) values; the reference tests use these directly.
double add_scale(double sa, double sb);         // P(max * sqrt(1 + (min/max)^2))
double matmul_scale(double sa, double sb, int64_t k);  // sa * sb * P(sqrt(K))
double reduce_sum_scale(double sa, int64_t n);  // sa * P(sqrt(N))

// Dynamic rescale of a scaled tensor (data, scale) by a norm of its data:
// n = max(P(norm), 2^-14); scale' = scale * n, data' = data / n (the norm is
// the scale spec's, sgrt/scale_spec.h).
double rescale_factor(const std::vector<float>& data, RescaleNorm norm);

struct ScaleInfo {
  double scale = 1.0;   // estimated magnitude (power of two)
  double bound = -1.0;  // proven max |x|, or < 0 when none is known
  std::string rule;     // the rule that produced it, for `sgrt info`
};

// Propagates through g.programs in order; inputs and params seed the scales
// (an input with a declared value range gets that bound).
std::vector<ScaleInfo> propagate_scales(const Graph& g);

}  // namespace sgrt::compiler
