// Softmax cross-entropy (mean over the batch), its gradient, and accuracy;
// the masked loss (mean over the rows a mask weighs) and its gradient.
// logits [N, C] f32, labels [N] i32, mask [N] f32. Rows reduce in row_reduce.h's order.
#include <algorithm>
#include <string>

#include "cpu/fast_math.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/row_reduce.h"

namespace sgrt::cpu {
namespace {

constexpr int64_t kWideRow = 256;  // classes from which the gradient goes a row at a time

// dz's row from z's (dz may be z) with the row's lse and g = dloss / N: each
// element the flat loop's expression in k_classifier below.
SGRT_X86_CLONES void xent_grad_row(const float* z, int64_t c, int32_t label, float lse, float g, float* dz) {
  const float at_label = g * (fast_exp(z[label] - lse) - 1.f);  // read before dz is written
  for (int64_t j = 0; j < c; ++j) dz[j] = g * fast_exp(z[j] - lse);
  dz[label] = at_label;
}

// The labels of the rows that count: every row, or those of nonzero mask.
Status check_labels(const OpArgs& a, int64_t n, int64_t c, const float* mask) {
  const int32_t* lab = a.in[1].i32();
  for (int64_t r = 0; r < n; ++r)
    if ((!mask || mask[r] != 0.f) && (lab[r] < 0 || lab[r] >= c))
      return Status::Runtime(std::string(op_info(a.code).name) + ": label " + std::to_string(lab[r]) + " at row " +
                             std::to_string(r) + " is outside [0, " + std::to_string(c) + ")");
  return Status::Ok();
}

// Rows across threads, a row at a time (vectorized along it): row r's
// gradient times g w_r, w_r = mask[r] (1 without a mask); a row of weight 0 is
// written 0 and never read.
void weighted_grad_rows(const float* z, int64_t n, int64_t c, const int32_t* lab, const float* mask, float g, float* dz) {
  parallel_for(n, std::max<int64_t>(1, 16384 / c), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float w = mask ? mask[r] : 1.f;
      if (w == 0.f) std::fill(dz + r * c, dz + (r + 1) * c, 0.f);
      else xent_grad_row(z + r * c, c, lab[r], row_logsumexp(z + r * c, c), g * w, dz + r * c);
    }
  });
}

// sum_r m_r (lse_r - z_r[label_r]) / sum_r m_r and its gradient
// dloss m_r / sum(m) (softmax(z_r) - onehot): a row of m_r = 0 is never read
// (a language model's prompt and padding rows cost nothing) and its gradient
// row is 0. No row of nonzero m: the loss is 0 / 0 (NaN), the gradient 0.
Status masked_xent(const OpArgs& a, int64_t n, int64_t c) {
  const float* z = a.in[0].f();
  const int32_t* lab = a.in[1].i32();
  const float* m = a.in[2].f();
  double weight = 0;
  for (int64_t r = 0; r < n; ++r) weight += m[r];
  if (a.code == OpCode::MaskedXent) {
    float* term = static_cast<float*>(thread_scratch(0, sizeof(float) * n));
    parallel_for(n, std::max<int64_t>(1, 16384 / c), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        term[r] = m[r] != 0.f ? row_logsumexp(z + r * c, c) - z[r * c + lab[r]] : 0.f;
    });
    double total = 0;
    for (int64_t r = 0; r < n; ++r)
      if (m[r] != 0.f) total += static_cast<double>(m[r]) * term[r];
    a.out[0].f()[0] = static_cast<float>(total / weight);
    return Status::Ok();
  }
  weighted_grad_rows(z, n, c, lab, m, a.in[3].f()[0] / static_cast<float>(weight), a.out[0].f());
  return Status::Ok();
}

}  // namespace

Status k_classifier(const OpArgs& a) {
  int64_t n = a.in[0].shape()[0], c = a.in[0].shape()[1];
  const bool masked = a.code == OpCode::MaskedXent || a.code == OpCode::MaskedXentGrad;
  SG_TRY(check_labels(a, n, c, masked ? a.in[2].f() : nullptr));
  if (masked) return masked_xent(a, n, c);
  const float* z = a.in[0].f();
  const int32_t* lab = a.in[1].i32();
  switch (a.code) {
    case OpCode::SoftmaxXent: {
      float* lse = static_cast<float*>(thread_scratch(0, sizeof(float) * n));
      rows_logsumexp(z, n, c, lse);
      double total = 0;
      for (int64_t r = 0; r < n; ++r) total += lse[r] - z[r * c + lab[r]];
      a.out[0].f()[0] = static_cast<float>(total / static_cast<double>(n));
      return Status::Ok();
    }
    case OpCode::SoftmaxXentGrad: {
      // d/dz mean_r(lse(z_r) - z_r[label]) = (softmax(z_r) - onehot) / N, times dloss.
      float g = a.in[2].f()[0] / static_cast<float>(n);
      float* dz = a.out[0].f();
      if (c >= kWideRow) {
        // Rows long enough to vectorize along (a vocabulary), each element's
        // expression the flat loop's below.
        weighted_grad_rows(z, n, c, lab, nullptr, g, dz);
        return Status::Ok();
      }
      // Each element's row lse beside it, so one flat loop (which vectorizes
      // however short the rows) takes every exp; the labels' terms, which
      // subtract 1, are set aside first and stored after (dz may be z).
      float* lse = static_cast<float*>(thread_scratch(0, sizeof(float) * n * (c + 1)));
      float* lse_at = lse + n;
      rows_logsumexp(z, n, c, lse);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < c; ++j) lse_at[r * c + j] = lse[r];
        lse[r] = g * (fast_exp(z[r * c + lab[r]] - lse[r]) - 1.f);
      }
      for (int64_t i = 0; i < n * c; ++i) dz[i] = g * fast_exp(z[i] - lse_at[i]);  // e - 0 is e
      for (int64_t r = 0; r < n; ++r) dz[r * c + lab[r]] = lse[r];
      return Status::Ok();
    }
    case OpCode::Accuracy: {
      int64_t hits = 0;
      for (int64_t r = 0; r < n; ++r) {
        const float* zr = z + r * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; ++j) if (zr[j] > zr[best]) best = j;
        hits += best == lab[r];
      }
      a.out[0].f()[0] = static_cast<float>(hits) / static_cast<float>(n);
      return Status::Ok();
    }
    default:
      return Status::Runtime("classifier kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
