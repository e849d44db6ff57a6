// sgrt export --merge (ExportOptions::merge_lora) on models/llama.lua with
// random nonzero adapters, shaped small by --set:
//  * the exported graph has no adapter op or tensor left: its infer program has
//    the op count of the same model compiled without LoRA (lora_rank=0);
//  * each merged weight equals W + (alpha / rank) B A computed here in double
//    from the session's W, A, B and the config's alpha and rank;
//  * its logits equal the unmerged model's (adapters applied at run time)
//    within 1e-5 relative (max-norm), for an f32 base and for a q4_1 / q8_0
//    base (decoded, merged in f32, stored f32);
//  * a KV-cache model keeps prefill and decode_step, merged like infer;
//  * with --quantize fp8 / nvfp4 the merged weights become qmatmul constants and
//    the logits stay within test_export.cpp's tolerance of the f32 merged ones
//    (fp8 5%, nvfp4 20% of the largest logit);
//  * a model without adapters, and merging with training kept, are refused;
//    through the command line: exit 2, one line, no file written.
#include <algorithm>
#include <cmath>
#include <random>

#include "harness.h"
#include "sgrt/export.h"
#include "tiny_lora_llama.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

using test::kLoraRank;
using test::infer_logits;
using test::rel_err;
constexpr int kRank = kLoraRank;
constexpr double kScale = test::kLoraScale;

std::shared_ptr<const Model> llama(const std::string& base, int rank = kRank, const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> set = extra;
  set["lora_base"] = base;
  return test::tiny_lora_llama(rank, set);
}

// A session whose adapters (B included) hold random values.
std::unique_ptr<Session> adapted_unfed(const std::string& base, const std::map<std::string, std::string>& extra = {}) {
  auto s = test::open_session(llama(base, kRank, extra));
  test::randomize_adapters(*s);
  return s;
}

std::unique_ptr<Session> adapted(const std::string& base) {
  auto s = adapted_unfed(base);
  test::feed_tiny_llama(*s);
  return s;
}

