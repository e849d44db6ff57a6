// Elementwise ops and their gradients, FP32: cpu/elementwise_kernels.h's loops at
// the CPU's widest vectors, and fill.
#include <string>

#include "cpu/cpu_features.h"
#include "cpu/elementwise_kernels.h"
#include "cpu/op_args.h"

namespace sgrt::cpu {

bool elementwise_run(const ElementwiseArgs& e) {
#if defined(__x86_64__)
  // GELU's divide is most of a GPT step's elementwise time: wider vectors take more
  // lanes per divide (bench_train's GPT step).
  if (active_isa() >= Isa::avx512) return elementwise_avx512(e);
  if (active_isa() >= Isa::avx2) return elementwise_avx2(e);
#endif
  return elementwise_impl::run(e);
}

Status k_elementwise(const OpArgs& a) {
  const bool two = a.in.size() > 1;
  const ElementwiseArgs e{a.code, a.in[0].f(), two ? a.in[1].f() : nullptr, a.out[0].f(), a.out[0].n,
                          a.code == OpCode::Scale ? static_cast<float>(a.attrs->f("alpha")) : 0.0f};
  if (!elementwise_run(e)) return Status::Runtime("elementwise kernel given " + std::string(op_info(a.code).name));
  return Status::Ok();
}

Status k_fill(const OpArgs& a) {
  float v = static_cast<float>(a.attrs->f("value"));
  float* y = a.out[0].f();
  for (int64_t i = 0; i < a.out[0].n; ++i) y[i] = v;
  return Status::Ok();
}

}  // namespace sgrt::cpu
