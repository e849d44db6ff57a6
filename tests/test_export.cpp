// Deployable graphs (sgrt/export.h): state folded in, training stripped,
// weights quantized; each checked against the session it came from. Exporting
// holds the weights at most twice beside the session; a file loaded by
// Model::load_file is mapped, and its weights' pages leave memory once in the arena.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "formats/formats.h"
#include "harness.h"
#include "sg_generated.h"
#include "sgrt/export.h"
#include "tool_runner.h"

using namespace sgrt;
using namespace sgrt::test;

namespace {

std::string mlp_lua(const std::string& recipe) {
  return R"(
local sg = require "sg"
local nn = sg.nn
local x = sg.input("image", {8, 64})
local y = sg.input("label", {8}, "i32")
local h = nn.linear(x, 32, {name = "fc1"}):relu()
local logits = nn.linear(h, 10, {name = "fc2"})
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.metric("accuracy", sg.accuracy(logits, y))
sg.output("logits", logits)
sg.optimizer.adamw{ lr = 1e-2 }
sg.recipe ")" + recipe + "\"\n";
}

void feed(Session& s, int seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n;
  std::vector<float> x(8 * 64);
  std::vector<int32_t> y(8);
  for (float& v : x) v = n(g);
  for (int32_t& v : y) v = static_cast<int32_t>(g() % 10);
  write_vec(s, "image", x);
  write_vec(s, "label", y);
}

// A session on `lua` trained for a few steps, so weights and optimizer state are not their initial values.
std::unique_ptr<Session> trained(const std::string& recipe) {
  std::shared_ptr<const Model> m;
  Status st = compile_lua(mlp_lua(recipe), &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = open_session(m, "cpu", 3);
  for (int i = 0; i < 3; ++i) {
    feed(*s, i);
    run(*s, "train_step");
  }
  feed(*s, 100);
  return s;
}

std::unique_ptr<Session> exported(const Session& from, const ExportOptions& o, uint64_t seed = 99) {
  std::vector<uint8_t> bytes;
  Status st = export_model(from, o, &bytes);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(std::move(bytes), "deploy.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = open_session(std::move(m), "cpu", seed);
  feed(*s, 100);
  return s;
}

std::vector<uint8_t> raw(const Session& s, const std::string& name) {
  const TensorInfo& t = s.model().tensors()[tensor_id(s, name)];
  std::vector<uint8_t> v(t.bytes);
  REQUIRE(s.read(tensor_id(s, name), v.data(), v.size()).ok());
  return v;
}

int count_ops(const Model& m, const std::string& program, OpCode code) {
  const ProgramInfo& p = m.programs()[m.find_program(program)];
  return static_cast<int>(std::count_if(p.ops.begin(), p.ops.end(), [code](const OpInfoLoaded& o) { return o.code == code; }));
}

std::vector<float> logits(Session& s) {
  run(s, "infer");
  const Model& m = s.model();
  return read_f32(s, m.tensors()[m.outputs()[0].second].name);
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

TEST_CASE("export: the state of the session is folded in; init restores it whatever the seed") {
  auto s = trained("fp32");
  CHECK_FALSE(carries_weights(s->model()));
  auto d = exported(*s, {});
  CHECK(carries_weights(d->model()));
  CHECK(d->model().find_program("train_step") >= 0);
  int saved = 0;
  for (const TensorInfo& t : s->model().tensors()) {
    if (!t.persistent || t.role == Role::input || t.bytes == 0 || t.name == s->model().tensors()[s->model().train_state()].name) continue;
    CHECK_MESSAGE(raw(*s, t.name) == raw(*d, t.name), t.name);
    saved += t.role == Role::param || t.role == Role::opt_state;
  }
  CHECK(saved >= 8);  // 4 params, their AdamW moments
  CHECK(loss_of(*s) == loss_of(*d));

  // Re-exporting a session that trained on stores what it holds now.
  run(*d, "train_step");
  auto again = exported(*d, {}, 5);
  CHECK(raw(*again, "fc1.w") == raw(*d, "fc1.w"));
  CHECK(raw(*again, "fc1.w") != raw(*s, "fc1.w"));
}

TEST_CASE("export --infer-only: eval and infer only, training tensors gone, arena smaller, same results") {
  auto s = trained("fp32");
  auto d = exported(*s, {true, ExportQuant::none});
  const Model& m = d->model();
  REQUIRE(m.programs().size() == 2);
  CHECK(m.find_program("eval") >= 0);
  CHECK(m.find_program("infer") >= 0);
  for (const TensorInfo& t : m.tensors()) CHECK_MESSAGE((t.role != Role::grad && t.role != Role::opt_state), t.name);
  CHECK(m.arena_bytes() < s->model().arena_bytes());
  CHECK(loss_of(*s) == loss_of(*d));
  CHECK(logits(*s) == logits(*d));

  // The plan: persistent tensors disjoint and first; every transient above them.
  uint64_t persistent = m.root().memory()->persistent_bytes();
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const TensorInfo& t : m.tensors()) {
    if (t.bytes == 0) continue;
    if (t.persistent) spans.push_back({t.offset, t.offset + t.bytes});
    else CHECK(t.offset >= persistent);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);
  CHECK(spans.back().second <= persistent);
}

TEST_CASE("export --quantize: weights become low-precision constants; logits near the f32 ones") {
  auto s = trained("fp32");
  std::vector<float> ref = logits(*s);
  std::vector<uint8_t> f32_file;
  REQUIRE(export_model(*s, {true, ExportQuant::none}, &f32_file).ok());
  struct Case { ExportQuant q; DType dtype; float tol; };
  for (Case c : {Case{ExportQuant::fp8, DType::e4m3, 0.05f}, Case{ExportQuant::fp8_channel, DType::e4m3, 0.05f},
                 Case{ExportQuant::fp4, DType::e2m1, 0.3f}, Case{ExportQuant::nvfp4, DType::e2m1, 0.2f}}) {
    CAPTURE(static_cast<int>(c.q));
    std::vector<uint8_t> bytes;
    REQUIRE(export_model(*s, {true, c.q}, &bytes).ok());
    CHECK(bytes.size() + 5000 < f32_file.size());  // weights: 9472 bytes in f32, under 2400 quantized
    auto d = exported(*s, {true, c.q});
    const Model& m = d->model();
    for (const char* p : {"eval", "infer"}) {
      CHECK(count_ops(m, p, OpCode::MatMul) == 0);
      CHECK(count_ops(m, p, OpCode::QMatMul) == 2);
      CHECK(count_ops(m, p, OpCode::Quantize) == 0);
    }
    CHECK(m.find_tensor("fc1.w") < 0);  // the f32 weights are not in the file
    int low = 0;
    for (const TensorInfo& t : m.tensors()) low += t.role == Role::constant && t.type.dtype == c.dtype;
    CHECK(low == 2);
    std::vector<float> got = logits(*d);
    float err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(got[i] - ref[i]));
    CHECK(err > 0);
    CHECK(err < c.tol * max_abs(ref));
  }
}

// FP8 per tensor, recomputed here from NUMERICS.md §2: e = floor(log2(448 / amax)),
// w' = e4m3(w 2^e) 2^-e, then the forward pass in double.
TEST_CASE("export --quantize fp8: logits equal a forward pass with independently dequantized weights") {
  auto s = trained("fp32");
  auto d = exported(*s, {true, ExportQuant::fp8});
  auto dequant = [&](const std::string& name) {
    std::vector<float> w = read_f32(*s, name);
    int e = static_cast<int>(std::floor(std::log2(448.0 / max_abs(w))));
    for (float& v : w) v = fmt::e4m3_decode(fmt::e4m3_encode(std::ldexp(v, e))) * std::ldexp(1.f, -e);
    return w;
  };
  std::vector<float> w1 = dequant("fc1.w"), w2 = dequant("fc2.w"), b1 = read_f32(*s, "fc1.b"), b2 = read_f32(*s, "fc2.b");
  std::vector<float> x = read_f32(*s, "image");
  std::vector<float> got = logits(*d);
  for (int r = 0; r < 8; ++r) {
    std::vector<double> h(32);
    for (int j = 0; j < 32; ++j) {
      double a = 0;
      for (int k = 0; k < 64; ++k) a += static_cast<double>(x[r * 64 + k]) * w1[j * 64 + k];
      h[j] = std::max(0.0, a + b1[j]);
    }
    for (int c = 0; c < 10; ++c) {
      double a = b2[c];
      for (int j = 0; j < 32; ++j) a += h[j] * w2[c * 32 + j];
      CHECK(got[r * 10 + c] == doctest::Approx(a).epsilon(1e-4));
    }
  }
}

TEST_CASE("export of a low-precision recipe folds the quantize ops on its weights; eval is bit-identical") {
  auto s = trained("fp8");
  REQUIRE(count_ops(s->model(), "eval", OpCode::Quantize) == 4);  // two weights, two activations
  auto d = exported(*s, {true, ExportQuant::fp8});
  CHECK(count_ops(d->model(), "eval", OpCode::Quantize) == 2);
  CHECK(d->model().find_tensor("fc1.w") < 0);
  CHECK(loss_of(*s) == loss_of(*d));
}

TEST_CASE("export: bad options are refused with a message") {
  auto s = trained("fp32");
  std::vector<uint8_t> bytes;
  Status st = export_model(*s, {false, ExportQuant::fp8}, &bytes);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("--infer-only") != std::string::npos);
  ExportQuant q;
  CHECK_FALSE(parse_export_quant("fp16", &q).ok());
  CHECK(parse_export_quant("fp8-channel", &q).ok());
  CHECK(q == ExportQuant::fp8_channel);
  TempFile out(".sg");
  REQUIRE(export_to_file(*s, {}, out.path).ok());
  std::unique_ptr<Model> m;
  CHECK(Model::load_file(out.path, &m).ok());
}

TEST_CASE("export holds its weights at most twice; the file is mapped: resident once, in the arena, and init reads them again") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
local x = sg.input("x", {4, 2048})
local w = sg.param("w", {4096, 2048}, {"normal", 0, 0.02})
sg.output("y", sg.matmul(x, w, {trans_b = true}))
sg.loss(sg.sum(sg.reshape(sg.matmul(x, w, {trans_b = true}), {4 * 4096})))
sg.optimizer.sgd{ lr = 0.1 }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::TempDir dir;
  const std::string path = dir.path + "/w.sg";
  std::vector<float> w;
  {
    auto s = test::open_session(m, "cpu", 7);
    w = test::read_f32(*s, "w");
    ExportOptions o;
    o.infer_only = true;
    const int64_t at_start = test::rss_kib();
#if defined(__SANITIZE_ADDRESS__)
    const bool peak_known = false;  // ASan keeps freed memory in quarantine, resident
#else
    const bool peak_known = test::reset_peak_rss();
#endif
    st = export_to_file(*s, o, path);
    REQUIRE_MESSAGE(st.ok(), st.message());
    // The weights' bytes exist at most twice at a time (the object tree beside
    // the FlatBuffer builder, which is written to the file as it is): +63 MiB;
    // +127 when the tree, the builder, the output and the check's copy of it
    // were alive together.
    if (peak_known) CHECK(test::peak_rss_kib() - at_start < static_cast<int64_t>(w.size() * sizeof(float) / 1024) * 5 / 2);
    else MESSAGE("under ASan, or /proc/self/clear_refs not writable: the export's peak is not checked");
  }
  const int64_t weights_kib = static_cast<int64_t>(w.size() * sizeof(float) / 1024);  // 32 MiB
  const int64_t before = test::rss_kib();
  std::unique_ptr<Model> loaded;
  st = Model::load_file(path, &loaded);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(test::rss_kib() - before < weights_kib / 4);  // the checksum read every page; none stays
  auto s = test::open_session(std::move(loaded), "cpu", 1);
  CHECK(test::rss_kib() - before < weights_kib * 3 / 2);  // the arena's copy, not the file's too
  CHECK(test::read_f32(*s, "w") == w);
  test::write_vec(*s, "w", std::vector<float>(w.size(), 0.f));
  st = s->init(2, 0);  // the released pages come back from the file
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(test::read_f32(*s, "w") == w);
}

