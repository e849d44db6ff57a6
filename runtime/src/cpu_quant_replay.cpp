#include "cpu_quant_replay.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "sgrt/quant.h"

namespace sgrt {

QuantReplay::Entry* QuantReplay::entry_for(const Model& m, const OpInfoLoaded& op, const std::vector<bool>& written) {
  if (op.code != OpCode::Quantize) return nullptr;
  const ScaleSpec& spec = op.quant[0];
  const int in = op.in[0];
  const TensorInfo& t = m.tensors()[in];
  // A parameter: an input is written by the host before nearly every run.
  if (t.role != Role::param || !t.persistent || written[in] || spec.history > 0 || spec.stochastic) return nullptr;
  Entry want;
  want.input = in;
  want.granularity = static_cast<int>(spec.granularity);
  want.mode = static_cast<int>(spec.mode);
  want.dtype = static_cast<int>(spec.dtype);
  want.margin = spec.margin;
  want.static_log2 = spec.static_log2;
  want.hadamard = spec.hadamard;
  for (const auto& e : entries_)
    if (e->input == want.input && e->granularity == want.granularity && e->mode == want.mode && e->dtype == want.dtype &&
        e->margin == want.margin && e->static_log2 == want.static_log2 && e->hadamard == want.hadamard)
      return e.get();
  want.input_begin = t.offset;
  want.input_end = t.offset + t.bytes;
  entries_.push_back(std::make_unique<Entry>(std::move(want)));
  return entries_.back().get();
}

void QuantReplay::invalidate(uint64_t offset, uint64_t bytes) {
  for (const auto& e : entries_)
    if (offset < e->input_end && e->input_begin < offset + bytes) e->valid = false;
}

Status QuantReplay::run(Entry& e, const cpu::OpArgs& a) {
  const cpu::TensorArg &codes = a.out[0], &scales = a.out[1];
  const size_t code_bytes = dtype_bytes(codes.type->dtype, codes.n), scale_bytes = dtype_bytes(scales.type->dtype, scales.n);
  float* state = a.out[2].f();
  if (e.valid) {
    auto* c = static_cast<uint8_t*>(codes.data);
    const uint8_t pad = code_bytes ? c[code_bytes - 1] : 0;
    std::memcpy(c, e.codes.data(), code_bytes);
    // An odd count of E2M1 codes leaves the last byte's high nibble unwritten.
    if (codes.type->dtype == DType::e2m1 && codes.n % 2) c[code_bytes - 1] = (c[code_bytes - 1] & 0x0F) | (pad & 0xF0);
    std::memcpy(scales.data, e.scales.data(), scale_bytes);
    if (is_nvfp4(a.quant[0].granularity)) state[kStateTensorScale] = e.tensor_scale;
  } else {
    SG_TRY(cpu::quantize_outputs(a, &e.stats));
    const auto* c = static_cast<const uint8_t*>(codes.data);
    const auto* s = static_cast<const uint8_t*>(scales.data);
    e.codes.assign(c, c + code_bytes);
    e.scales.assign(s, s + scale_bytes);
    e.tensor_scale = state[kStateTensorScale];
    e.valid = e.stats.kept_scales == 0;  // a kept scale is the state's, which may change
  }
  cpu::record_quantize(a, e.stats);
  return Status::Ok();
}

bool quant_replay_enabled() {
  const char* v = std::getenv("SGRT_CPU_QUANT_REPLAY");
  return !v || std::string(v) != "0";
}

}  // namespace sgrt
