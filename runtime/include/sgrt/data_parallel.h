// Data-parallel training (docs/distributed.md): N processes run the same
// train_step on their own shard of every batch; between backward and the
// optimizer updates, the gradients are replaced by their mean over the ranks.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sgrt/communicator.h"
#include "sgrt/model.h"

namespace sgrt {

// How gradients travel: fp32 as they are; bf16 rounded; fp8 as FP8-LM, in
// fp8_wire(m)'s format under one power-of-two scale per tensor shared by
// every rank.
enum class GradComm { fp32, bf16, fp8 };
Status parse_grad_comm(const std::string& name, GradComm* out);
const char* grad_comm_name(GradComm c);
// fp8's format, the recipe's gradients': E4M3 where every FP8 gradient tensor
// of `m` is E4M3 (fp8-row, fp8-block), E5M2 otherwise (fp8, mxfp8, fp4 ...,
// and recipes without FP8 gradients, as FP8-LM).
Wire fp8_wire(const Model& m);
// "fp32", "bf16", "fp8 (E5M2)" or "fp8 (E4M3)": what travels, for the header.
std::string grad_comm_label(GradComm c, const Model& m);

// train_step's parts: "train_step.part0", "train_step.part1", ...
std::string train_step_part(size_t i);

// A copy of `m` with its train_step also cut into parts where its gradients
// are complete: after a gradient's last write, before its first reader (the
// finiteness check at the fp32 state level, quantize_grad below it). train()
// runs the parts with the exchanges between them when it has several ranks.
// The IR is unchanged: the points are found from the update ops' inputs.
Status split_train_step(const Model& m, std::unique_ptr<Model>* out);

// ZeRO stage 1 (docs/distributed.md). Whole parameters are shared out among
// the ranks, largest optimizer moments first, each to the rank with the
// fewest moment bytes so far (as PyTorch's ZeroRedundancyOptimizer); a rank
// keeps and updates only its parameters' moments, then the ranks all-gather
// the updated weights (and their scales), so every rank ends the step alike.
struct ZeroPlan {
  std::vector<size_t> updates;        // train_step's update ops, by index
  std::vector<int> owner;             // the rank that runs each of them
  std::vector<uint64_t> rank_bytes;   // moment bytes each rank keeps
};
// The moments an update op reads: AdamW's m and v, SGD's momentum.
std::vector<int> update_moments(const OpInfoLoaded& update);
// Fails when train_step keeps no moments (nothing to shard).
Status plan_zero(const Model& m, int ranks, ZeroPlan* out);
// Rank `rank`'s copy of `m` (split_train_step's output, not yet prepared):
// the other ranks' moments get no storage (the arena shrinks by them), their
// updates leave every program, and each tensor notes which rank updates it
// (TensorInfo::updated_by, sharded). Checkpoints stay the whole model's.
Status shard_optimizer_state(int ranks, int rank, std::unique_ptr<Model>* m);
// Rank `rank`'s rows are rows rank b ... rank b + b - 1 of the global batch
// (N b rows, b each rank's batch): its dropout ops count their mask's elements
// from rank x their size (attribute offset), so N ranks x batch b draw the
// masks one process draws with batch N b, and the ranks' masks differ. Every
// tensor under dropout has the batch as its outermost axis.
void place_dropout_masks(Model* m, int rank);

}  // namespace sgrt
