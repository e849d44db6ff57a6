#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "fnv1a.h"
#include "formats/formats.h"
#include "rank_step.h"
#include "sgrt/checkpoint.h"
#include "sgrt/quant.h"

namespace sgrt {
namespace {

// The largest finite value of an FP8 wire (NUMERICS.md §1).
float fp8_max(Wire w) { return format_max(w == Wire::e4m3 ? DType::e4m3 : DType::e5m2); }

bool is_update(OpCode c) { return c == OpCode::SgdUpdate || c == OpCode::AdamwUpdate; }

// What must be equal on every rank after a step. Scale state is not: its
// counters and last-used scales are each rank's own; nor are ZeRO-1's moments,
// each rank's share.
bool is_shared(const TensorInfo& t) {
  return in_checkpoint(t) && !t.sharded && (t.role == Role::param || t.role == Role::opt_state || t.role == Role::statistic);
}

// The persistent amax-history states (Quantize's second input) of a program.
std::vector<int> amax_histories(const Model& m, int program) {
  std::vector<int> ids;
  for (const OpInfoLoaded& op : m.programs()[program].ops)
    if (op.code == OpCode::Quantize && op.in.size() == 2 && m.tensors()[op.in[1]].type.shape.size() == 1 &&
        m.tensors()[op.in[1]].type.shape[0] > kStateHeader && m.tensors()[op.in[1]].persistent)
      ids.push_back(op.in[1]);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

constexpr size_t kMaxMessage = size_t{1} << 30;  // under MPI's int counts

Status read_f32(const Session& s, int id, std::vector<float>* v) {
  v->resize(s.model().tensors()[id].bytes / sizeof(float));
  return s.read(id, v->data(), v->size() * sizeof(float));
}

}  // namespace

Status parse_grad_comm(const std::string& name, GradComm* out) {
  for (GradComm c : {GradComm::fp32, GradComm::bf16, GradComm::fp8})
    if (name == grad_comm_name(c)) {
      *out = c;
      return Status::Ok();
    }
  return Status::Invalid("--grad-comm expects fp32, bf16 or fp8, got '" + name + "'");
}

const char* grad_comm_name(GradComm c) { return c == GradComm::fp32 ? "fp32" : c == GradComm::bf16 ? "bf16" : "fp8"; }

Wire fp8_wire(const Model& m) {
  bool e4m3 = false;
  for (const TensorInfo& t : m.tensors())
    if (t.role == Role::grad && t.type.dtype == DType::e5m2) return Wire::e5m2;
    else e4m3 |= t.role == Role::grad && t.type.dtype == DType::e4m3;
  return e4m3 ? Wire::e4m3 : Wire::e5m2;
}

std::string grad_comm_label(GradComm c, const Model& m) {
  if (c != GradComm::fp8) return grad_comm_name(c);
  return fp8_wire(m) == Wire::e4m3 ? "fp8 (E4M3)" : "fp8 (E5M2)";
}

std::string train_step_part(size_t i) { return "train_step.part" + std::to_string(i); }

Status exchange_points(const Model& m, std::vector<ExchangePoint>* out) {
  int prog = m.find_program("train_step");
  if (prog < 0) return Status::Invalid(m.label() + ": has no train_step program");
  const std::vector<OpInfoLoaded>& ops = m.programs()[prog].ops;
  auto last_write = [&](int t, size_t before) {
    size_t w = before;
    for (size_t i = 0; i < before; ++i)
      if (std::find(ops[i].out.begin(), ops[i].out.end(), t) != ops[i].out.end()) w = i;
    return w;
  };
  // The f32 gradients the optimizer reads, found from ops every rank keeps
  // (ZeRO-1 drops other ranks' updates): check_finite's operands at the fp32
  // state level, each quantize_grad's f32 input below it.
  std::vector<std::pair<int, size_t>> grads;  // (gradient, the op that reads it for the optimizer)
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].code == OpCode::QuantizeGrad) grads.push_back({ops[i].in[0], i});
    if (ops[i].code == OpCode::CheckFinite && ops[i].attrs.i("norms") == 0)
      for (size_t k = 1; k < ops[i].in.size(); ++k) grads.push_back({ops[i].in[k], i});
  }
  std::map<size_t, std::vector<int>> at;  // op index -> gradients complete before it
  for (auto [g, reader] : grads) {
    size_t w = last_write(g, reader);
    const TensorInfo& t = m.tensors()[g];
    if (w == reader || t.type.dtype != DType::f32)
      return Status::Invalid(ops[reader].loc + ": the gradient " + t.name + " it reads is not an f32 tensor that backward writes");
    size_t r = w + 1;
    while (r < ops.size() && std::find(ops[r].in.begin(), ops[r].in.end(), g) == ops[r].in.end()) ++r;
    at[r].push_back(g);
  }
  if (at.empty()) return Status::Invalid(m.label() + ": its train_step updates no parameter");
  out->clear();
  for (auto& [op, complete] : at) out->push_back({op, complete});
  return Status::Ok();
}

