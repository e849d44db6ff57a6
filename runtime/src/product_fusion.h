// Fusions of a product with the ops after it, found on a program, each giving
// the same bits as the ops it replaces. The CPU backend applies the bias,
// addend and activation ones; the Vulkan backend the addend (without a bias,
// qmatmuls too) and scale ones. A fused op runs inside its product's epilogue:
//  - a linear layer's bias add. The DSL writes x @ W + b as
//    add(matmul(x, W), broadcast_to(b)); run as written, the broadcast writes a
//    [rows, N] copy of b and the add reads it and the product back. Fused, the
//    matmul (or qmatmul) adds b in its GEMM's epilogue, after the whole product,
//    with the add's rounding, and writes the add's output directly
//    (kernels/cpu/op_args.h, OpArgs::bias);
//  - a product added to a tensor, add(y, matmul(a, W)): FP4's outlier
//    compensation, add(qmatmul(...), matmul(outliers, W)), whose sparse product
//    then adds each sum to y's element as it stores it (OpArgs::addend), and the
//    layer's bias after it when the sum goes on to add(sum, broadcast_to(b));
//  - a ReLU after a product (or after one of the fusions above), and a
//    relu_grad(y, dy) whose dy a product wrote: the product's store
//    applies max(v, 0), or keeps v where y > 0, and writes the activation's
//    output; the product's own output is never written (OpArgs::act);
//  - a scale after a product, scale(matmul(a, W)): LoRA's alpha / r on x A^T
//    and on its gradient. The product multiplies each sum by alpha as it stores
//    it, in the scale's output; its own output is never written.
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

struct AddendFusion {
  int matmul, add;  // op indices in the program: the f32 matmul right before the add
  int addend;       // the add's other operand (its first): the matmul writes addend + product
  // A bias added next, add(sum, broadcast_to(b)) right after (-1: none): the
  // matmul writes (addend + product) + b in that add's output instead.
  int broadcast = -1, bias_add = -1, bias = -1;
  bool stage_bias = false;  // as BiasFusion's
};

// The fusable pairs (or, with a bias, fives) of a program that no bias fusion
// (`bias`: find_bias_fusions') takes. The product (and a sum and a broadcast copy followed by a bias) must be
// transient and read by the next add alone, the ops adjacent; the final output
// must not overlap the product's inputs, and either is the addend's bytes exactly
// (in place: each element read before it is written) or misses them.
// `qmatmul`: the product may also be a qmatmul (f32 output; Vulkan's), not
// only an f32 matmul (the CPU's).
std::vector<AddendFusion> find_addend_fusions(const Model& m, const ProgramInfo& p, const std::vector<BiasFusion>& bias,
                                              bool qmatmul = false);

struct ActivationFusion {
  // The op whose output the activation reads: a matmul or qmatmul, or the last
  // add of a bias or addend fusion (its product's output, once fused).
  int product;
  int op;    // the relu or relu_grad, after it
  int mask;  // relu_grad's y (the ReLU's output), or -1 for a relu
  // The product writes the activation over its own output, and the ops after
  // read it there in place of the activation's output (never written).
  bool in_place;
};

// The fusable activations of a program. The product's output must be transient
// and read by the activation alone, relu_grad's y exist when the product runs.
// The activation's output is then written earlier: it must miss the product's
// inputs (operands, bias and addend) and y, and no op in between may touch its
// bytes or write y's. Failing that, the product's output takes the activation
// on the same terms, kept until the activation's last reader (which must not be
// the caller, nor a fused product's bias or addend).
// `bias`, `addend`: the program's other fusions, found first.
std::vector<ActivationFusion> find_activation_fusions(const Model& m, const ProgramInfo& p,
                                                      const std::vector<BiasFusion>& bias,
                                                      const std::vector<AddendFusion>& addend);

struct ScaleFusion {
  int product;  // a matmul or qmatmul with an f32 output
  int scale;    // the scale of that output, later in the program
};

// The fusable scales of a program: the product's output transient and read by
// the scale alone; the scale's output then written when the product runs, so
// it must miss the product's inputs, and no op in between may touch its bytes.
std::vector<ScaleFusion> find_scale_fusions(const Model& m, const ProgramInfo& p);

}  // namespace sgrt
