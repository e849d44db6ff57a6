// Merging nn.lora adapters into their base weights (sgrt export --merge):
// finds, in one program, where each adapter's branch joins its base matmul,
//   y = base(x, W) + ((dropout(x) A^T) * scale) B^T,
// whatever the recipe made of the matmuls (matmul, qmatmul on quantized
// operands, dequant_matmul on a block base), and computes W + scale B A.
#pragma once
#include <map>
#include <set>
#include <vector>

#include "sgrt/session.h"

namespace sgrt {

// One adapted matmul in a program.
struct LoraJoin {
  int w = -1, a = -1, b = -1;  // the base weight [out, in], lora_A [rank, in], lora_B [out, rank]
  double scale = 0;            // alpha / rank
  double dropout = 0;          // p of the dropout on the branch's input (0: none)
  int add_op = -1;             // the add that joins the branch: removing it leaves y = base
  int y = -1, base_out = -1;   // its output and the base matmul's output
};

// Every adapter pair NAME.lora_A / NAME.lora_B of the model, traced in
// program p. An adapter pair whose graph is not nn.lora's, or a base weight
// the program also reads without its adapter, is refused by name; a model
// with no adapters gets an error that says so.
Status find_lora_joins(const Model& m, const ProgramInfo& p, std::vector<LoraJoin>* out);

// W + scale B A in f32 [out, in]: W decoded first when stored as blocks, the
// rank-r sum taken in double. Parameters read where the optimizer keeps them.
Status merged_weight(const Session& s, const LoraJoin& j, std::vector<float>* out);

// The id of the model's first NAME.lora_A parameter, or -1 (no adapters).
int first_adapter(const Model& m);

// Every adapter pair of the model by its base weight's id, traced in program
// `program` (by default its `infer`, `eval` where it has none); `adapters` gets
// every lora_A and lora_B id. An adapter that program leaves out is refused by
// name.
Status joins_by_weight(const Model& m, std::map<int, LoraJoin>* joins, std::set<int>* adapters,
                       const std::string& program = "");

}  // namespace sgrt