Status split_train_step(const Model& m, std::unique_ptr<Model>* out) {
  std::vector<ExchangePoint> points;
  SG_TRY(exchange_points(m, &points));
  std::vector<uint8_t> bytes(m.file_bytes().begin(), m.file_bytes().end());
  SG_TRY(Model::load_bytes(std::move(bytes), m.label(), out));
  const ProgramInfo& whole = m.programs()[m.find_program("train_step")];
  size_t begin = 0;
  for (size_t i = 0; i <= points.size(); ++i) {
    size_t end = i < points.size() ? points[i].op : whole.ops.size();
    ProgramInfo part{train_step_part(i), {whole.ops.begin() + begin, whole.ops.begin() + end}, whole.peak_bytes};
    (*out)->add_program(std::move(part));
    begin = end;
  }
  return Status::Ok();
}

std::vector<int> update_moments(const OpInfoLoaded& update) {
  if (update.code == OpCode::AdamwUpdate) return {update.in[2], update.in[3]};
  return {update.in[2]};
}

Status plan_zero(const Model& m, int ranks, ZeroPlan* out) {
  int prog = m.find_program("train_step");
  if (prog < 0) return Status::Invalid(m.label() + ": has no train_step program");
  const std::vector<OpInfoLoaded>& ops = m.programs()[prog].ops;
  ZeroPlan plan;
  std::vector<uint64_t> bytes;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!is_update(ops[i].code)) continue;
    plan.updates.push_back(i);
    bytes.push_back(0);
    for (int t : update_moments(ops[i])) bytes.back() += m.tensors()[t].bytes;
  }
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  if (total == 0) return Status::Invalid(m.label() + ": its optimizer keeps no moments (plain SGD): ZeRO-1 has nothing to shard");
  plan.owner.assign(bytes.size(), -1);
  plan.rank_bytes.assign(static_cast<size_t>(ranks), 0);
  for (size_t n = 0; n < bytes.size(); ++n) {
    size_t u = bytes.size();  // the largest unassigned update, the first of equals
    for (size_t i = 0; i < bytes.size(); ++i)
      if (plan.owner[i] < 0 && (u == bytes.size() || bytes[i] > bytes[u])) u = i;
    size_t r = static_cast<size_t>(std::min_element(plan.rank_bytes.begin(), plan.rank_bytes.end()) - plan.rank_bytes.begin());
    plan.owner[u] = static_cast<int>(r);
    plan.rank_bytes[r] += bytes[u];
  }
  *out = std::move(plan);
  return Status::Ok();
}

