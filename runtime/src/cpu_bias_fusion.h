// The CPU backend's one fusion: a linear layer's bias add. The DSL writes
// x @ W + b as add(matmul(x, W), broadcast_to(b)); run as written, the
// broadcast writes a [rows, N] copy of b and the add reads it and the product
// back. Fused, the matmul (or qmatmul) adds b in its GEMM's epilogue, after the
// whole product, with the add's rounding (the same bits), and writes the add's
// output directly (kernels/cpu/op_args.h, OpArgs::bias).
#pragma once
#include <vector>

#include "sgrt/model.h"

namespace sgrt {

struct BiasFusion {
  int matmul, broadcast, add;  // op indices in the program
  int bias;                    // the broadcast's source tensor: [N] or [1, .., 1, N], f32
  // The add's output overlaps the bias (at O1-O3 a transient working copy whose
  // bytes the memory plan may hand on to the output): the backend copies the
  // bias aside before the product runs.
  bool stage_bias;
};

// The fusable triples of a program. The product and the broadcast copy must be
// transient, read by the add alone (not model outputs), and the three ops
// adjacent (nothing else runs in between); the add's output must not overlap
// the product's inputs, which are read while it is written.
std::vector<BiasFusion> find_bias_fusions(const Model& m, const ProgramInfo& p);

}  // namespace sgrt
