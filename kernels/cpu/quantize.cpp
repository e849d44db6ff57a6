#include "cpu/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/quantize_kernels.h"
#include "formats/formats.h"
#include "formats/fp8_tile.h"
#include "formats/hadamard.h"
#include "formats/nvfp4.h"

namespace sgrt::cpu {
namespace {

const fmt::Spec* spec_for(DType t) {
  switch (t) {
    case DType::e4m3: return &fmt::kE4M3;
    case DType::e5m2: return &fmt::kE5M2;
    case DType::e2m1: return &fmt::kE2M1;
    case DType::f16: return &fmt::kF16;
    case DType::bf16: return &fmt::kBF16;
    default: return nullptr;
  }
}

// NaN-sticky max of |values|.
float nan_max(float m, float a) { return (a > m || a != a) ? a : m; }

// The inner loops (amax, encode) at the widest ISA this CPU runs.
const quant_impl::Kernels& simd() { return quant_impl::kernels_for(active_isa()); }

// Encodes elements [i0, i0 + n) as x[i] * mult[(i - i0) / mblock] (EncodeArgs's
// mult_block) into s's saturated and underflow counts.
void encode_span(const float* x, int64_t i0, int64_t n, const float* mult, int64_t mblock,
                 const QuantParams& p, void* q, QuantStats& s) {
  const quant_impl::EncodeCounts c =
      simd().encode({x + i0, i0, n, mult, mblock, p.fmt, p.stochastic, p.seed, q});
  s.saturated += c.saturated;
  s.underflow += c.underflow;
}

void merge(QuantStats& into, const QuantStats& s) {
  into.amax = nan_max(into.amax, s.amax);
  into.saturated += s.saturated;
  into.underflow += s.underflow;
  into.kept_scales += s.kept_scales;
}

// Runs fn(r0, r1, stats) over chunks of rows in parallel, then merges the per-chunk
// stats in chunk order. Chunks start on even elements so E2M1 bytes are never shared.
template <class F>
QuantStats over_rows(int64_t rows, int64_t cols, F&& fn) {
  int64_t grain = cols > 0 ? (1 << 16) / cols + 1 : rows;
  if (cols % 2) grain += grain % 2;
  std::vector<QuantStats> part(rows > 0 ? (rows + grain - 1) / grain : 0);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) { fn(r0, r1, part[r0 / grain]); });
  QuantStats total;
  for (const QuantStats& s : part) merge(total, s);
  return total;
}

// Blocks along a row (MX, NVFP4's 1x16, fp8's 1x128 tiles) do not see where a row
// ends when it holds whole blocks: [rows, cols] quantizes as [rows / f, cols f],
// the same codes and scales, for any f dividing rows. The widest such row up to
// kWideRow elements (1 when blocks do not tile the row): a short row's calls (a
// block amax, the scales, an encode) are paid once per wide row instead.
constexpr int64_t kWideRow = 4096;
int64_t rows_per_wide_row(int64_t rows, int64_t cols, int64_t block) {
  int64_t f = 1;
  if (cols % block != 0) return f;
  for (int64_t d = 2; d <= rows && d * cols <= kWideRow; ++d)
    if (rows % d == 0) f = d;
  return f;
}

// Row r of quantize_nvfp4: formats/nvfp4.h's nvfp4_block_scale for each of its
// blocks into codes (ceil(cols / 16)), then its E2M1 codes into q. The whole
// blocks go through Kernels::nvfp4_blocks, which also writes their codes when
// they round to nearest and the row starts on a byte; stochastic rounding, an
// odd start and a partial last block through encode_span (mult: scratch of
// ceil(cols / 16) floats).
void nvfp4_row(const float* x, int64_t r, int64_t cols, float ts, const QuantParams& p, uint8_t* codes,
               float* mult, void* q, QuantStats& s) {
  const float* xr = x + r * cols;
  const int64_t i0 = r * cols, whole = cols / kNvfp4Block, rest = cols - whole * kNvfp4Block;
  const bool fused = !p.stochastic && i0 % 2 == 0;
  quant_impl::EncodeCounts c;
  simd().nvfp4_blocks(xr, whole, ts, codes, fused ? static_cast<uint8_t*>(q) + i0 / 2 : nullptr, &c);
  s.saturated += c.saturated;
  s.underflow += c.underflow;
  if (rest > 0) {
    const float* xb = xr + whole * kNvfp4Block;
    codes[whole] = static_cast<uint8_t>(fmt::nvfp4_block_scale(xb, rest, simd().amax(xb, rest), ts));
  }
  const int64_t first = fused ? whole : 0, nb = whole + (rest > 0);
  for (int64_t b = first; b < nb; ++b) mult[b - first] = fmt::nvfp4_mult(codes[b], ts);
  encode_span(x, i0 + first * kNvfp4Block, cols - first * kNvfp4Block, mult, kNvfp4Block, p, q, s);
}

