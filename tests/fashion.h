// Shared by the tests that train on real Fashion-MNIST: the data set (opened
// once per test binary), models/fashion_mlp.lua's source, and the test accuracy
// a training run reaches.
#pragma once
#include <iterator>

#include "backend_compare.h"
#include "harness.h"
#include "sgrt/dataset.h"
#include "sgrt/trainer.h"

namespace sgrt::test {

inline const Dataset& fashion() {
  static std::unique_ptr<Dataset> d = [] {
    std::unique_ptr<Dataset> ds;
    Status st = open_fashion_mnist(kFashionMnistDir, &ds);
    REQUIRE_MESSAGE(st.ok(), st.message());
    return ds;
  }();
  return *d;
}

inline std::string fashion_mlp_lua() {
  std::ifstream f(SGRT_SOURCE_DIR "/models/fashion_mlp.lua");
  REQUIRE(f.good());
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Trains `s` on fashion() for `steps` steps with data seed `seed`; the final
// test accuracy (the model's one metric).
inline float trained_accuracy(Session& s, int64_t steps, uint64_t seed) {
  TrainOptions o;
  o.steps = steps;
  o.seed = seed;
  TrainResult r;
  Status st = train(s, fashion(), o, &r);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(r.final_eval.metrics.size() == 1);
  return r.final_eval.metrics[0].second;
}

// models/fashion_mlp.lua with a 128-wide hidden layer under `recipe` (as
// --recipe), trained for 300 steps with data seed 3: its test accuracy.
inline float mlp_recipe_accuracy(const std::string& recipe) {
  TempFile f(".lua", fashion_mlp_lua());
  dsl::ScriptOptions opts;
  opts.set = {{"hidden", "128"}};
  compiler::Graph g;
  Status st = dsl::load_script(f.path, opts, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  g.recipe = recipe;
  st = compiler::compile(g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = open_session(load_graph(g));
  return trained_accuracy(*s, 300, 3);
}

}  // namespace sgrt::test
