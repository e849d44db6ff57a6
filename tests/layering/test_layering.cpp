// Links only sgrt_kernels and sgrt_core (tests/CMakeLists.txt): if a kernel
// called into the runtime, the IR or the compiler this would not link. It runs
// the CPU kernel table on an add and a matmul to show the seam works alone.
#include <doctest/doctest.h>

#include <vector>

#include "cpu/op_args.h"

using namespace sgrt;

namespace {

Status run(OpCode code, const Attrs& attrs, std::vector<std::vector<float>*> in, std::vector<TensorType> in_types,
           std::vector<float>* out, const TensorType& out_type) {
  std::vector<DType> ins(in.size(), DType::f32);
  cpu::CpuKernel k = cpu::find_cpu_kernel(code, ins, {DType::f32});
  REQUIRE(static_cast<bool>(k));
  cpu::OpArgs a{code, &attrs, {}, {}};
  for (size_t i = 0; i < in.size(); ++i) a.in.push_back({in[i]->data(), &in_types[i], numel(in_types[i].shape)});
  a.out.push_back({out->data(), &out_type, numel(out_type.shape)});
  return k(a);
}

}  // namespace

TEST_CASE("the CPU kernels run with nothing but sgrt_core beneath them") {
  TensorType v{{4}, DType::f32};
  std::vector<float> x{1, 2, 3, 4}, y{10, 20, 30, 40}, z(4);
  REQUIRE(run(OpCode::Add, {}, {&x, &y}, {v, v}, &z, v).ok());
  CHECK(z == std::vector<float>{11, 22, 33, 44});

  TensorType a{{2, 2}, DType::f32};
  std::vector<float> m{1, 2, 3, 4}, p(4);  // [[1, 2], [3, 4]]^2 = [[7, 10], [15, 22]]
  REQUIRE(run(OpCode::MatMul, {}, {&m, &m}, {a, a}, &p, a).ok());
  CHECK(p == std::vector<float>{7, 10, 15, 22});
}