// amax[b] = max |x| over rows [r0, r1) and columns [b block, (b + 1) block) of
// the [rows, cols] x (a NaN where any is), the last block possibly partial; row
// is scratch of as many floats as amax (unused for one row).
void group_block_amax(const float* x, int64_t r0, int64_t r1, int64_t cols, int64_t block, float* amax, float* row) {
  const int64_t whole = cols / block, nb = (cols + block - 1) / block;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    float* out = r == r0 ? amax : row;
    simd().block_amax(xr, whole, block, out);
    if (whole < nb) out[whole] = simd().amax(xr + whole * block, cols - whole * block);
    if (r > r0)
      for (int64_t b = 0; b < nb; ++b) amax[b] = nan_max(amax[b], row[b]);
  }
}

// NVFP4's FP32 tensor scale from the whole tensor's amax (formats/nvfp4.h), also
// stored in *tensor_scale; *head gets the amax and whether the old scale was kept.
float nvfp4_tensor_scale_of(const float* x, int64_t rows, int64_t cols, float* tensor_scale, QuantStats* head) {
  *head = over_rows(rows, cols, [&](int64_t r0, int64_t r1, QuantStats& s) {
    s.amax = simd().amax(x + r0 * cols, (r1 - r0) * cols);
  });
  bool kept;
  *tensor_scale = fmt::nvfp4_tensor_scale(head->amax, *tensor_scale, &kept);
  head->kept_scales = kept;
  return *tensor_scale;
}

QuantStats invalid(const char* why) {
  QuantStats s;
  s.error = why;
  return s;
}

}  // namespace

int32_t scale_exponent(float amax, float fmt_max, int margin, int32_t prev, bool* kept) {
  *kept = !(amax > 0) || std::isinf(amax);
  if (*kept) return prev;
  // fmt_max / amax = (mf / ma) * 2^(ef - ea) with mf, ma in [0.5, 1): the floor of its
  // log2 is ef - ea, minus one when mf < ma. Exact, unlike log2 of a rounded quotient.
  // Normal numbers read both from their bits (frexp was a call per MX block).
  const uint32_t ab = fmt::float_bits(amax), fb = fmt::float_bits(fmt_max);
  int ea, ef;
  bool below;
  if ((ab >> 23) != 0 && (fb >> 23) != 0) {
    ea = static_cast<int>(ab >> 23) - 126, ef = static_cast<int>(fb >> 23) - 126;
    below = (fb & 0x7FFFFFu) < (ab & 0x7FFFFFu);
  } else {
    below = std::frexp(fmt_max, &ef) < std::frexp(amax, &ea);
  }
  const int e = ef - ea - (below ? 1 : 0) - margin;
  return e < -126 ? -126 : e > 127 ? 127 : e;
}