Status shard_optimizer_state(int ranks, int rank, std::unique_ptr<Model>* m) {
  Model& model = **m;
  ZeroPlan plan;
  SG_TRY(plan_zero(model, ranks, &plan));
  model.keep_step_identity(step_identity(model));  // before its updates go
  const std::vector<OpInfoLoaded>& ops = model.programs()[model.find_program("train_step")].ops;
  std::vector<int> others;
  for (size_t i = 0; i < plan.updates.size(); ++i) {
    const OpInfoLoaded& u = ops[plan.updates[i]];
    for (int t : update_moments(u)) {
      model.set_updated_by(t, plan.owner[i], true);
      if (plan.owner[i] != rank) others.push_back(t);
    }
    model.set_updated_by(u.out.front(), plan.owner[i], false);  // the weight (or its master)
    model.set_updated_by(u.out.back(), plan.owner[i], false);   // its scales
  }
  for (size_t p = 0; p < model.programs().size(); ++p) {  // the other ranks' updates leave every program
    std::vector<OpInfoLoaded> mine;
    for (const OpInfoLoaded& op : model.programs()[p].ops)
      if (!is_update(op.code) || model.tensors()[op.out.front()].updated_by == rank) mine.push_back(op);
    model.set_ops(p, std::move(mine));
  }
  return model.drop_storage(others);
}

Status RankStep::init(Session& s, Communicator& c, GradComm mode) {
  comm_ = &c;
  mode_ = mode;
  const Model& m = s.model();
  fp8_wire_ = fp8_wire(m);
  SG_TRY(s.find_program("train_step", &whole_));
  if (c.size() == 1) return Status::Ok();
  std::vector<ExchangePoint> points;
  SG_TRY(exchange_points(m, &points));
  for (size_t i = 0; i <= points.size(); ++i) {
    int p = m.find_program(train_step_part(i));
    if (p < 0) return Status::Invalid(m.label() + ": train_step is not cut for several ranks (split_train_step)");
    parts_.push_back(p);
    if (i < points.size()) exchanges_.push_back(points[i].grads);
  }
  for (size_t id = 0; id < m.tensors().size(); ++id)
    if (m.tensors()[id].role == Role::statistic && in_checkpoint(m.tensors()[id]) && m.tensors()[id].type.dtype == DType::f32)
      statistics_.push_back(static_cast<int>(id));
  histories_ = amax_histories(m, whole_);
  updated_by_rank_.assign(static_cast<size_t>(c.size()), {});
  std::vector<size_t> block(static_cast<size_t>(c.size()), 0);
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& t = m.tensors()[id];
    if (t.updated_by < 0 || t.sharded) continue;
    if (t.updated_by >= c.size()) return Status::Invalid("the model was sharded (ZeRO-1) for more ranks than run it");
    updated_by_rank_[static_cast<size_t>(t.updated_by)].push_back(static_cast<int>(id));
    block[static_cast<size_t>(t.updated_by)] += t.bytes;
  }
  gather_block_ = *std::max_element(block.begin(), block.end());
  return Status::Ok();
}

