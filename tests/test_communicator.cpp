// The reductions of sgrt/communicator.h over N ranks, run here as N threads
// on an in-memory transport: the sum is taken in rank order 0, 1, ..., N-1
// (checked with values whose float sum depends on the order), every rank gets
// the same bits, vectors that do not split evenly are whole, a NaN anywhere is
// NaN everywhere in a max, and the BF16 / E5M2 / E4M3 wires round as the CUDA
// toolkit's host conversions do (the independent oracle of NUMERICS.md §1).
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "sgrt/communicator.h"

#ifdef SGRT_HAVE_CUDA_ORACLE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

using namespace sgrt;

namespace {

// N ranks in one process: each publishes its send buffer, all wait, each
// copies what is its own, all wait again.
struct Group {
  explicit Group(int n) : sends(n), sync(n) {}
  std::vector<const void*> sends;
  std::barrier<> sync;
};

class ThreadRank final : public Communicator {
 public:
  ThreadRank(Group* g, int rank) : g_(g), rank_(rank) {}
  const char* name() const override { return "threads"; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(g_->sends.size()); }
  Status alltoall(const void* send, size_t block, void* recv) override {
    return exchange(send, [&](int r, const uint8_t* from) {
      std::memcpy(static_cast<uint8_t*>(recv) + r * block, from + rank_ * block, block);
    });
  }
  Status allgather(const void* send, size_t block, void* recv) override {
    return exchange(send, [&](int r, const uint8_t* from) { std::memcpy(static_cast<uint8_t*>(recv) + r * block, from, block); });
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    return exchange(data, [&](int r, const uint8_t* from) {
      if (r == root && rank_ != root) std::memcpy(data, from, bytes);
    });
  }
  Status barrier() override { return exchange(nullptr, [](int, const uint8_t*) {}); }

 private:
  Status exchange(const void* mine, const std::function<void(int, const uint8_t*)>& take) {
    g_->sends[rank_] = mine;
    g_->sync.arrive_and_wait();
    for (int r = 0; r < size(); ++r) take(r, static_cast<const uint8_t*>(g_->sends[r]));
    g_->sync.arrive_and_wait();
    return Status::Ok();
  }
  Group* g_;
  int rank_;
};

// data[r] is rank r's vector; each becomes its reduction, computed by one thread per rank.
void on_ranks(std::vector<std::vector<float>>* data, const std::function<Status(Communicator&, std::vector<float>&)>& fn) {
  const int n = static_cast<int>(data->size());
  Group g(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ThreadRank c(&g, r);
      st[r] = fn(c, (*data)[r]);
    });
  for (std::thread& t : threads) t.join();
  for (const Status& s : st) REQUIRE_MESSAGE(s.ok(), s.message());
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("allreduce_sum adds in rank order, the same bits on every rank, for any length") {
  // In float, (1e8 + 1) - 1e8 is 0 but 1e8 - 1e8 + 1 is 1: only rank order 0, 1, 2 gives 0.
  const float a[3] = {1e8f, 1.0f, -1e8f};
  // Up to 4 KiB in all, one allgather of whole vectors; above, slices (alltoall, allgather).
  for (size_t n : {1, 2, 3, 5, 7, 64, 1000, 1001}) {
    CAPTURE(n);
    std::vector<std::vector<float>> data(3, std::vector<float>(n));
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < n; ++i) data[r][i] = a[r] * static_cast<float>(i + 1);
    uint64_t bytes = 0;
    on_ranks(&data, [&](Communicator& c, std::vector<float>& v) {
      uint64_t sent = 0;
      Status st = allreduce_sum(c, v.data(), v.size(), Wire::f32, 1.0f, &sent);
      if (c.rank() == 0) bytes = sent;
      return st;
    });
    for (size_t i = 0; i < n; ++i) {
      float in_order = (a[0] * (i + 1) + a[1] * (i + 1)) + a[2] * (i + 1);
      for (int r = 0; r < 3; ++r) CHECK(same_bits(data[r][i], in_order));
    }
    if (n * 3 * 4 <= 4096)
      CHECK(bytes == 2 * n * 4);  // the whole vector to each of the 2 others
    else
      CHECK(bytes == 2 * 2 * ((n + 2) / 3) * 4);  // two phases, slices of ceil(n / 3) to the 2 others
  }
}

TEST_CASE("allreduce_max: the largest value, NaN when any rank has NaN") {
  for (size_t copies : {1, 400}) {  // 4 values (one allgather), 1600 (slices)
    std::vector<std::vector<float>> data(3);
    const float given[3][4] = {{1, -5, 2, NAN}, {3, -7, 2, 0}, {-1, -6, 9, 1}};
    for (int r = 0; r < 3; ++r)
      for (size_t k = 0; k < copies; ++k) data[r].insert(data[r].end(), given[r], given[r] + 4);
    on_ranks(&data, [](Communicator& c, std::vector<float>& v) { return allreduce_max(c, v.data(), v.size()); });
    for (const std::vector<float>& v : data)
      for (size_t k = 0; k < v.size(); k += 4) {
        CHECK(v[k] == 3);
        CHECK(v[k + 1] == -5);
        CHECK(v[k + 2] == 9);
        CHECK(std::isnan(v[k + 3]));
      }
  }
}

TEST_CASE("one rank: the single-process communicator leaves f32 data as it is") {
  std::unique_ptr<Communicator> c = single_process_communicator();
  std::vector<float> v{1.5f, -0.1f, 3e-39f};
  std::vector<float> before = v;
  REQUIRE(allreduce_sum(*c, v.data(), v.size()).ok());
  for (size_t i = 0; i < v.size(); ++i) CHECK(same_bits(v[i], before[i]));
}

#ifdef SGRT_HAVE_CUDA_ORACLE
TEST_CASE("the BF16, E5M2 and E4M3 wires round each rank's values and the mean as CUDA's host conversions do") {
  auto fp8 = [](float x, __nv_fp8_interpretation_t f) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, f), f)));
  };
  auto bf16 = [](float x) { return __bfloat162float(__float2bfloat16_rn(x)); };
  for (size_t n : {101, 3001}) {  // one allgather; slices
    for (Wire w : {Wire::bf16, Wire::e5m2, Wire::e4m3}) {
      auto round = [&](float x) { return w == Wire::bf16 ? bf16(x) : fp8(x, w == Wire::e5m2 ? __NV_E5M2 : __NV_E4M3); };
      // In the format's range, as the exchange scales them (E4M3's largest: 448),
      // down to E4M3's subnormals.
      const float mag = w == Wire::e4m3 ? 0.4f : 1.0f;
      std::vector<std::vector<float>> data(2, std::vector<float>(n));
      for (size_t i = 0; i < n; ++i) {
        data[0][i] = std::sin(0.37f * i) * 1000.0f * mag;
        data[1][i] = std::cos(0.91f * i) * 300.0f * mag + 0.123f;
      }
      std::vector<float> expected(n);
      for (size_t i = 0; i < n; ++i) expected[i] = round((round(data[0][i]) + round(data[1][i])) * 0.5f);
      on_ranks(&data, [&](Communicator& c, std::vector<float>& v) { return allreduce_sum(c, v.data(), v.size(), w, 0.5f); });
      for (size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(same_bits(data[0][i], expected[i]));
        CHECK(same_bits(data[1][i], expected[i]));
      }
    }
  }
}
#endif
