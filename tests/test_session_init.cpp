// Session::init leaves the tensors a weights file or a checkpoint writes next
// (`supplied`): a SmolLM2 fine-tune drew 134 M initial values only to
// overwrite them. What must hold: a session initialized that way and then
// loaded holds every persistent tensor bit for bit as one initialized whole
// and then loaded (so the two start the same run), and the tensors marked are
// the ones the load writes, the stored value of each (an O2 master, a frozen
// q4_1 base's blocks).
#include <algorithm>

#include "gguf_builder.h"
#include "harness.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/params.h"
#include "sgrt/safetensors.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

// A frozen base (f32 or q4_1 blocks) under a trained head whose O2 master
// holds its value.
std::shared_ptr<const Model> model(const std::string& base) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
local x = sg.input("x", {2, 32})
local w = sg.param("base", {8, 32}, {"normal", 0, 0.5}, { dtype = ")" + base + R"(", requires_grad = false })
local y = sg.nn.linear(sg.matmul(x, w, {trans_b = true}), 4, {name = "head"})
sg.loss(sg.mean(sg.mean(y * y)))
sg.optimizer.adamw{ lr = 1e-2, state = "O2" }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

std::vector<std::string> marked(const Model& m, const std::vector<bool>& supplied) {
  REQUIRE(supplied.size() == m.tensors().size());
  std::vector<std::string> names;
  for (size_t id = 0; id < supplied.size(); ++id)
    if (supplied[id]) names.push_back(m.tensors()[id].name);
  std::sort(names.begin(), names.end());
  return names;
}

// x, then one training step: optimizer state that is no longer its initial zeros.
void train_once(Session& s) {
  test::write_vec(s, "x", std::vector<float>(64, 0.25f));
  test::run(s, "train_step");
}

}  // namespace

TEST_CASE("a weights file's tensors are written by the import alone, the rest as before") {
  for (const std::string base : {"f32", "q4_1"}) {
    CAPTURE(base);
    auto m = model(base);
    // A safetensors file of every weight, from a session with other initial values.
    test::TempFile st_file(".safetensors");
    REQUIRE(export_safetensors(*test::open_session(m, "cpu", 7), st_file.path, DType::f32).ok());
    // A GGUF file of the base alone (the trained head keeps its initializer):
    // F32 values 0.01 * i, ggml shape ne = [32, 8].
    test::TempFile gguf_file(".gguf");
    test::GgufBuilder g;
    g.str("general.architecture", "llama").tensor("base", {32, 8}, 0, 0);
    for (int i = 0; i < 256; ++i) g.data += test::le(0.01f * i);
    { std::ofstream(gguf_file.path, std::ios::binary) << g.bytes(); }

    const std::vector<std::string> all{"base", "head.b.master", "head.w.master"};
    for (const auto& [path, names] : {std::pair{st_file.path, all}, std::pair{gguf_file.path, std::vector<std::string>{"base"}}}) {
      CAPTURE(path);
      std::vector<bool> supplied;
      Status st = weights_file_tensors(*m, path, &supplied);
      REQUIRE_MESSAGE(st.ok(), st.message());
      CHECK(marked(*m, supplied) == names);
      auto whole = test::open_session(m, "cpu", 1), left = test::open_session(m, "cpu", 1, supplied);
      for (Session* s : {whole.get(), left.get()}) {
        st = import_weights(*s, path);
        REQUIRE_MESSAGE(st.ok(), st.message());
      }
      CHECK(test::persistent_state(*left) == test::persistent_state(*whole));
    }
  }
}

TEST_CASE("a checkpoint's tensors are written by the load alone, every one of them") {
  auto m = model("q4_1");
  auto trained = test::open_session(m, "cpu", 3);
  train_once(*trained);
  test::TempDir dir;
  REQUIRE(save_checkpoint(*trained, dir.path, 1).ok());
  const std::vector<bool> supplied = checkpoint_tensors(*m);
  // Everything persistent but the input: weights, masters, moments, scales, the train state.
  std::vector<std::string> want;
  for (const auto& [name, bytes] : test::persistent_state(*trained))
    if (name != "x") want.push_back(name);
  CHECK(marked(*m, supplied) == want);
  auto left = test::open_session(m, "cpu", 1, supplied);
  int64_t step = 0;
  Status st = load_checkpoint(*left, dir.path, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::map<std::string, std::vector<uint8_t>> want_state = test::persistent_state(*trained), got_state = test::persistent_state(*left);
  want_state.erase("x"), got_state.erase("x");
  CHECK(got_state == want_state);
}

TEST_CASE("init writes no supplied tensor and refuses a list of the wrong length") {
  auto m = model("f32");
  const int base = m->find_tensor("base"), master = m->find_tensor("head.w.master");
  REQUIRE(base >= 0);
  REQUIRE(master >= 0);
  CHECK(value_tensor(*m, m->find_tensor("head.w")) == master);
  CHECK(value_tensor(*m, base) == base);
  auto s = test::open_session(m, "cpu", 1);
  const std::vector<float> held(256, 3.0f);
  REQUIRE(s->write(base, held.data(), held.size() * sizeof(float)).ok());
  std::vector<bool> supplied(m->tensors().size(), false);
  supplied[base] = true;
  REQUIRE(s->init(2, 100, supplied).ok());
  CHECK(test::read_f32(*s, "base") == held);
  CHECK(test::param_f32(*s, "head.w") == test::param_f32(*test::open_session(m, "cpu", 2), "head.w"));  // the others re-initialized
  supplied.pop_back();
  Status st = s->init(2, 100, supplied);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("tensors marked as supplied") != std::string::npos);
}