QuantStats quantize(const float* x, int64_t rows, int64_t cols, QuantAxis axis,
                    const QuantParams& p, bool update_scale, void* q, int32_t* exps) {
  if (!spec_for(p.fmt)) return invalid("quantize: fmt must be e4m3, e5m2, e2m1, f16 or bf16");
  const float fmax = format_max(p.fmt);
  if (axis == QuantAxis::row) {
    return over_rows(rows, cols, [&](int64_t r0, int64_t r1, QuantStats& s) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * cols;
        const float a = simd().amax(xr, cols);
        s.amax = nan_max(s.amax, a);
        if (update_scale) {
          bool kept;
          exps[r] = scale_exponent(a, fmax, p.margin, exps[r], &kept);
          s.kept_scales += kept;
        }
        const float m = fmt::exp2i(exps[r]);
        encode_span(x, r * cols, cols, &m, 0, p, q, s);
      }
    });
  }
  // Per tensor or per column: the scales need the amax of all rows first.
  std::vector<float> mult(axis == QuantAxis::col ? cols : 1);
  QuantStats head;
  if (axis == QuantAxis::col) {
    std::vector<uint32_t> a(cols, 0u);  // |x|'s bits: a NaN is the largest
    simd().amax_cols(x, rows, cols, a.data());
    for (int64_t c = 0; c < cols; ++c) {
      const float ac = std::bit_cast<float>(a[c]);
      head.amax = nan_max(head.amax, ac);
      bool kept = false;
      if (update_scale) exps[c] = scale_exponent(ac, fmax, p.margin, exps[c], &kept);
      head.kept_scales += kept;
      mult[c] = fmt::exp2i(exps[c]);
    }
  } else if (update_scale) {
    head = over_rows(rows, cols, [&](int64_t r0, int64_t r1, QuantStats& s) {
      s.amax = simd().amax(x + r0 * cols, (r1 - r0) * cols);
    });
    bool kept;
    exps[0] = scale_exponent(head.amax, fmax, p.margin, exps[0], &kept);
    head.kept_scales = kept;
  }
  if (axis == QuantAxis::tensor) mult[0] = fmt::exp2i(exps[0]);
  // Delayed per-tensor scaling measures the amax in this same pass.
  const bool measure = axis == QuantAxis::tensor && !update_scale && p.measure_amax;
  const int64_t ms = axis == QuantAxis::col ? 1 : 0;
  QuantStats body = over_rows(rows, cols, [&](int64_t r0, int64_t r1, QuantStats& s) {
    for (int64_t r = r0; r < r1; ++r) {
      if (measure) s.amax = nan_max(s.amax, simd().amax(x + r * cols, cols));
      encode_span(x, r * cols, cols, mult.data(), ms, p, q, s);
    }
  });
  merge(body, head);
  return body;
}

QuantStats quantize_mx(const float* x, int64_t rows, int64_t cols, const QuantParams& p,
                       void* q, uint8_t* scales) {
  if (p.fmt != DType::e4m3 && p.fmt != DType::e5m2 && p.fmt != DType::e2m1)
    return invalid("quantize_mx: fmt must be e4m3, e5m2 or e2m1");
  const int64_t f = rows_per_wide_row(rows, cols, kMxBlock);
  if (f > 1) return quantize_mx(x, rows / f, cols * f, p, q, scales);
  const float fmax = format_max(p.fmt);
  const int64_t nb = (cols + kMxBlock - 1) / kMxBlock;
  return over_rows(rows, cols, [&](int64_t r0, int64_t r1, QuantStats& s) {
    std::vector<float> mult(nb);  // each block's multiplier: one encode a row
    std::vector<float> amax(nb);
    for (int64_t r = r0; r < r1; ++r) {
      group_block_amax(x, r, r + 1, cols, kMxBlock, amax.data(), nullptr);
      s.amax = nan_max(s.amax, simd().amax(amax.data(), nb));
      s.kept_scales += simd().mx_scales(amax.data(), nb, fmax, p.margin, scales + r * nb, mult.data());
      encode_span(x, r * cols, cols, mult.data(), kMxBlock, p, q, s);
    }
  });
}

QuantStats quantize_nvfp4(const float* x, int64_t rows, int64_t cols, const QuantParams& p,
                          void* q, uint8_t* block_scales, float* tensor_scale) {
  const int64_t f = rows_per_wide_row(rows, cols, kNvfp4Block);
  if (f > 1) return quantize_nvfp4(x, rows / f, cols * f, p, q, block_scales, tensor_scale);
  QuantParams pe = p;
  pe.fmt = DType::e2m1;
  QuantStats head;
  const float ts = nvfp4_tensor_scale_of(x, rows, cols, tensor_scale, &head);
  const int64_t nb = (cols + kNvfp4Block - 1) / kNvfp4Block;
  QuantStats body = over_rows(rows, cols, [&](int64_t r0, int64_t r1, QuantStats& s) {
    std::vector<float> mult(nb);
    for (int64_t r = r0; r < r1; ++r) nvfp4_row(x, r, cols, ts, pe, block_scales + r * nb, mult.data(), q, s);
  });
  merge(body, head);
  return body;
}

