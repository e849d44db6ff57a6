// quantize (cpu/quant_ops.cpp k_quantize over cpu/quantize.cpp): x f32 -> codes q
// (8, 4 or 16 bits, packed low bits first), scales, and the state's counters,
// amax history and NVFP4 tensor scale, bit for bit as the CPU.
// off = {x, q, scale, state}; n = numel; p = {rows, cols, q's dtype};
// dim = {granularity, mode, history, margin, static exponent, update, scratch word}.
// Scratch, 5 words, zero between ops: the amax as |x| bits (atomicMax: exact in
// any order, NaN above inf), saturated, underflowed and kept counts (atomicAdd:
// integers), NVFP4's tensor scale. OP is the phase, one dispatch each:
//   0: the tensor's amax (per-tensor and NVFP4 granularity)
//   1: scales, one invocation per group (per tensor: one; per row; per column;
//      MX / NVFP4: per word of four block scales; 1x128 tiles / 128x128 blocks:
//      per FP32 scale)
//   2: codes, one invocation per output word; saturation and underflow counts
//   3: the state (counters left alone when update = 0: eval programs); clears the scratch
#version 450
#include "quant.glsl"
layout(local_size_x = 256) in;

const uint G_TENSOR = 0u, G_ROW = 1u, G_COL = 2u, G_MX = 3u, G_NVFP4 = 4u, G_TILE = 5u, G_BLOCK2D = 6u;  // QuantGranularity
const uint M_STATIC = 1u, M_DELAYED = 3u;                                 // ScaleMode (scale_spec.h)
const uint ST_SAT = 0u, ST_KEPT = 1u, ST_POS = 2u, ST_TSCALE = 3u, ST_UNDER = 4u, ST_HEADER = 5u;
const uint S_AMAX = 0u, S_SAT = 1u, S_UNDER = 2u, S_KEPT = 3u, S_TSCALE = 4u, S_WORDS = 5u;

#define X pc.off[0]
#define Q pc.off[1]
#define SC pc.off[2]
#define STATE pc.off[3]
#define ROWS pc.p[0]
#define COLS pc.p[1]
#define FMT pc.p[2]
#define GRAN pc.dim[0]
#define MODE pc.dim[1]
#define HIST pc.dim[2]
#define MARGIN int(pc.dim[3])
#define SCR pc.dim[6]

shared uint red[256];

// The workgroup's max (add = false) or sum of v; called in uniform control flow.
uint wg_reduce(uint v, bool add) {
  uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) red[t] = add ? red[t] + red[t + s] : max(red[t], red[t + s]);
    barrier();
  }
  uint r = red[0];
  barrier();
  return r;
}

// max |x| over count elements from `first`, `stride` apart, as bits.
uint amax_span(uint first, uint count, uint stride) {
  uint m = 0u;
  for (uint k = 0u; k < count; ++k) m = max(m, U[X + first + k * stride] & 0x7FFFFFFFu);
  return m;
}

uint block_size() { return GRAN == G_MX ? 32u : 16u; }
uint blocks_per_row() { return (COLS + block_size() - 1u) / block_size(); }

// NVFP4's scales, formats/nvfp4.h line for line (precise: no fused multiply-adds,
// as on the CPU and CUDA). The tensor scale from the tensor's amax bits: amax /
// (6 * 256) (room for four-over-six's larger scale), at least 2^-118; the
// previous one when amax is 0, inf or NaN, 1 if that is not positive.
float nvfp4_tensor_scale(uint a, float prev, out bool kept) {
  kept = a == 0u || a >= 0x7F800000u;
  if (kept) return prev > 0.0 && floatBitsToUint(prev) < 0x7F800000u ? prev : 1.0;
  return uintBitsToFloat(max(floatBitsToUint(div_rn(uintBitsToFloat(a), 1536.0)), 0x04800000u));  // 2^-118
}
// A block's multiplier under E4M3 scale `code` (0 for a zero scale).
float nvfp4_mult(uint code, float ts) {
  precise float d = fmt_decode(FMT_E4M3, code) * ts;
  return d > 0.0 ? div_rn(1.0, d) : 0.0;
}
// Sum of ((x - x') 2^k)^2 over the block's n elements from `first`, 2^k putting its
// amax (bits a) in [1, 2).
float nvfp4_block_sse(uint first, uint n, uint a, uint code, float ts) {
  float p = pow2(clamp(127 - int(a >> 23), -126, 127)), m = nvfp4_mult(code, ts);
  precise float unit = (fmt_decode(FMT_E4M3, code) * ts) * p;
  precise float sse = 0.0;
  for (uint k = 0u; k < n; ++k) {
    float x = F[X + first + k];
    precise float back = fmt_decode(FMT_E2M1, fmt_encode(FMT_E2M1, x * m, false, 0u)) * unit;
    precise float d = x * p - back;
    sse = sse + d * d;
  }
  return sse;
}
// The block scale, four over six: amax mapped to 6 or to 4, whichever errs less.
uint nvfp4_block_code(uint first, uint n, uint a, float ts) {
  precise float six_ts = 6.0 * ts, four_ts = 4.0 * ts;
  uint six = fmt_encode(FMT_E4M3, div_rn(uintBitsToFloat(a), six_ts), false, 0u);
  uint four = fmt_encode(FMT_E4M3, div_rn(uintBitsToFloat(a), four_ts), false, 0u);
  if (four == six) return six;
  return nvfp4_block_sse(first, n, a, four, ts) < nvfp4_block_sse(first, n, a, six, ts) ? four : six;
}

