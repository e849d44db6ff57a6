// Training on CUDA end to end: the Fashion-MNIST MLP (real data) reaches the
// CPU's accuracy in fp32 and under fp8 and fp4; a LoRA fine-tune of a tiny
// models/llama.lua tracks the CPU's losses (fp32) and codes (fp8, nvfp4) as on
// Vulkan (backend_compare.h); a bad label is reported at the next read, naming
// the op, instead of failing mid-step. Skips without a device.
#include <cmath>

#include "backend_compare.h"
#include "fashion.h"
#include "test_cuda_support.h"

using namespace sgrt;

namespace {

const char* kMlp = R"(
  local sg = require "sg"
  local cfg = sg.config{ recipe = "fp32" }
  local x = sg.input("image", {100, 784})
  local y = sg.input("label", {100}, "i32")
  local h = sg.nn.linear(x, 128, { name = "fc1" }):relu()
  local logits = sg.nn.linear(h, 10, { name = "fc2" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.metric("accuracy", sg.accuracy(logits, y))
  sg.data.fashion_mnist{ image = x, label = y }
  sg.optimizer.adamw{ lr = 2e-3, weight_decay = 0 }
  sg.recipe(cfg.recipe)
)";

float accuracy_on(const std::string& backend, const std::string& recipe) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kMlp, &m, {{"recipe", recipe}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m, backend);
  return test::trained_accuracy(*s, 300, 3);
}

}  // namespace

TEST_CASE("the Fashion-MNIST MLP trains on cuda to the cpu's accuracy") {
  if (!test::cuda_device_present()) return;
  // Same seed and data order on both; only rounding differs, so after 300 steps
  // the test accuracies (10000 images) agree to within a few tenths of a percent.
  for (const char* r : {"fp32", "fp8", "fp4"}) {
    float cpu = accuracy_on("cpu", r), gpu = accuracy_on("cuda", r);
    MESSAGE(std::string(r) << ": cpu " << cpu << ", cuda " << gpu);
    CHECK(gpu > 0.75f);
    CHECK_MESSAGE(std::fabs(gpu - cpu) < 0.01f, r);
  }
}

TEST_CASE("a LoRA fine-tune of the tiny llama (GQA, tied head) on cuda: fp32 losses and fp8/nvfp4 codes as the cpu's") {
  if (!test::cuda_device_present()) return;
  test::check_lora_parity("cuda");
}

TEST_CASE("a label out of range is reported at the next read, naming the op") {
  if (!test::cuda_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kMlp, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m, "cuda");
  std::vector<int32_t> labels(100, 1);
  labels[17] = 12;
  test::write_vec(*s, "label", labels);
  int p = -1;
  REQUIRE(s->find_program("train_step", &p).ok());
  REQUIRE(s->run(p).ok());  // enqueued: kernels cannot fail mid-step
  float loss = 0;
  st = s->read_scalar(m->loss(), &loss);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("label 12 at row 17 is outside [0, 10)") != std::string::npos);
  CHECK(st.message().find("softmax_cross_entropy") != std::string::npos);
  labels[17] = 3;  // reported once; a good step reads cleanly afterwards
  test::write_vec(*s, "label", labels);
  REQUIRE(s->run(p).ok());
  CHECK(s->read_scalar(m->loss(), &loss).ok());
}
