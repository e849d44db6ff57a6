#include "sgrt/mpi_communicator.h"

#include <mpi.h>
#include <time.h>

#include <chrono>
#include <climits>
#include <string>

namespace sgrt {
namespace {

Status mpi_error(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Runtime(std::string("MPI ") + what + ": " + std::string(text, static_cast<size_t>(len)));
}

class Mpi final : public Communicator {
 public:
  explicit Mpi(double timeout) : timeout_(timeout) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status alltoall(const void* send, size_t block, void* recv) override {
    SG_TRY(fits("alltoall", block));
    MPI_Request req;
    SG_TRY(check("alltoall", MPI_Ialltoall(send, count(block), MPI_BYTE, recv, count(block), MPI_BYTE, MPI_COMM_WORLD, &req)));
    return wait("alltoall", &req);
  }
  Status allgather(const void* send, size_t block, void* recv) override {
    SG_TRY(fits("allgather", block));
    MPI_Request req;
    SG_TRY(check("allgather", MPI_Iallgather(send, count(block), MPI_BYTE, recv, count(block), MPI_BYTE, MPI_COMM_WORLD, &req)));
    return wait("allgather", &req);
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    SG_TRY(fits("broadcast", bytes));
    MPI_Request req;
    SG_TRY(check("broadcast", MPI_Ibcast(data, count(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req)));
    return wait("broadcast", &req);
  }
  Status barrier() override {
    MPI_Request req;
    SG_TRY(check("barrier", MPI_Ibarrier(MPI_COMM_WORLD, &req)));
    return wait("barrier", &req);
  }
  Status finish() override {
    if (finished_) return Status::Ok();
    finished_ = true;
    return check("finalize", MPI_Finalize());
  }

 private:
  // Counts are ints in MPI: callers send larger buffers in pieces.
  static int count(size_t bytes) { return static_cast<int>(bytes); }
  static Status fits(const char* what, size_t bytes) {
    if (bytes <= static_cast<size_t>(INT_MAX)) return Status::Ok();
    return Status::Invalid(std::string("MPI ") + what + " of " + std::to_string(bytes) + " bytes: over MPI's int count");
  }
  static Status check(const char* what, int code) { return code == MPI_SUCCESS ? Status::Ok() : mpi_error(what, code); }

  // Polls the request: a blocking MPI call could not give up on a dead peer.
  // Spins briefly (a step's exchanges are quick), then sleeps between polls so
  // a waiting rank leaves the cores to the ranks still computing.
  Status wait(const char* what, MPI_Request* req) {
    auto start = std::chrono::steady_clock::now();
    for (long polls = 0;; ++polls) {
      int done = 0;
      SG_TRY(check(what, MPI_Test(req, &done, MPI_STATUS_IGNORE)));
      if (done) return Status::Ok();
      if (polls < 1000) continue;
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_)
        return Status::Runtime(std::string("no answer from the other ranks in ") + what + " for " +
                               std::to_string(static_cast<long>(timeout_)) + " s (--comm-timeout): a rank died or hangs");
      timespec nap{0, 50000};  // 50 us
      nanosleep(&nap, nullptr);
    }
  }

  double timeout_;
  int rank_ = 0, size_ = 1;
  bool finished_ = false;
};

}  // namespace

Status open_mpi_communicator(double timeout_seconds, std::unique_ptr<Communicator>* out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return mpi_error("init", rc);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // failures become a Status, not an abort
  *out = std::make_unique<Mpi>(timeout_seconds);
  return Status::Ok();
}

}  // namespace sgrt
