// Liveness-based placement of transient tensors in one arena: two tensors
// share bytes only when no program has both alive at once. The compiler's
// memory plan and the exporter (a graph whose ops changed) both use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sgrt {

struct LiveInterval { int64_t begin, end; };  // inclusive op indices on one timeline

// A program as its ops, each op as the tensors it reads and writes.
using ProgramTensors = std::vector<std::vector<int>>;

// Each tensor's live interval in every program that touches it; programs are
// laid end to end in time, so a tensor used by two holds its bytes in both.
// `read_back` (loss, metrics, outputs) stay alive to the end of a program.
std::vector<std::vector<LiveInterval>> live_ranges(size_t n_tensors, const std::vector<ProgramTensors>& programs,
                                                   const std::vector<int>& read_back);

// Offsets for the tensors in `order` (bytes[id] each, live[id] their
// intervals): largest first, each at the lowest `align`ed offset from `base`
// that clears every placed tensor alive at the same time. Returns the top.
uint64_t place_by_liveness(std::vector<int> order, const std::vector<uint64_t>& bytes,
                           const std::vector<std::vector<LiveInterval>>& live, uint64_t base, uint64_t align,
                           std::vector<uint64_t>* offsets);

}  // namespace sgrt
