// Per quantized tensor: how many elements the training steps of a report
// window saturated or flushed to zero, from the counters each quantize keeps
// in its state tensor (sgrt/quant.h's kStateSaturated / kStateUnderflow).
#pragma once
#include <vector>

#include "sgrt/session.h"
#include "sgrt/trainer.h"

namespace sgrt {

class QuantMonitor {
 public:
  // train_prog runs once a step, grad_prog (-1: none) micro_batches - 1 times.
  QuantMonitor(const Model& m, int train_prog, int grad_prog, int64_t micro_batches);
  // The counts since the previous call, over `steps` training steps; the first
  // call only takes the counters' starting point (a resumed run's).
  Status delta(const Session& s, int64_t steps, std::vector<QuantTensorCounts>* out);

 private:
  struct Watched {
    int state;                  // the state tensor
    std::string tensor;         // what is quantized, and to which format
    int64_t elements_per_step;  // elements the training programs quantize with it
    double saturated = 0, flushed = 0;  // the counters at the previous call
  };
  std::vector<Watched> watched_;
};

}  // namespace sgrt
