// Causal multi-head self-attention, forward and backward, fused. q and y are
// [B, T, H*Dh], k and v [B, T, Hkv*Dh] (grouped-query attention: query head h
// reads kv head h / (H / Hkv); Hkv = H is plain multi-head attention). Head h
// of batch b is the [T, Dh] slice at b*T*C + h*Dh with row stride C (Ckv for k,
// v). The forward runs each (b, h) on one thread, the backward each (b, kv
// head), so that the heads sharing a kv head accumulate dk, dv on one thread: the scores S = Q K^T / sqrt(Dh) go
// to a per-thread [T, T] tile, are turned into probabilities by a max-shifted
// softmax, and multiply V. The forward saves only the per-row log-sum-exp
// lse [B, H, T]; the backward recomputes P = exp(S - lse) from it.
// kv_attention is the forward for decoding: it appends k, v [B, T, Ckv] to the
// caches [B, Tmax, Ckv] at rows pos.., and query t (position pos + t) attends
// to the cache rows 0..pos+t.
#include <cmath>
#include <cstring>

#include "cpu/fast_math.h"
#include "cpu/gemm.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/row_reduce.h"

namespace sgrt::cpu {
namespace {

struct Dims {
  int64_t B, T, C, H, Dh, Ckv, Hkv;
  float scale;  // 1 / sqrt(Dh)
  int64_t q_off(int64_t b, int64_t h) const { return b * T * C + h * Dh; }
  int64_t kv_off(int64_t b, int64_t h) const { return b * T * Ckv + h / (H / Hkv) * Dh; }  // h: the query head
};

Dims dims_of(const OpArgs& a) {
  const Shape& s = a.in[0].shape();
  int64_t h = a.attrs->i("n_head"), dh = s[2] / h, ckv = a.in[1].shape()[2];
  return {s[0], s[1], s[2], h, dh, ckv, ckv / dh, 1.f / std::sqrt(static_cast<float>(dh))};
}

// Scratch slots 0 and 1 belong to the GEMM's packing.
constexpr int kTileP = 2, kTileDP = 3;

// S = scale * Q K^T for one head's first n rows: [n, n], row stride n; only
// S[i, j <= i] is written for sure (the GEMM skips tiles above the diagonal).
void scores(const Dims& d, int64_t n, const float* q, const float* k, float* s) {
  gemm_f32(false, true, n, n, d.Dh, d.scale, q, d.C, k, d.Ckv, 0.f, s, n, nullptr, Triangle::c_lower);
}

// Softmax of row[0, n) in place, zeros in row[n, width); returns the log-sum-exp.
// The max and sum are row_reduce.h's (the same bits on every ISA).
float softmax_prefix(float* row, int64_t n, int64_t width) {
  float m = row_max(row, n);
  for (int64_t j = 0; j < n; ++j) row[j] = fast_exp(row[j] - m);
  float sum = row_sum(row, n);
  float inv = 1.f / sum;
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  for (int64_t j = n; j < width; ++j) row[j] = 0.f;
  return m + std::log(sum);
}

void attention_forward(const OpArgs& a) {
  Dims d = dims_of(a);
  const float *q = a.in[0].f(), *k = a.in[1].f(), *v = a.in[2].f();
  float *y = a.out[0].f(), *lse = a.out[1].f();
  parallel_for(d.B * d.H, 1, [&](int64_t b0, int64_t b1) {
    float* p = static_cast<float*>(thread_scratch(kTileP, sizeof(float) * d.T * d.T));
    for (int64_t bh = b0; bh < b1; ++bh) {
      int64_t off = d.q_off(bh / d.H, bh % d.H), kv = d.kv_off(bh / d.H, bh % d.H);
      scores(d, d.T, q + off, k + kv, p);
      for (int64_t i = 0; i < d.T; ++i) lse[bh * d.T + i] = softmax_prefix(p + i * d.T, i + 1, d.T);
      gemm_f32(false, false, d.T, d.Dh, d.T, 1.f, p, d.T, v + kv, d.Ckv, 0.f, y + off, d.C, nullptr,
               Triangle::a_lower);
    }
  });
}

// One head's rows [0, n) after which dy is zero (a padding suffix: the loss
// reads nothing there). Causal attention lets no earlier row read a later one,
// so the head's backward is that of its first n rows, and rows from n on get
// zero gradients: the full sums' values, their terms there all zero.
int64_t live_rows(const Dims& d, const float* dy) {
  int64_t n = d.T;
  for (; n > 0; --n) {
    const float* row = dy + (n - 1) * d.C;
    bool zero = true;
    for (int64_t j = 0; j < d.Dh; ++j) zero &= row[j] == 0.f;
    if (!zero) break;
  }
  return n;
}

// dV = P^T dY;  dP = dY V^T;  dS = P * (dP - rowsum(dY * Y));  dQ = scale dS K;  dK = scale dS^T Q.
void attention_backward(const OpArgs& a) {
  Dims d = dims_of(a);
  const float *q = a.in[0].f(), *k = a.in[1].f(), *v = a.in[2].f(), *y = a.in[3].f(), *lse = a.in[4].f(),
              *dy = a.in[5].f();
  float *dq = a.out[0].f(), *dk = a.out[1].f(), *dv = a.out[2].f();
  int64_t group = d.H / d.Hkv;
  parallel_for(d.B * d.Hkv, 1, [&](int64_t b0, int64_t b1) {
    float* p = static_cast<float*>(thread_scratch(kTileP, sizeof(float) * d.T * d.T));
    float* ds = static_cast<float*>(thread_scratch(kTileDP, sizeof(float) * d.T * d.T));
    for (int64_t bk = b0; bk < b1; ++bk) {
      for (int64_t g = 0; g < group; ++g) {
        int64_t b = bk / d.Hkv, h = (bk % d.Hkv) * group + g, bh = b * d.H + h;
        int64_t off = d.q_off(b, h), kv = d.kv_off(b, h);
        float acc = g == 0 ? 0.f : 1.f;  // the group's heads sum into dk, dv
        // The [n, n] problem of the live rows; the tiles p and ds have row stride n.
        const int64_t n = live_rows(d, dy + off);
        for (int64_t i = n; i < d.T; ++i) {
          std::memset(dq + off + i * d.C, 0, sizeof(float) * d.Dh);
          if (g == 0) {
            std::memset(dk + kv + i * d.Ckv, 0, sizeof(float) * d.Dh);
            std::memset(dv + kv + i * d.Ckv, 0, sizeof(float) * d.Dh);
          }
        }
        if (n == 0) continue;
        scores(d, n, q + off, k + kv, p);
        for (int64_t i = 0; i < n; ++i) {
          float* row = p + i * n;
          float l = lse[bh * d.T + i];
          for (int64_t j = 0; j <= i; ++j) row[j] = fast_exp(row[j] - l);
          for (int64_t j = i + 1; j < n; ++j) row[j] = 0.f;
        }
        // P and dS are zero above the diagonal: P^T and dS^T are upper triangular.
        gemm_f32(true, false, n, d.Dh, n, 1.f, p, n, dy + off, d.C, acc, dv + kv, d.Ckv, nullptr, Triangle::a_upper);
        gemm_f32(false, true, n, n, d.Dh, 1.f, dy + off, d.C, v + kv, d.Ckv, 0.f, ds, n, nullptr, Triangle::c_lower);
        for (int64_t i = 0; i < n; ++i) {
          const float *dyr = dy + off + i * d.C, *yr = y + off + i * d.C;
          float D = row_dot(dyr, yr, d.Dh);
          float *srow = ds + i * n, *prow = p + i * n;
          for (int64_t j = 0; j <= i; ++j) srow[j] = prow[j] * (srow[j] - D);
          for (int64_t j = i + 1; j < n; ++j) srow[j] = 0.f;
        }
        gemm_f32(false, false, n, d.Dh, n, d.scale, ds, n, k + kv, d.Ckv, 0.f, dq + off, d.C, nullptr, Triangle::a_lower);
        gemm_f32(true, false, n, d.Dh, n, d.scale, ds, n, q + off, d.C, acc, dk + kv, d.Ckv, nullptr, Triangle::a_upper);
      }
    }
  });
}

// q [B, T, C]; k, v [B, T, Ckv]; caches [B, Tmax, Ckv] (out[1], out[2] are in[3], in[4]).
Status kv_attention(const OpArgs& a) {
  Dims d = dims_of(a);
  const int64_t tmax = a.in[3].shape()[1], pos = a.in[5].i32()[0], len = pos + d.T;  // cache rows attended
  if (pos < 0 || len > tmax)
    return Status::Invalid("kv_attention: positions " + std::to_string(pos) + ".." + std::to_string(len - 1) +
                           " do not fit the cache of " + std::to_string(tmax) + " rows");
  const float *q = a.in[0].f(), *k = a.in[1].f(), *v = a.in[2].f();
  float *y = a.out[0].f(), *kc = a.out[1].f(), *vc = a.out[2].f();
  for (int64_t b = 0; b < d.B; ++b) {
    std::memcpy(kc + (b * tmax + pos) * d.Ckv, k + b * d.T * d.Ckv, sizeof(float) * d.T * d.Ckv);
    std::memcpy(vc + (b * tmax + pos) * d.Ckv, v + b * d.T * d.Ckv, sizeof(float) * d.T * d.Ckv);
  }
  parallel_for(d.B * d.H, 1, [&](int64_t b0, int64_t b1) {
    float* p = static_cast<float*>(thread_scratch(kTileP, sizeof(float) * d.T * len));
    for (int64_t bh = b0; bh < b1; ++bh) {
      int64_t b = bh / d.H, h = bh % d.H, off = d.q_off(b, h), kv = b * tmax * d.Ckv + h / (d.H / d.Hkv) * d.Dh;
      gemm_f32(false, true, d.T, len, d.Dh, d.scale, q + off, d.C, kc + kv, d.Ckv, 0.f, p, len);
      for (int64_t i = 0; i < d.T; ++i) softmax_prefix(p + i * len, pos + i + 1, len);
      gemm_f32(false, false, d.T, d.Dh, len, 1.f, p, len, vc + kv, d.Ckv, 0.f, y + off, d.C);
    }
  });
  return Status::Ok();
}

}  // namespace

Status k_attention(const OpArgs& a) {
  if (a.code == OpCode::KvAttention) return kv_attention(a);
  if (a.code == OpCode::Attention) attention_forward(a);
  else attention_backward(a);
  return Status::Ok();
}

}  // namespace sgrt::cpu
