// Quantizations the CPU backend replays instead of recomputing. A quantize op
// whose input is a parameter no program writes (a frozen LoRA base, every weight of an
// inference-only model), scaled from that input alone (no amax history, no
// stochastic rounding), gives the same codes, scales and counters every run
// until the host writes the input again (Backend::write: a checkpoint, an
// init, Session::write). So its outputs are kept aside on its first run and
// copied back on the next ones, and the kept counters go through
// record_quantize: the state is what the kernel would have left, bit for bit.
// The quantize ops of every program that quantize one input alike share an
// entry. It costs the codes' bytes (a quarter of an f32 weight's for FP8);
// SGRT_CPU_QUANT_REPLAY=0 turns it off.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/op_args.h"
#include "cpu/quantize.h"
#include "sgrt/model.h"

namespace sgrt {

class QuantReplay {
 public:
  // The outputs of one quantization, once computed.
  struct Entry {
    // Which: the input tensor, and the spec's granularity, mode, dtype, margin,
    // static exponent and Hadamard transform.
    int input = -1, granularity = 0, mode = 0, dtype = 0, margin = 0, static_log2 = 0;
    bool hadamard = false;
    uint64_t input_begin = 0, input_end = 0;  // the input's arena range
    bool valid = false;
    std::vector<uint8_t> codes, scales;
    float tensor_scale = 0;  // NVFP4's second level, kept in the state
    cpu::QuantStats stats;
  };

  // The entry (owned here) for a Quantize op of `m` that qualifies, or null;
  // `written[t]`: some op of some program writes tensor t.
  Entry* entry_for(const Model& m, const OpInfoLoaded& op, const std::vector<bool>& written);
  // Forgets every entry whose input overlaps [offset, offset + bytes).
  void invalidate(uint64_t offset, uint64_t bytes);
  // k_quantize, replayed from `e` when it holds the outputs.
  static Status run(Entry& e, const cpu::OpArgs& a);

 private:
  std::vector<std::unique_ptr<Entry>> entries_;  // a few per weight: found by a scan at prepare
};

// Whether SGRT_CPU_QUANT_REPLAY leaves replaying on (the default).
bool quant_replay_enabled();

}  // namespace sgrt
