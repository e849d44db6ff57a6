// Embedding lookup (a row gather) and its gradient, a scatter-add into the
// table's shape. The scatter is split by columns, each thread walking the tokens
// in order, so repeated ids sum in a fixed order on any thread count.
#include <cstring>
#include <string>

#include "cpu/gguf_decode.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

Status check_ids(const OpArgs& a, const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t r = 0; r < n; ++r)
    if (ids[r] < 0 || ids[r] >= vocab)
      return Status::Runtime(std::string(op_info(a.code).name) + ": id " + std::to_string(ids[r]) + " at position " +
                             std::to_string(r) + " is outside [0, " + std::to_string(vocab) + ")");
  return Status::Ok();
}

}  // namespace

Status k_embedding(const OpArgs& a) {
  if (a.code == OpCode::Embedding) {
    // table [V, D] (f32, or a frozen q8_0 / q4_1 one decoded row by row), ids [N] -> y [N, D]
    const DType tt = a.in[0].type->dtype;
    const int32_t* ids = a.in[1].i32();
    int64_t vocab = a.in[0].shape()[0], d = a.in[0].shape()[1], n = a.in[1].n;
    SG_TRY(check_ids(a, ids, n, vocab));
    float* y = a.out[0].f();
    parallel_for(n, std::max<int64_t>(1, 8192 / d), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        if (dtype_is_block(tt)) gguf_decode_run(tt, a.in[0].data, ids[r] * d, d, y + r * d);
        else std::memcpy(y + r * d, a.in[0].f() + ids[r] * d, sizeof(float) * d);
    });
    return Status::Ok();
  }
  // ids [N], dy [N, D] -> dtable [V, D]
  const int32_t* ids = a.in[0].i32();
  const float* dy = a.in[1].f();
  int64_t n = a.in[0].n, d = a.out[0].shape()[1], vocab = a.out[0].shape()[0];
  SG_TRY(check_ids(a, ids, n, vocab));
  float* dt = a.out[0].f();
  std::memset(dt, 0, sizeof(float) * a.out[0].n);
  parallel_for(d, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < n; ++r) {
      const float* src = dy + r * d;
      float* dst = dt + ids[r] * d;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
