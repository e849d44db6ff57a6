#include "quant_monitor.h"

#include <algorithm>

#include "sgrt/quant.h"

namespace sgrt {

QuantMonitor::QuantMonitor(const Model& m, int train_prog, int grad_prog, int64_t micro_batches) {
  auto count = [&](int prog, int64_t runs) {
    if (prog < 0) return;
    for (const OpInfoLoaded& op : m.programs()[prog].ops) {
      if (op.code != OpCode::Quantize || op.attrs.i("update", 1) == 0) continue;  // recomputed copies count nothing
      const int state = op.in[1];
      auto it = std::find_if(watched_.begin(), watched_.end(), [&](const Watched& w) { return w.state == state; });
      if (it == watched_.end())
        it = watched_.insert(watched_.end(), Watched{state, m.tensors()[op.out[0]].name, 0});
      it->elements_per_step += runs * numel(m.tensors()[op.in[0]].type.shape);
    }
  };
  count(train_prog, 1);
  count(grad_prog, micro_batches - 1);
}

Status QuantMonitor::delta(const Session& s, int64_t steps, std::vector<QuantTensorCounts>* out) {
  out->clear();
  std::vector<float> head;
  for (Watched& w : watched_) {
    head.resize(s.model().tensors()[w.state].bytes / sizeof(float));  // header + amax history
    SG_TRY(s.read(w.state, head.data(), head.size() * sizeof(float)));
    QuantTensorCounts c;
    c.tensor = w.tensor;
    c.elements = steps * w.elements_per_step;
    c.saturated = static_cast<int64_t>(head[kStateSaturated] - w.saturated);
    c.flushed = static_cast<int64_t>(head[kStateUnderflow] - w.flushed);
    w.saturated = head[kStateSaturated];
    w.flushed = head[kStateUnderflow];
    out->push_back(std::move(c));
  }
  return Status::Ok();
}

}  // namespace sgrt
