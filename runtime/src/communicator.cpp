#include "sgrt/communicator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "formats/formats.h"

namespace sgrt {
namespace {

class SingleProcess final : public Communicator {
 public:
  const char* name() const override { return "single process"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status alltoall(const void* send, size_t block, void* recv) override { return copy(send, block, recv); }
  Status allgather(const void* send, size_t block, void* recv) override { return copy(send, block, recv); }
  Status broadcast(void*, size_t, int root) override {
    return root == 0 ? Status::Ok() : Status::Invalid("broadcast from rank " + std::to_string(root) + " of 1");
  }
  Status barrier() override { return Status::Ok(); }

 private:
  static Status copy(const void* send, size_t block, void* recv) {
    if (block > 0) std::memmove(recv, send, block);
    return Status::Ok();
  }
};

void encode(Wire w, const float* x, size_t n, uint8_t* out) {
  switch (w) {
    case Wire::f32: std::memcpy(out, x, n * sizeof(float)); break;
    case Wire::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t c = fmt::bf16_encode(x[i]);
        std::memcpy(out + 2 * i, &c, 2);
      }
      break;
    case Wire::e5m2:
      for (size_t i = 0; i < n; ++i) out[i] = fmt::e5m2_encode(x[i]);
      break;
    case Wire::e4m3:
      for (size_t i = 0; i < n; ++i) out[i] = fmt::e4m3_encode(x[i]);
      break;
  }
}

void decode(Wire w, const uint8_t* in, size_t n, float* x) {
  switch (w) {
    case Wire::f32: std::memcpy(x, in, n * sizeof(float)); break;
    case Wire::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t c;
        std::memcpy(&c, in + 2 * i, 2);
        x[i] = fmt::bf16_decode(c);
      }
      break;
    case Wire::e5m2:
      for (size_t i = 0; i < n; ++i) x[i] = fmt::e5m2_decode(in[i]);
      break;
    case Wire::e4m3:
      for (size_t i = 0; i < n; ++i) x[i] = fmt::e4m3_decode(in[i]);
      break;
  }
}

enum class Combine { sum, max };

float combine(Combine op, float acc, float v) {
  if (op == Combine::sum) return acc + v;
  return std::isnan(acc) || std::isnan(v) ? NAN : std::max(acc, v);
}

// `ranks` encoded copies of `count` elements, `stride` bytes apart, combined in
// rank order, scaled, and rounded to the wire into `out`.
void combine_in_rank_order(Wire wire, Combine op, float scale, const uint8_t* copies, size_t ranks, size_t count,
                           size_t stride, float* out) {
  std::vector<float> from(count);
  decode(wire, copies, count, out);
  for (size_t r = 1; r < ranks; ++r) {
    decode(wire, copies + r * stride, count, from.data());
    for (size_t i = 0; i < count; ++i) out[i] = combine(op, out[i], from[i]);
  }
  if (scale != 1.0f)
    for (size_t i = 0; i < count; ++i) out[i] *= scale;
}

// Up to this many bytes gathered from all ranks, every rank combines the whole
// vector itself after one allgather: one collective instead of two for the
// step's small agreements (its loss, the gradients' amaxes), with the same
// order and bits.
constexpr size_t kGatherWhole = 4096;

Status reduce_piece(Communicator& c, float* data, size_t n, Wire wire, Combine op, float scale, uint64_t* bytes_sent) {
  const size_t ranks = static_cast<size_t>(c.size()), wb = wire_bytes(wire);
  if (n * ranks * wb <= kGatherWhole) {
    std::vector<uint8_t> send(n * wb), recv(n * wb * ranks);
    encode(wire, data, n, send.data());
    SG_TRY(c.allgather(send.data(), n * wb, recv.data()));
    combine_in_rank_order(wire, op, scale, recv.data(), ranks, n, n * wb, data);
    encode(wire, data, n, send.data());  // what the two-phase path's allgather would carry
    decode(wire, send.data(), n, data);
    if (bytes_sent) *bytes_sent += (ranks - 1) * n * wb;
    return Status::Ok();
  }
  // Reduce-scatter by alltoall (rank i gets every rank's copy of slice i), then allgather.
  const size_t slice = (n + ranks - 1) / ranks;
  std::vector<float> padded(slice * ranks, 0.0f);
  std::copy(data, data + n, padded.begin());
  std::vector<uint8_t> send(slice * ranks * wb), recv(send.size());
  encode(wire, padded.data(), padded.size(), send.data());
  SG_TRY(c.alltoall(send.data(), slice * wb, recv.data()));
  std::vector<float> mine(slice);
  combine_in_rank_order(wire, op, scale, recv.data(), ranks, slice, slice * wb, mine.data());
  encode(wire, mine.data(), slice, send.data());
  SG_TRY(c.allgather(send.data(), slice * wb, recv.data()));
  decode(wire, recv.data(), n, data);
  if (bytes_sent) *bytes_sent += 2 * (ranks - 1) * slice * wb;
  return Status::Ok();
}

// In pieces of at most 2^24 elements: bounded buffers, and blocks far below
// MPI's int counts.
Status reduce(Communicator& c, float* data, size_t n, Wire wire, Combine op, float scale, uint64_t* bytes_sent) {
  constexpr size_t kPiece = size_t{1} << 24;
  for (size_t at = 0; at < n; at += kPiece)
    SG_TRY(reduce_piece(c, data + at, std::min(kPiece, n - at), wire, op, scale, bytes_sent));
  return Status::Ok();
}

}  // namespace

std::unique_ptr<Communicator> single_process_communicator() { return std::make_unique<SingleProcess>(); }

bool launched_by_mpirun(int* ranks) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v && *v) {
      *ranks = std::atoi(v);
      return *ranks > 0;
    }
  *ranks = 1;
  return false;
}

size_t wire_bytes(Wire w) { return w == Wire::f32 ? 4 : w == Wire::bf16 ? 2 : 1; }

Status allreduce_sum(Communicator& c, float* data, size_t n, Wire wire, float scale, uint64_t* bytes_sent) {
  return reduce(c, data, n, wire, Combine::sum, scale, bytes_sent);
}

Status allreduce_max(Communicator& c, float* data, size_t n, uint64_t* bytes_sent) {
  return reduce(c, data, n, Wire::f32, Combine::max, 1.0f, bytes_sent);
}

}  // namespace sgrt