Status RankStep::run(Session& s) {
  bytes_sent_ = 0;
  comm_seconds_ = 0;
  if (parts_.empty()) return s.run(whole_);
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (i > 0) {
      auto t0 = std::chrono::steady_clock::now();
      SG_TRY(exchange(s, exchanges_[i - 1]));
      comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    SG_TRY(s.run(parts_[i]));
  }
  if (gather_block_ == 0) return Status::Ok();
  auto t0 = std::chrono::steady_clock::now();
  SG_TRY(gather_weights(s));
  comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

// ZeRO-1: each rank's updated weights and scales, packed in tensor order into
// one block (padded to the largest rank's), allgathered and unpacked.
Status RankStep::gather_weights(Session& s) {
  const Model& m = s.model();
  const size_t ranks = updated_by_rank_.size(), me = static_cast<size_t>(comm_->rank());
  std::vector<uint8_t> send(gather_block_, 0), recv(gather_block_ * ranks);
  size_t at = 0;
  for (int t : updated_by_rank_[me]) {
    SG_TRY(s.read(t, send.data() + at, m.tensors()[t].bytes));
    at += m.tensors()[t].bytes;
  }
  for (size_t piece = 0; piece < gather_block_; piece += kMaxMessage / ranks) {
    // In pieces, each block under MPI's int counts; recv is ranks x block, so gather piece by piece.
    const size_t n = std::min(kMaxMessage / ranks, gather_block_ - piece);
    std::vector<uint8_t> part(n * ranks);
    SG_TRY(comm_->allgather(send.data() + piece, n, part.data()));
    for (size_t r = 0; r < ranks; ++r) std::copy_n(part.data() + r * n, n, recv.data() + r * gather_block_ + piece);
  }
  for (size_t r = 0; r < ranks; ++r) {
    if (r == me) continue;
    at = 0;
    for (int t : updated_by_rank_[r]) {
      SG_TRY(s.write(t, recv.data() + r * gather_block_ + at, m.tensors()[t].bytes));
      at += m.tensors()[t].bytes;
    }
  }
  bytes_sent_ += (ranks - 1) * gather_block_;
  return Status::Ok();
}

// The gradients, concatenated, become their mean over the ranks. fp8: each
// tensor's amax is max-reduced first, so every rank scales it by the same
// 2^e (e = floor(log2(FP8 max / amax)), E5M2 or E4M3 by the recipe's
// gradients, fp8_wire); the codes are summed in FP32 in
// rank order and the mean, which fits under the same scale, goes back as
// codes. A non-finite amax anywhere makes the tensor NaN on every rank: the
// step's finiteness check then skips the update everywhere.
Status RankStep::exchange(Session& s, const std::vector<int>& grads) {
  const Model& m = s.model();
  std::vector<size_t> at{0};
  for (int g : grads) at.push_back(at.back() + m.tensors()[g].bytes / sizeof(float));
  std::vector<float> flat(at.back());
  for (size_t i = 0; i < grads.size(); ++i) SG_TRY(s.read(grads[i], flat.data() + at[i], (at[i + 1] - at[i]) * sizeof(float)));
  const float inv_ranks = 1.0f / static_cast<float>(comm_->size());
  if (mode_ != GradComm::fp8) {
    SG_TRY(allreduce_sum(*comm_, flat.data(), flat.size(), mode_ == GradComm::bf16 ? Wire::bf16 : Wire::f32, inv_ranks,
                         &bytes_sent_));
  } else {
    std::vector<float> amax(grads.size(), 0.0f);
    for (size_t i = 0; i < grads.size(); ++i)
      for (size_t j = at[i]; j < at[i + 1]; ++j) amax[i] = std::isfinite(flat[j]) ? std::max(amax[i], std::fabs(flat[j])) : NAN;
    SG_TRY(allreduce_max(*comm_, amax.data(), amax.size(), &bytes_sent_));
    std::vector<int> exps(grads.size(), 0);
    for (size_t i = 0; i < grads.size(); ++i)
      if (std::isfinite(amax[i]) && amax[i] > 0)
        exps[i] = std::clamp(static_cast<int>(std::floor(std::log2(fp8_max(fp8_wire_) / amax[i]))), -126, 126);
    for (size_t i = 0; i < grads.size(); ++i)
      for (size_t j = at[i]; j < at[i + 1]; ++j) flat[j] *= fmt::exp2i(exps[i]);
    SG_TRY(allreduce_sum(*comm_, flat.data(), flat.size(), fp8_wire_, inv_ranks, &bytes_sent_));
    for (size_t i = 0; i < grads.size(); ++i)
      for (size_t j = at[i]; j < at[i + 1]; ++j) flat[j] = std::isfinite(amax[i]) ? flat[j] * fmt::exp2i(-exps[i]) : NAN;
  }
  for (size_t i = 0; i < grads.size(); ++i) SG_TRY(s.write(grads[i], flat.data() + at[i], (at[i + 1] - at[i]) * sizeof(float)));
  return Status::Ok();
}

Status RankStep::sync_state(Session& s) {
  if (parts_.empty()) return Status::Ok();
  const float inv_ranks = 1.0f / static_cast<float>(comm_->size());
  std::vector<float> v;
  for (int id : statistics_) {
    SG_TRY(read_f32(s, id, &v));
    SG_TRY(allreduce_sum(*comm_, v.data(), v.size(), Wire::f32, inv_ranks));
    SG_TRY(s.write(id, v.data(), v.size() * sizeof(float)));
  }
  for (int id : histories_) {
    SG_TRY(read_f32(s, id, &v));
    SG_TRY(allreduce_max(*comm_, v.data() + kStateHeader, v.size() - kStateHeader));
    SG_TRY(s.write(id, v.data(), v.size() * sizeof(float)));
  }
  return Status::Ok();
}

Status broadcast_state(Session& s, Communicator& c) {
  if (c.size() == 1) return Status::Ok();
  std::vector<uint8_t> buf;
  for (size_t id = 0; id < s.model().tensors().size(); ++id) {
    if (!in_checkpoint(s.model().tensors()[id]) || s.model().tensors()[id].sharded) continue;
    const int t = static_cast<int>(id);
    buf.resize(s.model().tensors()[id].bytes);
    if (c.rank() == 0) SG_TRY(s.read(t, buf.data(), buf.size()));
    for (size_t at = 0; at < buf.size(); at += kMaxMessage)
      SG_TRY(c.broadcast(buf.data() + at, std::min(kMaxMessage, buf.size() - at), 0));
    if (c.rank() != 0) SG_TRY(s.write(t, buf.data(), buf.size()));
  }
  return Status::Ok();
}

Status check_agree(Communicator& c, uint64_t value, const std::string& what, StatusCode code) {
  if (c.size() == 1) return Status::Ok();
  std::vector<uint64_t> all(static_cast<size_t>(c.size()));
  SG_TRY(c.allgather(&value, sizeof value, all.data()));
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      std::string msg = "rank " + std::to_string(r) + "'s " + what + " differs from rank 0's";
      return code == StatusCode::invalid_input ? Status::Invalid(msg) : Status::Runtime(msg);
    }
  return Status::Ok();
}