TEST_CASE("export of many small weights (a transformer's) holds them at most twice") {
  // 64 weights of 512 KiB: freed small buffers stay in the heap, so a copy
  // made after the object tree is freed still counts (it did: 3x).
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
local x = sg.input("x", {2, 1024})
local y = x
for i = 0, 63 do
  local w = sg.param("w" .. i, {128, 1024}, {"normal", 0, 0.02})
  y = sg.add(y, sg.matmul(sg.matmul(x, w, {trans_b = true}), w))
end
sg.output("y", y)
sg.loss(sg.sum(sg.reshape(y, {2 * 1024})))
sg.optimizer.sgd{ lr = 0.1 }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m, "cpu", 7);
  test::TempDir dir;
  ExportOptions o;
  o.infer_only = true;
  const int64_t weights_kib = 64 * 512, at_start = test::rss_kib();
#if defined(__SANITIZE_ADDRESS__)
  const bool peak_known = false;  // ASan keeps freed memory in quarantine, resident
#else
  const bool peak_known = test::reset_peak_rss();
#endif
  st = export_to_file(*s, o, dir.path + "/w.sg");
  REQUIRE_MESSAGE(st.ok(), st.message());
  if (peak_known) CHECK(test::peak_rss_kib() - at_start < weights_kib * 9 / 4);
  else MESSAGE("under ASan, or /proc/self/clear_refs not writable: the export's peak is not checked");
}
