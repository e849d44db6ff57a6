// The harness itself: a script compiles, and its loss is what the formula gives.
#include "harness.h"

using namespace sgrt;

TEST_CASE("a tiny model compiles, loads and evaluates its loss") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {2, 3}, "ones")
    sg.loss(sg.sum(sg.sum(x * x)))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  test::write_vec<float>(*s, "x", {1, 2, 3, 4, 5, 6});
  CHECK(test::loss_of(*s) == doctest::Approx(91.0));
}
