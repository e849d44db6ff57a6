// The CPU transpose against the definition y[i_0 .. i_r] = x at the permuted index,
// written out here with explicit loops: ragged 32 x 32 tiles, batched, and perms
// whose last axis keeps stride 1 (the strided walk) or does not (the tiled copy).
// broadcast_to and slice against theirs: last axes contiguous (row copies),
// repeated (fills) or neither. reshape: every element copied, split across threads.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "sgrt/ops.h"

using namespace sgrt;

namespace {

std::vector<float> transpose(const std::vector<float>& x, const Shape& xs, const std::vector<int64_t>& perm) {
  Shape ys(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) ys[k] = xs[perm[k]];
  TensorType xt{xs, DType::f32}, yt{ys, DType::f32};
  std::vector<float> y(x.size(), -1.0f);
  Attrs attrs;
  attrs.set_ints("perm", perm);
  cpu::OpArgs a;
  a.code = OpCode::Transpose;
  a.attrs = &attrs;
  a.in.push_back({const_cast<float*>(x.data()), &xt, static_cast<int64_t>(x.size())});
  a.out.push_back({y.data(), &yt, static_cast<int64_t>(y.size())});
  const Status st = cpu::k_layout(a);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return y;
}

// y = op(x) through k_layout, x's elements numbered by their index.
std::vector<float> layout(OpCode code, const Shape& xs, const Shape& ys, const Attrs& attrs) {
  TensorType xt{xs, DType::f32}, yt{ys, DType::f32};
  std::vector<float> x(numel(xs)), y(numel(ys), -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  cpu::OpArgs a;
  a.code = code;
  a.attrs = &attrs;
  a.in.push_back({x.data(), &xt, static_cast<int64_t>(x.size())});
  a.out.push_back({y.data(), &yt, static_cast<int64_t>(y.size())});
  const Status st = cpu::k_layout(a);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return y;
}

// Calls fn(i, index) for every row-major index of shape s.
template <class F>
void each_index(const Shape& s, F fn) {
  std::vector<int64_t> o(s.size(), 0);
  for (int64_t i = 0; i < numel(s); ++i) {
    fn(i, o);
    for (size_t k = s.size(); k-- > 0;) {
      if (++o[k] < s[k]) break;
      o[k] = 0;
    }
  }
}

}  // namespace

TEST_CASE("broadcast_to and slice equal their definitions, on 1 and 2 threads") {
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    INFO(threads << " thread(s)");
    // Input shapes broadcast to [8, 50, 300] (several parallel chunks of rows).
    const Shape out{8, 50, 300};
    for (const Shape& xs : {Shape{300}, Shape{8, 1, 300}, Shape{50, 1}, Shape{8, 50, 1}, Shape{1}}) {
      INFO("broadcast from rank " << xs.size() << ", last " << xs.back());
      const std::vector<float> y = layout(OpCode::BroadcastTo, xs, out, Attrs{});
      int64_t wrong = 0;
      each_index(out, [&](int64_t i, const std::vector<int64_t>& o) {
        int64_t src = 0;  // the input index: out's trailing axes, size-1 axes at 0
        for (size_t k = 0; k < xs.size(); ++k) {
          const int64_t ok = o[out.size() - xs.size() + k];
          src = src * xs[k] + (xs[k] == 1 ? 0 : ok);
        }
        wrong += y[i] != static_cast<float>(src);
      });
      CHECK(wrong == 0);
    }
    const Shape xs{6, 40, 700};
    const std::vector<std::pair<std::vector<int64_t>, Shape>> windows = {
        {{0, 0, 0}, {6, 40, 700}}, {{1, 3, 0}, {4, 30, 700}}, {{2, 0, 5}, {3, 40, 600}}, {{0, 39, 699}, {6, 1, 1}}};
    for (const auto& [starts, sizes] : windows) {
      Attrs at;
      at.set_ints("starts", starts).set_ints("sizes", std::vector<int64_t>(sizes.begin(), sizes.end()));
      const std::vector<float> y = layout(OpCode::Slice, xs, sizes, at);
      int64_t wrong = 0;
      each_index(sizes, [&](int64_t i, const std::vector<int64_t>& o) {
        int64_t src = 0;
        for (size_t k = 0; k < xs.size(); ++k) src = src * xs[k] + starts[k] + o[k];
        wrong += y[i] != static_cast<float>(src);
      });
      INFO("slice from " << starts[0] << " " << starts[1] << " " << starts[2]);
      CHECK(wrong == 0);
    }
  }
  cpu::set_num_threads(0);
}

TEST_CASE("transpose equals its definition for every perm of rank 2 and 3, on 1 and 2 threads") {
  const Shape shapes[] = {{70, 45}, {1, 33}, {33, 1}, {3, 40, 65}, {2, 1, 31}, {5, 64, 32}};
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (const Shape& xs : shapes) {
      int64_t n = 1;
      for (int64_t d : xs) n *= d;
      std::vector<float> x(n);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);  // each value its own index
      std::vector<std::vector<int64_t>> perms = xs.size() == 2
          ? std::vector<std::vector<int64_t>>{{1, 0}, {0, 1}}
          : std::vector<std::vector<int64_t>>{{0, 2, 1}, {2, 1, 0}, {1, 0, 2}, {2, 0, 1}, {1, 2, 0}};
      for (const std::vector<int64_t>& perm : perms) {
        const std::vector<float> y = transpose(x, xs, perm);
        std::string name;
        for (int64_t d : xs) name += std::to_string(d) + " ";
        name += "perm";
        for (int64_t p : perm) name += " " + std::to_string(p);
        INFO(name << ", " << threads << " thread(s)");
        // Walk the output in row-major order; the input index of output (o_0 .. o_r)
        // puts o_k at axis perm[k].
        const size_t r = xs.size();
        std::vector<int64_t> o(r, 0), xi(r);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          for (size_t k = 0; k < r; ++k) xi[perm[k]] = o[k];
          int64_t src = 0;
          for (size_t k = 0; k < r; ++k) src = src * xs[k] + xi[k];
          wrong += y[i] != static_cast<float>(src);
          for (size_t k = r; k-- > 0;) {  // next output index
            if (++o[k] < xs[perm[k]]) break;
            o[k] = 0;
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
  cpu::set_num_threads(0);
}

TEST_CASE("reshape copies every element, in pieces across 1 and 2 threads") {
  // 256 KiB pieces: sizes below one, at a boundary and past it by less than a float's worth.
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 16, (int64_t{3} << 16) + 7}) {
      CAPTURE(threads);
      CAPTURE(n);
      const std::vector<float> y = layout(OpCode::Reshape, Shape{n}, Shape{1, n}, Attrs{});
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) wrong += y[i] != static_cast<float>(i);
      CHECK(wrong == 0);
    }
  }
  cpu::set_num_threads(0);
}
