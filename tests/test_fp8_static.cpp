// fp8-static: every scale of the step fixed at compile time (a proven bound,
// else Scalify's estimate with headroom), so no amax is computed at run time.
// Checked against the tensors' real values: at initialisation and through
// training they stay inside E4M3's normal range under their static scales
// (the kernels' saturation and flush counters, read through the log monitor).
#include <cmath>

#include "fashion.h"
#include "sgrt/quant.h"

using namespace sgrt;

namespace {

const char* kMlp = R"(
  local sg = require "sg"
  local x = sg.input("image", {100, 784})
  local y = sg.input("label", {100}, "i32")
  local h = sg.nn.linear(x, 128, { name = "fc1" }):relu()
  local logits = sg.nn.linear(h, 10, { name = "fc2" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.metric("accuracy", sg.accuracy(logits, y))
  sg.data.fashion_mnist{ image = x, label = y }
  sg.optimizer.adamw{ lr = 2e-3, weight_decay = 0 }
  sg.recipe "fp8-static"
)";

std::shared_ptr<const Model> compile(bool plan) {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g, {}, plan);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(g), "fp8_static.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return std::shared_ptr<const Model>(std::move(m));
}

// The static exponent e of the quantize reading tensor `name` (x' = x * 2^e).
int static_exponent(const Model& m, const std::string& name) {
  const int id = m.find_tensor(name);
  for (const ProgramInfo& p : m.programs())
    for (const OpInfoLoaded& op : p.ops)
      if (op.code == OpCode::Quantize && op.in[0] == id) {
        REQUIRE(op.quant[0].mode == ScaleMode::static_pow2);
        return op.quant[0].static_log2;
      }
  FAIL("no quantize reads " << name);
  return 0;
}

// E4M3: largest finite 448, smallest normal 2^-6.
void check_in_e4m3_range(const std::vector<float>& w, int e, const std::string& what) {
  double amax = 0, sq = 0;
  for (float v : w) {
    amax = std::max(amax, static_cast<double>(std::fabs(v)));
    sq += static_cast<double>(v) * v;
  }
  const double rms = std::sqrt(sq / static_cast<double>(w.size()));
  CHECK_MESSAGE(std::ldexp(amax, e) <= 448, what << ": amax " << amax << " x 2^" << e);
  CHECK_MESSAGE(std::ldexp(rms, e) >= std::ldexp(1.0, -6), what << ": rms " << rms << " x 2^" << e);
}

}  // namespace

TEST_CASE("fp8-static fixes every scale at compile time; --no-plan gives per-tensor current amax") {
  for (bool plan : {true, false}) {
    auto m = compile(plan);
    int quantizes = 0;
    for (const ProgramInfo& p : m->programs())
      for (const OpInfoLoaded& op : p.ops)
        if (op.code == OpCode::Quantize) {
          ++quantizes;
          CHECK_MESSAGE(op.quant[0].mode == (plan ? ScaleMode::static_pow2 : ScaleMode::current_amax),
                        m->tensors()[op.out[0]].name);
        }
    CHECK(quantizes >= 6);  // fc1 and fc2: x, w forward; dy and the saved operands backward
  }
}

TEST_CASE("fp8-static's scales hold the weights inside E4M3 at the start, and nothing saturates or flushes in training") {
  auto m = compile(true);
  auto s = test::open_session(m);
  for (const char* w : {"fc1.w", "fc2.w"}) check_in_e4m3_range(test::read_f32(*s, w), static_exponent(*m, w), w);

  TrainOptions o;
  o.steps = 300;
  o.seed = 3;
  o.log_every = 100;
  int64_t elements = 0, saturated = 0, reports = 0;
  o.on_step = [&](const StepReport& r) {
    ++reports;
    for (const QuantTensorCounts& c : r.quant) {
      elements += c.elements;
      saturated += c.saturated;
      CHECK_MESSAGE(c.flushed_share() < 0.01, c.tensor << " flushed " << c.flushed_share() << " by step " << r.step);
    }
  };
  TrainResult r;
  Status st = train(*s, test::fashion(), o, &r);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(reports == 3);
  CHECK(elements > 0);
  CHECK_MESSAGE(saturated < elements / 100000, saturated << " of " << elements << " saturated");
  for (const char* w : {"fc1.w", "fc2.w"}) check_in_e4m3_range(test::read_f32(*s, w), static_exponent(*m, w), w);
  CHECK(r.final_eval.metrics.at(0).second > 0.80f);
}