QuantStats quantize_nvfp4_16x16(const float* x, int64_t rows, int64_t cols, const QuantParams& p,
                                void* q, uint8_t* block_scales, float* tensor_scale) {
  QuantParams pe = p;
  pe.fmt = DType::e2m1;
  QuantStats head;
  const float ts = nvfp4_tensor_scale_of(x, rows, cols, tensor_scale, &head);
  const int64_t nb = (cols + kNvfp4Block - 1) / kNvfp4Block, groups = (rows + kNvfp4Block - 1) / kNvfp4Block;
  // One task per 16 rows: a block's amax spans all of them; one encode a row.
  QuantStats body = over_rows(groups, kNvfp4Block * cols, [&](int64_t g0, int64_t g1, QuantStats& s) {
    std::vector<float> amax(nb), row(nb), mult(nb);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * kNvfp4Block, r1 = r0 + kNvfp4Block < rows ? r0 + kNvfp4Block : rows;
      group_block_amax(x, r0, r1, cols, kNvfp4Block, amax.data(), row.data());
      for (int64_t b = 0; b < nb; ++b) {
        const uint32_t code = fmt::nvfp4_block_scale_six(amax[b], ts);
        block_scales[g * nb + b] = static_cast<uint8_t>(code);
        mult[b] = fmt::nvfp4_mult(code, ts);
      }
      for (int64_t r = r0; r < r1; ++r) encode_span(x, r * cols, cols, mult.data(), kNvfp4Block, pe, q, s);
    }
  });
  merge(body, head);
  return body;
}

void hadamard_rows(const float* x, int64_t rows, int64_t cols, float* out) {
  const int64_t full = cols / fmt::kHadamardBlock * fmt::kHadamardBlock;
  parallel_for(rows, (1 << 14) / (cols + 1) + 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      simd().hadamard16_blocks(x + r * cols, out + r * cols, full / fmt::kHadamardBlock);
      std::copy(x + r * cols + full, x + (r + 1) * cols, out + r * cols + full);
    }
  });
}

QuantStats quantize_fp8_tiles(const float* x, int64_t rows, int64_t cols, int64_t tile_rows,
                              const QuantParams& p, void* q, float* scales) {
  if (p.fmt != DType::e4m3 && p.fmt != DType::e5m2) return invalid("quantize_fp8_tiles: fmt must be e4m3 or e5m2");
  if (tile_rows != 1 && tile_rows != kFp8Tile) return invalid("quantize_fp8_tiles: tiles are 1 or 128 rows high");
  const int64_t f = tile_rows == 1 ? rows_per_wide_row(rows, cols, kFp8Tile) : 1;
  if (f > 1) return quantize_fp8_tiles(x, rows / f, cols * f, 1, p, q, scales);
  const float fmax = format_max(p.fmt);
  const int64_t nb = (cols + kFp8Tile - 1) / kFp8Tile, groups = (rows + tile_rows - 1) / tile_rows;
  // One task per group of tile_rows rows: a block's amax spans all its rows. Each
  // row's block amaxes in one call, their maxima over the rows, then one encode a
  // row (a call per 128-element piece was 19% of an fp8-block GPT step).
  QuantStats st = over_rows(groups, tile_rows * cols, [&](int64_t g0, int64_t g1, QuantStats& s) {
    std::vector<float> amax(nb), row(nb), mult(nb);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * tile_rows, r1 = r0 + tile_rows < rows ? r0 + tile_rows : rows;
      group_block_amax(x, r0, r1, cols, kFp8Tile, amax.data(), row.data());
      for (int64_t b = 0; b < nb; ++b) {
        s.amax = nan_max(s.amax, amax[b]);
        bool kept;
        const float scale = scales[g * nb + b] = fmt::fp8_tile_scale(amax[b], fmax, &kept);
        mult[b] = fmt::fp8_tile_mult(scale);
        s.kept_scales += kept;
      }
      for (int64_t r = r0; r < r1; ++r) encode_span(x, r * cols, cols, mult.data(), kFp8Tile, p, q, s);
    }
  });
  st.saturated = 0;  // only amax * mult's rounding, or a non-finite tile (kept, NaN scale)
  return st;
}

}  // namespace sgrt::cpu
