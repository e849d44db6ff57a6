// models/smollm2_lora.lua, the worked example of docs/lora.md: models/llama.lua
// loaded beside it (require "llama") under sg.preset's defaults.
//  * it compiles to what its presets say, --set still wins: rank-8 adapters on
//    the seven projections, the masked instruction loss, wordnet.jsonl, 40
//    steps and an eval every 20 in the IR;
//  * its frozen params are, by name and shape, the tensors of the SmolLM2 GGUF
//    (skipped with one line when the file is absent);
//  * sg.preset of a key the config lacks, of the wrong type, and a require
//    that names a path are refused at the script's line.
#include "harness.h"
#include "model_files.h"
#include "sg_generated.h"
#include "sgrt/gguf.h"

using namespace sgrt;

namespace {

std::shared_ptr<const Model> example(const std::map<std::string, std::string>& set = {}) {
  return test::compile_model_file("models/smollm2_lora.lua", set);
}

int count_adapters(const Model& m, int64_t rank) {
  int n = 0;
  for (const TensorInfo& t : m.tensors())
    n += t.role == Role::param && t.name.ends_with(".lora_A") && t.type.shape[0] == rank;
  return n;
}

std::string compile_error(const std::string& lua) {
  compiler::Graph g;
  Status st = test::compile_graph(lua, &g);
  REQUIRE_FALSE(st.ok());
  return st.message();
}

}  // namespace

TEST_CASE("smollm2_lora.lua compiles to llama.lua under its presets; --set still wins") {
  auto m = example();
  CHECK(count_adapters(*m, 8) == 30 * 7);
  CHECK(m->find_tensor("mask") >= 0);  // instruct = true: the masked loss
  const sg::Model& r = m->root();
  REQUIRE(r.data());
  CHECK(r.data()->dataset()->str() == "instruct");
  CHECK(r.data()->path()->str() == "wordnet.jsonl");
  REQUIRE(r.train());
  CHECK(r.train()->steps() == 40);
  CHECK(r.train()->eval_every() == 20);
  CHECK(m->tensors()[m->find_tensor("tokens")].type.shape == std::vector<int64_t>{4, 64});
  auto small = example({{"lora_rank", "4"}, {"n_layer", "2"}, {"eval_every", "5"}});
  CHECK(count_adapters(*small, 4) == 2 * 7);
  CHECK(small->root().train()->eval_every() == 5);
}

TEST_CASE("smollm2_lora.lua's frozen params are the SmolLM2 GGUF's tensors") {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) {
    MESSAGE(test::kNoSmollm2);
    return;
  }
  std::unique_ptr<GgufFile> f;
  Status st = GgufFile::open(path, &f);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto m = example();
  int frozen = 0;
  for (const TensorInfo& t : m->tensors()) {
    if (t.role != Role::param || !t.frozen) continue;
    CAPTURE(t.name);
    const GgufTensor* g = f->find_tensor(t.name);
    REQUIRE(g);
    CHECK(std::vector<int64_t>(g->shape.rbegin(), g->shape.rend()) == t.type.shape);  // ggml's ne reversed
    ++frozen;
  }
  CHECK(frozen == static_cast<int>(f->tensors().size()));
}

TEST_CASE("sg.preset and require of a sibling script: bad use is refused at its line") {
  CHECK(compile_error("local sg = require 'sg'\nsg.preset{ nope = 1 }\nsg.config{ a = 1 }\n").find("'nope' is not a config key") !=
        std::string::npos);
  CHECK(compile_error("local sg = require 'sg'\nsg.preset{ a = 'x' }\nsg.config{ a = 1 }\n").find("a must be a number") !=
        std::string::npos);
  std::string e = compile_error("require '../models/llama'\n");
  CHECK(e.find(":1:") != std::string::npos);
  CHECK(e.find("no model script") != std::string::npos);
}
