#include "sgrt/session.h"

#include <algorithm>

#include "formats/formats.h"
#include "formats/gguf_blocks.h"

#include "sgrt/quant.h"
#include "sgrt/rng.h"

namespace sgrt {

namespace {

// Elements i0 .. i0 + n of t's initial value.
void fill_initial(const TensorInfo& t, uint64_t seed, int64_t i0, int64_t n, float* v) {
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = i0 + j;
    switch (t.init) {
      case InitKind::zeros: case InitKind::buffer: v[j] = 0.f; break;
      case InitKind::ones: v[j] = 1.f; break;
      case InitKind::uniform: v[j] = t.init_a + (t.init_b - t.init_a) * rng_uniform(seed, t.init_seed, i); break;
      case InitKind::normal: v[j] = t.init_a + t.init_b * rng_normal(seed, t.init_seed, i); break;
    }
  }
}

// A frozen quantized base param: its f32 initial value encoded by ggml's
// quantizer and written a chunk of blocks at a time (no f32 or block copy of
// the whole weight beside the arena: SmolLM2's embedding would add 30 MB to
// sgrt run's peak).
Status write_initial_blocks(Session& s, int id, uint64_t seed) {
  const TensorInfo& t = s.model().tensors()[id];
  const int64_t n = numel(t.type.shape), chunk = 32 * 2048;
  std::vector<float> v(static_cast<size_t>(std::min(n, chunk)));
  std::vector<uint8_t> blocks(dtype_bytes(t.type.dtype, std::min(n, chunk)));
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i);
    fill_initial(t, seed, i, m, v.data());
    fmt::gguf_encode_blocks(t.type.dtype == DType::q8_0, v.data(), m, blocks.data());
    SG_TRY(s.write_range(id, dtype_bytes(t.type.dtype, i), blocks.data(), dtype_bytes(t.type.dtype, m)));
  }
  return Status::Ok();
}

}  // namespace

std::vector<float> initial_values(const TensorInfo& t, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(numel(t.type.shape)));
  fill_initial(t, seed, 0, static_cast<int64_t>(v.size()), v.data());
  return v;
}

Status Session::create(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Session>* out) {
  SG_TRY(backend->prepare(*model).with_context(model->label()));
  out->reset(new Session(std::move(model), std::move(backend)));
  return Status::Ok();
}

Status Session::init(uint64_t seed, int64_t total_steps, const std::vector<bool>& supplied) {
  const std::vector<TensorInfo>& ts = model_->tensors();
  if (!supplied.empty() && supplied.size() != ts.size())
    return Status::Invalid("Session::init: " + std::to_string(supplied.size()) + " tensors marked as supplied, " +
                           model_->label() + " has " + std::to_string(ts.size()));
  auto left = [&](size_t id) { return !supplied.empty() && supplied[id]; };
  for (size_t id = 0; id < ts.size(); ++id) {
    const TensorInfo& t = ts[id];
    if (left(id)) continue;
    if (t.init == InitKind::buffer && t.bytes > 0) {  // an exported graph carries the value
      std::span<const uint8_t> b = model_->buffer(t.init_buffer);
      SG_TRY(write(static_cast<int>(id), b.data(), b.size()));
      model_->release_file_pages(b);  // the arena holds it now; the file has it if init runs again
      continue;
    }
    bool low_precision = t.type.dtype == DType::f16 || t.type.dtype == DType::e4m3;  // optimizer state, masters
    if (t.persistent && dtype_is_block(t.type.dtype)) {
      SG_TRY(write_initial_blocks(*this, static_cast<int>(id), seed));
      continue;
    }
    if (!t.persistent || t.bytes == 0 || (t.type.dtype != DType::f32 && !low_precision)) continue;
    // Parameters, and state with an initializer (a master copies its param's,
    // optimizer scales start at one), get their initial values; the rest zeros.
    bool initialized = t.role == Role::param || t.init != InitKind::zeros;
    std::vector<float> v = initialized ? initial_values(t, seed) : std::vector<float>(numel(t.type.shape), 0.f);
    if (t.type.dtype == DType::f32) {
      SG_TRY(write(static_cast<int>(id), v.data(), v.size() * sizeof(float)));
      continue;
    }
    std::vector<uint8_t> coded(t.bytes);  // unscaled: the optimizer sets scales from the first step's amax
    for (size_t i = 0; i < v.size(); ++i) {
      if (t.type.dtype == DType::e4m3) coded[i] = fmt::e4m3_encode(v[i]);
      else reinterpret_cast<uint16_t*>(coded.data())[i] = fmt::f16_encode(v[i]);
    }
    SG_TRY(write(static_cast<int>(id), coded.data(), coded.size()));
  }
  if (model_->train_state() >= 0 && !left(static_cast<size_t>(model_->train_state()))) {
    int32_t state[kTrainStateLen] = {};
    state[kTotalSteps] = static_cast<int32_t>(total_steps);
    SG_TRY(write(model_->train_state(), state, sizeof state));
  }
  return Status::Ok();
}

Status Session::write(int tensor, const void* src, size_t bytes) {
  const TensorInfo& t = model_->tensors().at(tensor);
  if (bytes != t.bytes) return Status::Invalid("tensor " + t.name + ": writing " + std::to_string(bytes) + " bytes, it holds " + std::to_string(t.bytes));
  return backend_->write(t.offset, src, bytes);
}

Status Session::write_range(int tensor, uint64_t at, const void* src, size_t bytes) {
  const TensorInfo& t = model_->tensors().at(tensor);
  if (at > t.bytes || bytes > t.bytes - at)
    return Status::Invalid("tensor " + t.name + ": writing bytes [" + std::to_string(at) + ", " + std::to_string(at + bytes) +
                           "), it holds " + std::to_string(t.bytes));
  return backend_->write(t.offset + at, src, bytes);
}

Status Session::read(int tensor, void* dst, size_t bytes) const {
  const TensorInfo& t = model_->tensors().at(tensor);
  if (bytes != t.bytes) return Status::Invalid("tensor " + t.name + ": reading " + std::to_string(bytes) + " bytes, it holds " + std::to_string(t.bytes));
  return backend_->read(t.offset, dst, bytes);
}

Status Session::read_range(int tensor, uint64_t at, void* dst, size_t bytes) const {
  const TensorInfo& t = model_->tensors().at(tensor);
  if (at > t.bytes || bytes > t.bytes - at)
    return Status::Invalid("tensor " + t.name + ": reading bytes [" + std::to_string(at) + ", " + std::to_string(at + bytes) +
                           "), it holds " + std::to_string(t.bytes));
  return backend_->read(t.offset + at, dst, bytes);
}

Status Session::read_scalar(int tensor, float* out) const { return read(tensor, out, sizeof(float)); }

Status Session::run(int program) { return backend_->run(program); }

Status Session::find_program(const std::string& name, int* out) const {
  *out = model_->find_program(name);
  if (*out < 0) return Status::Invalid(model_->label() + ": has no program '" + name + "'");
  return Status::Ok();
}

}  // namespace sgrt