// Blockwise FP8, formats/fp8_tile.h line for line: the FP32 scale amax / fmax
// from amax's bits; NaN for a NaN or inf amax, 1 when it is not a normal float
// (both kept). The multiplier from the stored scale: 1 / scale, 1 under NaN.
float fp8_tile_scale(uint a, uint fmax, out bool kept) {
  kept = true;
  if (a >= 0x7F800000u) return uintBitsToFloat(0x7FC00000u);
  float s = div_rn(uintBitsToFloat(a), uintBitsToFloat(fmax));
  if (floatBitsToUint(s) < 0x00800000u) return 1.0;
  kept = false;
  return s;
}
float fp8_tile_mult(float s) { return (floatBitsToUint(s) & 0x7FFFFFFFu) > 0x7F800000u ? 1.0 : div_rn(1.0, s); }
uint tile_rows() { return GRAN == G_TILE ? 1u : 128u; }
uint tiles_per_row() { return (COLS + 127u) / 128u; }

// Phase 1, per tensor: static, delayed (from the history's max once it is full)
// or current; returns 1 when the previous exponent was kept and that counts.
uint tensor_exponent(uint fmax) {
  int prev = I[SC];
  bool kept = false;
  if (MODE == M_STATIC) {
    I[SC] = int(pc.dim[4]);
  } else if (MODE == M_DELAYED && HIST > 0u && F[STATE + ST_POS] >= float(HIST)) {
    float h = 0.0;
    for (uint k = 0u; k < HIST; ++k) h = max(h, F[STATE + ST_HEADER + k]);
    bool unused;
    I[SC] = scale_exponent(floatBitsToUint(h), fmax, MARGIN, prev, unused);
  } else {
    I[SC] = scale_exponent(scratch[SCR + S_AMAX], fmax, MARGIN, prev, kept);
  }
  return kept ? 1u : 0u;
}

void scales() {
  uint fmax = fmt_max_bits(FMT), amax = 0u, kept = 0u;
  if (GRAN == G_TENSOR) {
    if (gl_GlobalInvocationID.x == 0u) kept = tensor_exponent(fmax);
  } else if (GRAN == G_ROW || GRAN == G_COL) {
    FOR_EACH_INDEX(g, GRAN == G_ROW ? ROWS : COLS) {
      uint a = GRAN == G_ROW ? amax_span(g * COLS, COLS, 1u) : amax_span(g, ROWS, COLS);
      bool k;
      I[SC + g] = scale_exponent(a, fmax, MARGIN, I[SC + g], k);
      amax = max(amax, a);
      kept += k ? 1u : 0u;
    }
  } else if (GRAN == G_TILE || GRAN == G_BLOCK2D) {
    uint th = tile_rows(), nb = tiles_per_row();
    FOR_EACH_INDEX(t, ((ROWS + th - 1u) / th) * nb) {
      uint r0 = (t / nb) * th, c0 = (t % nb) * 128u, a = 0u;
      for (uint r = r0; r < min(r0 + th, ROWS); ++r) a = max(a, amax_span(r * COLS + c0, min(128u, COLS - c0), 1u));
      bool k;
      F[SC + t] = fp8_tile_scale(a, fmax, k);
      amax = max(amax, a);
      kept += k ? 1u : 0u;
    }
  } else {
    uint bs = block_size(), nb = blocks_per_row(), count = ROWS * nb;
    float ts = 0.0;
    if (GRAN == G_NVFP4) {  // the tensor scale: amax / (6 * 256), or the previous one
      bool k;
      ts = nvfp4_tensor_scale(scratch[SCR + S_AMAX], F[STATE + ST_TSCALE], k);
      if (gl_GlobalInvocationID.x == 0u) {
        scratch[SCR + S_TSCALE] = floatBitsToUint(ts);
        kept = k ? 1u : 0u;
      }
    }
    FOR_EACH_INDEX(w, (count + 3u) / 4u) {
      uint word = 0u;
      for (uint j = 0u; j < 4u && 4u * w + j < count; ++j) {
        uint b = 4u * w + j, c0 = (b % nb) * bs;
        uint a = amax_span((b / nb) * COLS + c0, min(bs, COLS - c0), 1u);
        uint code;
        if (GRAN == G_MX) {  // E8M0 of 2^-e; OCP's NaN scale for a block holding a NaN or an inf
          bool k;
          code = uint(127 - scale_exponent(a, fmax, MARGIN, 0, k));
          if (a >= 0x7F800000u) code = 0xFFu;
          amax = max(amax, a);
          kept += k ? 1u : 0u;
        } else {
          code = nvfp4_block_code((b / nb) * COLS + c0, min(bs, COLS - c0), a, ts);
        }
        word |= code << (8u * j);
      }
      U[SC + w] = word;
    }
  }
  amax = wg_reduce(amax, false);
  kept = wg_reduce(kept, true);
  if (gl_LocalInvocationID.x == 0u) {
    if (amax != 0u) atomicMax(scratch[SCR + S_AMAX], amax);
    if (kept != 0u) atomicAdd(scratch[SCR + S_KEPT], kept);
  }
}

