// The MPI transport of sgrt/communicator.h (OpenMPI; built when CMake finds
// MPI, option SGRT_MPI). It stays outside libsgrt, whose dependencies are
// libc, libstdc++, libm and zlib only; the sgrt tool and the tests link it.
#pragma once
#include <memory>

#include "sgrt/communicator.h"

namespace sgrt {

// MPI_Init and MPI_COMM_WORLD. Every collective waits at most
// `timeout_seconds` for the other ranks, then fails naming the operation: a
// rank that died or hangs ends the run instead of blocking it forever.
Status open_mpi_communicator(double timeout_seconds, std::unique_ptr<Communicator>* out);

}  // namespace sgrt