uint64_t model_hash(const Model& m) { return fnv1a(m.file_bytes().data(), m.file_bytes().size()); }

Status check_identical(Session& s, Communicator& c) {
  if (c.size() == 1) return Status::Ok();
  uint64_t hash = kFnvBasis;
  std::vector<uint8_t> buf;
  for (size_t id = 0; id < s.model().tensors().size(); ++id) {
    if (!is_shared(s.model().tensors()[id])) continue;
    buf.resize(s.model().tensors()[id].bytes);
    SG_TRY(s.read(static_cast<int>(id), buf.data(), buf.size()));
    hash = fnv1a(buf.data(), buf.size(), hash);
  }
  return check_agree(c, hash, "parameters or optimizer state (a hash of their bytes): the ranks diverged", StatusCode::runtime_error);
}

Status gather_moments(Session& s, Communicator& c, std::vector<std::vector<uint8_t>>* at_lead) {
  at_lead->assign(s.model().tensors().size(), {});
  std::vector<uint8_t> buf;
  for (size_t id = 0; id < s.model().tensors().size(); ++id) {
    const TensorInfo& t = s.model().tensors()[id];
    if (!t.sharded || t.updated_by == 0) continue;  // rank 0 keeps these itself
    buf.resize(dtype_bytes(t.type.dtype, numel(t.type.shape)));
    if (c.rank() == t.updated_by) SG_TRY(s.read(static_cast<int>(id), buf.data(), buf.size()));
    for (size_t at = 0; at < buf.size(); at += kMaxMessage)
      SG_TRY(c.broadcast(buf.data() + at, std::min(kMaxMessage, buf.size() - at), t.updated_by));
    if (c.rank() == 0) (*at_lead)[id] = buf;
  }
  return Status::Ok();
}

}  // namespace sgrt
