// Liveness-based placement of transient tensors in one arena: two tensors
// share bytes only when no program has both alive at once. The compiler's
// memory plan and the exporter (a graph whose ops changed) both use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sgrt/ops.h"

namespace sgrt {

struct LiveInterval { int64_t begin, end; };  // inclusive op indices on one timeline

// An op as the tensors it reads and writes, and the output that may take an
// input's bytes (sgrt::op_overwritable_input), if any.
struct OpTensors {
  std::vector<int> tensors;
  int overwritten = -1, overwriting = -1;  // input, output
};
OpTensors op_tensors(OpCode code, const std::vector<int>& in, const std::vector<int>& out);
// A program as its ops.
using ProgramTensors = std::vector<OpTensors>;

struct Liveness {
  // Each tensor's live interval in every program that touches it; programs are
  // laid end to end in time, so a tensor used by two holds its bytes in both.
  std::vector<std::vector<LiveInterval>> live;
  // shares[out] = in: out takes in's bytes. In every program that touches
  // both, in's last touch is the op that writes out first; -1: none.
  std::vector<int> shares;
};
// `read_back` (loss, metrics, outputs) stay alive to the end of a program.
Liveness live_ranges(size_t n_tensors, const std::vector<ProgramTensors>& programs, const std::vector<int>& read_back);

// Offsets for the tensors in `order` (bytes[id] each, live.live[id] their
// intervals): largest first, each at the lowest `align`ed offset from `base`
// that clears every placed tensor alive at the same time; a tensor that
// shares another's bytes (both in `order`) is placed with it, at its offset.
// Returns the top.
uint64_t place_by_liveness(std::vector<int> order, const std::vector<uint64_t>& bytes, const Liveness& live,
                           uint64_t base, uint64_t align, std::vector<uint64_t>* offsets);

}  // namespace sgrt
