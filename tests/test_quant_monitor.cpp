// The per-tensor flushed-to-zero share in the training log and the warning it
// raises, on data built so the share is known: every example holds one 1.0,
// twenty 0.01 and eleven 0.5. Whatever power-of-two scale the quantizer
// picks for a row with largest element 1.0 (or 0.5 once the outlier is
// clamped), it maps 0.5 into E2M1's normal range and 0.01 below a quarter of
// its smallest step 0.5, so exactly 20 of 32 elements become zero; E4M3 keeps
// all of them.
#include <sstream>

#include "tool_runner.h"

using namespace sgrt::test;

namespace {

std::string model_lua(const std::string& csv) {
  return R"(
    local sg = require "sg"
    local x = sg.input("x", {4, 32})
    local y = sg.input("y", {4}, "i32")
    local h = sg.nn.linear(x, 16, { name = "fc1" }):relu()
    local logits = sg.nn.linear(h, 2, { name = "fc2" })
    sg.loss(sg.softmax_cross_entropy(logits, y))
    sg.data.csv{ features = x, label = y, path = ")" + csv + R"(" }
    sg.optimizer.adamw{ lr = 1e-3 }
    sg.recipe "fp4"
  )";
}

std::string csv_rows(int n) {
  std::ostringstream s;
  for (int i = 0; i < n; ++i) {
    s << "1.0";
    for (int j = 0; j < 20; ++j) s << ",0.01";
    for (int j = 0; j < 11; ++j) s << ",0.5";
    s << "," << i % 2 << "\n";
  }
  return s.str();
}

// The value of "key": in the flushed_share object of the log's last step line.
double flushed_share(const std::string& log, const std::string& key) {
  size_t line = log.rfind("{\"step\":");
  REQUIRE(line != std::string::npos);
  size_t obj = log.find("\"flushed_share\":{", line);
  REQUIRE(obj != std::string::npos);
  size_t k = log.find("\"" + key + "\":", obj);
  REQUIRE_MESSAGE(k != std::string::npos, key << " not in " << log.substr(obj, log.find('}', obj) - obj));
  return std::stod(log.substr(k + key.size() + 3));
}

}  // namespace

TEST_CASE("the log reports each quantized tensor's flushed share, and sgrt train warns once when it is large") {
  TempDir d;
  std::string model = d.file("m.lua", model_lua(d.file("data.csv", csv_rows(40))));
  ToolResult r = run_tool({"train", model, "--steps", "6", "--log-every", "3", "--log", d.path + "/log.jsonl"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::string log = slurp(d.path + "/log.jsonl");
  CHECK(flushed_share(log, "x.clamped.e2m1") == 20.0 / 32);
  CHECK(flushed_share(log, "x.e4m3") == 0);  // the weight gradient's copy of x
  // One warning, for the activation, naming the first window; none for the
  // weights (a uniform init flushes a few percent) or for the second window.
  CHECK(r.err.find("warning: x.clamped.e2m1: 62.5% of its elements were flushed to zero in steps 1-3") !=
        std::string::npos);
  size_t first = r.err.find("warning:");
  CHECK(r.err.find("warning:", first + 1) == std::string::npos);
}