std::unique_ptr<Session> exported(const Session& from, ExportQuant q, bool merge = true) {
  std::vector<uint8_t> bytes;
  Status st = export_model(from, {true, q, merge}, &bytes);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(std::move(bytes), "merged.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(std::move(m), "cpu", 99);
  test::feed_tiny_llama(*s);
  return s;
}

int count_ops(const Model& m, const std::string& program, OpCode code = OpCode::kCount) {
  int n = 0;
  for (const OpInfoLoaded& o : m.programs()[m.find_program(program)].ops) n += code == OpCode::kCount || o.code == code;
  return n;
}

bool has_adapter_tensor(const Model& m) {
  for (const TensorInfo& t : m.tensors())
    if (t.name.find("lora") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("merged export: no adapter left, W + (alpha/rank) B A, the unmerged logits within 1e-5") {
  for (std::string base : {"f32", "q4_1", "q8_0"}) {
    CAPTURE(base);
    auto s = adapted(base);
    const std::vector<float> want = infer_logits(*s);
    REQUIRE(rel_err(want, infer_logits(*test::open_session(llama(base)))) > 0.01);  // the adapters count
    auto d = exported(*s, ExportQuant::none);
    const Model& m = d->model();
    CHECK_FALSE(has_adapter_tensor(m));
    CHECK(count_ops(m, "infer") == count_ops(*llama(base, 0), "infer"));
    CHECK(count_ops(m, "infer", OpCode::DequantMatMul) == (base == "f32" ? 0 : 1));  // the tied head only
    for (const char* w : {"blk.0.attn_q", "blk.1.ffn_down"}) {
      CAPTURE(w);
      const std::string wn = std::string(w) + ".weight";
      std::vector<float> w0 = test::param_f32(*s, wn), a = test::param_f32(*s, std::string(w) + ".lora_A"),
                         b = test::param_f32(*s, std::string(w) + ".lora_B");
      const std::vector<float> got = test::read_f32(*d, wn);
      REQUIRE(got.size() == w0.size());
      const size_t cols = a.size() / kRank, rows = b.size() / kRank;
      REQUIRE(rows * cols == w0.size());
      double worst = 0;
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) {
          double ba = 0;
          for (int k = 0; k < kRank; ++k) ba += static_cast<double>(b[r * kRank + k]) * a[k * cols + c];
          const double merged = w0[r * cols + c] + kScale * ba;
          worst = std::max(worst, std::fabs(got[r * cols + c] - merged) / std::max(1e-3, std::fabs(merged)));
        }
      CHECK(worst < 1e-6);
    }
    CHECK(rel_err(infer_logits(*d), want) <= 1e-5);
  }
}

TEST_CASE("merged export --quantize fp8 / nvfp4: the merged weights quantized, logits near the f32 merged ones") {
  for (std::string base : {"f32", "q4_1"}) {
    CAPTURE(base);
    const bool f32 = base == "f32";
    auto s = adapted(base);
    auto merged = exported(*s, ExportQuant::none);
    const std::vector<float> ref = infer_logits(*merged);
    // The same model without LoRA holding the merged weights, quantized by the
    // plain export (test_export.cpp): the f32 base must give the same file.
    auto plain = test::open_session(llama("f32", 0));
    for (const TensorInfo& t : plain->model().tensors())
      if (t.role == Role::param) test::write_vec(*plain, t.name, test::param_f32(*merged, t.name));
    test::feed_tiny_llama(*plain);
    for (auto [q, tol] : {std::pair{ExportQuant::fp8, 0.05}, std::pair{ExportQuant::nvfp4, 0.2}}) {
      CAPTURE(static_cast<int>(q));
      auto d = exported(*s, q);
      const Model& m = d->model();
      CHECK_FALSE(has_adapter_tensor(m));
      CHECK(count_ops(m, "infer", OpCode::MatMul) == 0);
      CHECK(count_ops(m, "infer", OpCode::QMatMul) == 2 * 7 + f32);  // + the tied head, unless it stays q4_1
      CHECK(m.find_tensor("blk.0.attn_q.weight") < 0);
      const std::vector<float> got = infer_logits(*d);
      if (f32) CHECK(rel_err(got, infer_logits(*exported(*plain, q, false))) == 0);
      const double err = rel_err(got, ref);
      MESSAGE(base << " base, quantized " << static_cast<int>(q) << ": logits within " << err << " of the f32 merged ones");
      CHECK(err > 0);
      CHECK(err < tol);
    }
  }
}

// A KV-cache model's prefill over `prompt` from position 0, then decode_step of
// `token` at position `pos`: both logits, concatenated.
std::vector<float> cached_logits(Session& s, const std::vector<int32_t>& prompt, int32_t token, int32_t pos) {
  test::write_vec(s, "prompt", prompt);
  test::write_vec(s, "pos", std::vector<int32_t>{0});
  test::run(s, "prefill");
  std::vector<float> z = test::read_output(s, "prefill.logits");
  test::write_vec(s, "token", std::vector<int32_t>{token});
  test::write_vec(s, "pos", std::vector<int32_t>{pos});
  test::run(s, "decode_step");
  const std::vector<float> d = test::read_output(s, "decode_step.logits");
  z.insert(z.end(), d.begin(), d.end());
  return z;
}

TEST_CASE("merged export of a KV-cache model: prefill and decode_step kept, merged, the unmerged logits within 1e-5") {
  const std::map<std::string, std::string> gen = {{"batch", "1"}, {"kv_cache", "true"}};
  const std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6};
  for (std::string base : {"f32", "q4_1"}) {
    CAPTURE(base);
    auto s = adapted_unfed(base, gen);
    const std::vector<float> want = cached_logits(*s, prompt, 7, 5);
    std::vector<uint8_t> bytes;
    Status st = export_model(*s, {true, ExportQuant::none, true}, &bytes);
    REQUIRE_MESSAGE(st.ok(), st.message());
    std::unique_ptr<Model> m;
    st = Model::load_bytes(std::move(bytes), "merged.sg", &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    CHECK_FALSE(has_adapter_tensor(*m));
    for (const char* p : {"infer", "prefill", "decode_step"}) {
      CAPTURE(p);
      REQUIRE(m->find_program(p) >= 0);
      CHECK(count_ops(*m, p) == count_ops(*llama(base, 0, gen), p));
    }
    CHECK(m->find_program("train_step") < 0);
    auto d = test::open_session(std::move(m), "cpu", 99);
    CHECK(rel_err(cached_logits(*d, prompt, 7, 5), want) <= 1e-5);
  }
}

TEST_CASE("merged export: a model without adapters and merging with training kept are refused") {
  auto plain = test::open_session(llama("f32", 0));
  std::vector<uint8_t> bytes;
  Status st = export_model(*plain, {true, ExportQuant::none, true}, &bytes);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("has no LoRA adapters") != std::string::npos);
  st = export_model(*plain, {true, ExportQuant::fp8, true}, &bytes);
  CHECK(st.message().find("has no LoRA adapters") != std::string::npos);
  auto s = adapted("f32");
  st = export_model(*s, {false, ExportQuant::none, true}, &bytes);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("--infer-only") != std::string::npos);
}

TEST_CASE("sgrt export --merge of a checkpoint without adapters, and a bad --quantize: exit 2, one line, no file") {
  test::TempDir dir;
  const std::string ck = dir.path + "/ck", out = dir.path + "/merged.sg";
  test::ToolResult r = test::run_tool({"train", SGRT_SOURCE_DIR "/models/fashion_mlp.lua", "--steps", "1", "--quiet", "--checkpoint", ck});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  for (auto [flags, must] : {std::pair<std::vector<std::string>, std::string>{{}, "has no LoRA adapters"},
                             {{"--quantize", "fp9"}, "unknown quantization 'fp9'"}}) {
    std::vector<std::string> args{"export", "--checkpoint", ck, "--merge", "-o", out};
    args.insert(args.end(), flags.begin(), flags.end());
    r = test::run_tool(args);
    INFO(r.err);
    CHECK(r.exited);
    CHECK(r.code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find(must) != std::string::npos);
    CHECK(dir.list() == std::set<std::string>{"ck"});
  }
}
