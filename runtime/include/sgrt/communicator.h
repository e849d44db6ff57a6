// The ranks of a data-parallel run and what they exchange (docs/distributed.md).
// A transport (MPI; a single process) implements a few primitives; the
// reductions are built on them here, once, so that every transport sums in
// the same fixed rank order and every rank ends with the same bits. No call
// aborts: a transport failure or a peer silent past the timeout is a Status.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "sgrt/status.h"

namespace sgrt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;  // "mpi", "single process"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // send holds size() blocks of `block` bytes, block i for rank i; recv gets
  // size() blocks, block i from rank i.
  virtual Status alltoall(const void* send, size_t block, void* recv) = 0;
  // recv gets size() blocks of `block` bytes, block i being rank i's send.
  virtual Status allgather(const void* send, size_t block, void* recv) = 0;
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;
  // Ends this rank's part once the run succeeded on every rank (MPI_Finalize).
  // A rank that fails exits without it, and mpirun then ends the others.
  virtual Status finish() { return Status::Ok(); }
};

std::unique_ptr<Communicator> single_process_communicator();

// Whether this process was started by mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE,
// or PMI_SIZE of other launchers), and with how many ranks.
bool launched_by_mpirun(int* ranks);

// How an element of a reduced vector travels: 4 bytes as is (fp32), or
// rounded to BF16 (2 bytes), E5M2 or E4M3 (1 byte; the values must already be
// scaled into the format's range).
enum class Wire { f32, bf16, e5m2, e4m3 };
size_t wire_bytes(Wire w);

// The elementwise sum (or max) over ranks of data[0..n). Slice i of the
// vector belongs to rank i: it receives every rank's copy of its slice
// (alltoall), combines them in rank order 0, 1, ..., N-1 in FP32, and an
// allgather shares the results. Each rank sends 2 (N-1)/N x n x wire_bytes
// bytes, a ring all-reduce's figure, and every rank gets the same bits.
// `scale` multiplies a sum before it goes back on the wire (1/N: a mean that
// fits wherever the inputs did). A NaN on any rank gives NaN everywhere.
// Vectors of at most 4 KiB from all ranks together take one allgather instead
// (every rank combines all of it, in the same order: the same bits).
Status allreduce_sum(Communicator& c, float* data, size_t n, Wire wire = Wire::f32, float scale = 1.0f,
                     uint64_t* bytes_sent = nullptr);
Status allreduce_max(Communicator& c, float* data, size_t n, uint64_t* bytes_sent = nullptr);

}  // namespace sgrt
