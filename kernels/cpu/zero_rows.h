// Rows of a row-major matrix that are all zero, and moving rows about.
//
// A fine-tune's gradients have whole rows of exact zeros: the loss masks an
// instruction's prompt and the padding after its response, and the padding's
// gradients stay zero all the way back (causal attention: no later token reads
// them). gemm() multiplies only the other rows of such an A (gemm.cpp).
// Elements are 1, 2 or 4 bytes of a sign-magnitude format (e4m3, e5m2, bf16,
// f32): zero when every bit but the top one is.
#pragma once
#include <cstdint>

namespace sgrt::cpu {

// The rows of a [m, k] (row stride ld elements of `bytes` each) holding a non-zero
// (a NaN is one), in increasing order, into kept[0, count); returns count. A row
// is read until its first non-zero, a few cache lines at a time, so a dense
// matrix costs little.
int64_t nonzero_rows(const void* a, int bytes, int64_t m, int64_t k, int64_t ld, int64_t* kept);

// out [n, k] (row stride k) = the rows rows[0, n) of a (row stride ld), elements
// of `bytes` each.
void gather_rows(const void* a, int bytes, int64_t ld, int64_t k, const int64_t* rows, int64_t n, void* out);

// Moves the f32 c's rows [first, last) (width n, stride ldc) to rows
// kept[first, last), in place: kept is increasing with kept[i] >= i, so going
// from the last row down, a row is moved before anything lands on it.
void spread_rows(float* c, int64_t ldc, int64_t n, const int64_t* kept, int64_t first, int64_t last);

}  // namespace sgrt::cpu
