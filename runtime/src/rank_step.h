// What train() does differently with several ranks (sgrt/data_parallel.h):
// train_step in parts with the gradient exchanges between them, the state
// every rank must share, and the check that the ranks still agree. With one
// rank (the single-process communicator) every call is the plain step.
#pragma once
#include <string>
#include <vector>

#include "sgrt/communicator.h"
#include "sgrt/data_parallel.h"
#include "sgrt/session.h"

namespace sgrt {

struct ExchangePoint {
  size_t op = 0;           // train_step's op before which ...
  std::vector<int> grads;  // ... these f32 gradients are complete
};
Status exchange_points(const Model& m, std::vector<ExchangePoint>* out);

class RankStep {
 public:
  Status init(Session& s, Communicator& c, GradComm mode);
  // One train_step; on N ranks its gradients become their mean over the ranks.
  Status run(Session& s);
  // After a step: running statistics averaged and amax histories max-reduced
  // over the ranks, so the next step scales alike everywhere.
  Status sync_state(Session& s);
  // Gradient bytes this rank sent in its last step.
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Seconds its exchanges took (waiting for slower ranks included).
  double comm_seconds() const { return comm_seconds_; }

 private:
  Status exchange(Session& s, const std::vector<int>& grads);
  Status gather_weights(Session& s);
  Communicator* comm_ = nullptr;
  GradComm mode_ = GradComm::fp32;
  Wire fp8_wire_ = Wire::e5m2;              // fp8's format (fp8_wire)
  int whole_ = -1;                          // train_step
  std::vector<int> parts_;                  // its parts (N > 1)
  std::vector<std::vector<int>> exchanges_; // gradients exchanged before parts_[i + 1]
  std::vector<int> statistics_, histories_;
  std::vector<std::vector<int>> updated_by_rank_;  // ZeRO-1: the weights and scales each rank's updates write
  size_t gather_block_ = 0;                        // the most bytes of them any rank has
  uint64_t bytes_sent_ = 0;
  double comm_seconds_ = 0;
};

// Rank 0's persistent tensors (parameters, optimizer and scale state, train
// state) to every rank: the ranks start alike, fresh or resumed. Under ZeRO-1
// each rank's moments are its own (zero, or its share of the checkpoint).
Status broadcast_state(Session& s, Communicator& c);
// Fails, naming the rank, unless every rank has the same `value` (a model's
// hash, the data's size): `what` says what it is.
Status check_agree(Communicator& c, uint64_t value, const std::string& what, StatusCode code);
uint64_t model_hash(const Model& m);
// Fails, naming the rank, when parameters, optimizer state or statistics
// differ between ranks (a hash of their bytes, gathered).
Status check_identical(Session& s, Communicator& c);
// ZeRO-1: the moments other ranks keep, to rank 0 for its checkpoint, by
// tensor id (empty for the rest, on the other ranks and without ZeRO).
Status gather_moments(Session& s, Communicator& c, std::vector<std::vector<uint8_t>>* at_lead);

}  // namespace sgrt