// x times its group's multiplier (element r * COLS + c).
float scaled(float x, uint r, uint c, float ts) {
  if (GRAN == G_TILE || GRAN == G_BLOCK2D) return x * fp8_tile_mult(F[SC + (r / tile_rows()) * tiles_per_row() + c / 128u]);
  if (GRAN == G_NVFP4) return x * nvfp4_mult(load_code(SC, r * blocks_per_row() + c / 16u, 8u), ts);
  uint mx = GRAN == G_MX ? load_code(SC, r * blocks_per_row() + c / 32u, 8u) : 127u;
  int e = GRAN == G_TENSOR ? I[SC] : GRAN == G_ROW ? I[SC + r] : GRAN == G_COL ? I[SC + c]
        : mx == 0xFFu ? 0 : 127 - int(mx);  // a NaN-scaled MX block encodes with 2^0, as the CPU
  return mul_pow2(x, e);
}

void encode() {
  FmtSpec spec = fmt_of(FMT);
  uint fmax = fmt_max_bits(FMT), bits = dt_bits(FMT), per = 32u / bits;
  uint zero = bits == 4u ? 0x7u : bits == 16u ? 0x7FFFu : 0x7Fu;  // a code's magnitude bits
  float ts = uintBitsToFloat(scratch[SCR + S_TSCALE]);
  uint sat = 0u, under = 0u;
  FOR_EACH_INDEX(w, (pc.n + per - 1u) / per) {
    uint word = 0u;
    for (uint j = 0u; j < per && w * per + j < pc.n; ++j) {
      uint i = w * per + j;
      float x = F[X + i], v = scaled(x, i / COLS, i % COLS, ts);
      uint code = fmt_encode(spec, v, false, 0u), a = floatBitsToUint(v) & 0x7FFFFFFFu;
      sat += a > fmax && a <= 0x7F800000u && GRAN < G_TILE ? 1u : 0u;  // tiles: only 1 / scale's rounding
      under += (floatBitsToUint(x) & 0x7FFFFFFFu) != 0u && (code & zero) == 0u ? 1u : 0u;
      word |= code << (bits * j);
    }
    uint used = min(pc.n - w * per, per) * bits;  // the last word keeps the bits past n, as the CPU
    U[Q + w] = used < 32u ? (U[Q + w] & ~((1u << used) - 1u)) | word : word;
  }
  sat = wg_reduce(sat, true);
  under = wg_reduce(under, true);
  if (gl_LocalInvocationID.x == 0u) {
    if (sat != 0u) atomicAdd(scratch[SCR + S_SAT], sat);
    if (under != 0u) atomicAdd(scratch[SCR + S_UNDER], under);
  }
}

void update_state() {
  if (gl_GlobalInvocationID.x != 0u) return;
  if (pc.dim[5] != 0u) {
    F[STATE + ST_SAT] += float(scratch[SCR + S_SAT]);
    F[STATE + ST_KEPT] += float(scratch[SCR + S_KEPT]);
    F[STATE + ST_UNDER] += float(scratch[SCR + S_UNDER]);
    uint a = scratch[SCR + S_AMAX];
    if (HIST > 0u && a < 0x7F800000u) {
      uint pos = uint(F[STATE + ST_POS]);
      F[STATE + ST_HEADER + pos % HIST] = uintBitsToFloat(a);
      F[STATE + ST_POS] = float(pos + 1u);
    }
  }
  // NVFP4's tensor scale goes with the codes just written: every program stores it.
  if (GRAN == G_NVFP4) F[STATE + ST_TSCALE] = uintBitsToFloat(scratch[SCR + S_TSCALE]);
  for (uint k = 0u; k < S_WORDS; ++k) scratch[SCR + k] = 0u;
}

void main() {
  if (OP == 0u) {
    uint m = 0u;
    FOR_EACH_INDEX(i, pc.n) m = max(m, U[X + i] & 0x7FFFFFFFu);
    m = wg_reduce(m, false);
    if (gl_LocalInvocationID.x == 0u && m != 0u) atomicMax(scratch[SCR + S_AMAX], m);
  } else if (OP == 1u) {
    scales();
  } else if (OP == 2u) {
    encode();
  } else {
    update_state();
  }
}
