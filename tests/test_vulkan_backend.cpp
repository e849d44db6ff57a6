// The Vulkan backend's edges: device selection and its errors, a bad label
// reported with its Lua line, the staging path and reads through host-cached
// memory, and a short Fashion-MNIST run
// that must track the CPU's losses.
#include <algorithm>
#include <cstdlib>

#include "backend_compare.h"
#include "scoped_env.h"
#include "fashion.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

const char* kClassifier = R"(
  local sg = require "sg"
  local x = sg.input("x", {4, 3})
  local y = sg.input("y", {4}, "i32")
  local w = sg.param("w", {3, 5}, {"normal", 0, 0.5})
  local logits = x:matmul(w)
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.optimizer.sgd{ lr = 0.1 }
)";

}  // namespace

TEST_CASE("SGRT_VULKAN_DEVICE: by name, and a clear error when nothing matches") {
  if (!test::vulkan_device_present()) return;
  std::unique_ptr<Backend> be;
  {
    test::ScopedEnv e("SGRT_VULKAN_DEVICE", "no-such-gpu");
    Status st = make_backend("vulkan", &be);
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find("SGRT_VULKAN_DEVICE=no-such-gpu") != std::string::npos);
    CHECK(st.message().find("devices: 0: ") != std::string::npos);
  }
  {
    test::ScopedEnv e("SGRT_VULKAN_DEVICE", "99");
    CHECK_FALSE(make_backend("vulkan", &be).ok());
  }
  {
    // CI runs on lavapipe ("llvmpipe (LLVM ...)"); the tests must not silently skip there.
    test::ScopedEnv e("SGRT_VULKAN_DEVICE", "LLVMPIPE");
    Status st = make_backend("vulkan", &be);
    if (std::getenv("CI")) CHECK_MESSAGE(st.ok(), "CI must have lavapipe: " << st.message());
    else if (!st.ok()) MESSAGE("no lavapipe here: " << st.message());
  }
}

TEST_CASE("no Vulkan driver at all: make_backend fails with one clear line") {
  test::ScopedEnv e("VK_ICD_FILENAMES", "/nonexistent/icd.json");
  test::ScopedEnv d("VK_DRIVER_FILES", "/nonexistent/icd.json");
  std::unique_ptr<Backend> be;
  Status st = make_backend("vulkan", &be);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == StatusCode::unsupported);
  CHECK(st.message().find("no Vulkan") != std::string::npos);
}

TEST_CASE("a label outside [0, classes) is an error naming the op's Lua line") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kClassifier, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m, "vulkan");
  test::write_vec<float>(*s, "x", std::vector<float>(12, 0.5f));
  test::write_vec<int32_t>(*s, "y", {0, 1, 7, 2});
  int p = -1;
  REQUIRE(s->find_program("eval", &p).ok());
  st = s->run(p);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("softmax_cross_entropy") != std::string::npos);
  CHECK(st.message().find(".lua:7") != std::string::npos);
  test::write_vec<int32_t>(*s, "y", {0, 1, 4, 2});
  CHECK(s->run(p).ok());  // the error word is reset for the next run
}

TEST_CASE("the staging path (device-local arena) moves the same bytes") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kClassifier, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::ScopedEnv e("SGRT_VULKAN_STAGING", "1");
  auto staged = test::open_session(m, "vulkan", 9);
  unsetenv("SGRT_VULKAN_STAGING");
  auto mapped = test::open_session(m, "vulkan", 9);
  for (auto* s : {staged.get(), mapped.get()}) {
    test::write_vec<float>(*s, "x", {1, 2, 3, -1, 0.5f, 0, 2, 2, -2, 0.25f, 1, 3});
    test::write_vec<int32_t>(*s, "y", {0, 4, 2, 1});
    test::run(*s, "train_step");
  }
  CHECK(test::read_f32(*staged, "w") == test::read_f32(*mapped, "w"));
  CHECK(test::loss_of(*staged) == test::loss_of(*mapped));
}

TEST_CASE("reads through host-cached memory (SGRT_VULKAN_READBACK=staged) give the mapping's bytes") {
  // A discrete GPU's mapped arena is uncached, so reads past 4 KiB go through a
  // device copy to host-cached memory; lavapipe's is cached and reads directly
  // unless told. w (48 KB) and a 5 KB range inside it take the copy, the loss
  // (4 bytes) never does.
  if (!test::vulkan_device_present()) return;
  const char* lua = R"(
    local sg = require "sg"
    local x = sg.input("x", {4, 300})
    local y = sg.input("y", {4}, "i32")
    local w = sg.param("w", {300, 40}, {"normal", 0, 0.1})
    sg.loss(sg.softmax_cross_entropy(x:matmul(w), y))
    sg.optimizer.sgd{ lr = 0.1 }
  )";
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Session> staged, direct, device_arena;
  REQUIRE(test::vulkan_session_with("SGRT_VULKAN_READBACK", "staged", m, &staged).ok());
  REQUIRE(test::vulkan_session_with("SGRT_VULKAN_READBACK", "direct", m, &direct).ok());
  REQUIRE(test::vulkan_session_with("SGRT_VULKAN_STAGING", "1", m, &device_arena).ok());
  std::vector<float> x(4 * 300);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  const int w = m->find_tensor("w");
  std::vector<std::vector<uint8_t>> whole, range;
  for (Session* s : {staged.get(), direct.get(), device_arena.get()}) {
    REQUIRE(s->init(5, 1).ok());
    test::write_vec<float>(*s, "x", x);
    test::write_vec<int32_t>(*s, "y", {0, 39, 7, 21});
    test::run(*s, "train_step");
    whole.push_back(test::bytes_of(*s, w));
    range.emplace_back(5000);
    REQUIRE(s->read_range(w, 4 * 1001, range.back().data(), range.back().size()).ok());
  }
  CHECK(whole[0] == whole[1]);
  CHECK(whole[2] == whole[1]);
  CHECK(range[0] == range[1]);
  CHECK(range[2] == range[1]);
  CHECK(std::equal(range[1].begin(), range[1].end(), whole[1].begin() + 4 * 1001));
  CHECK(test::loss_of(*staged) == test::loss_of(*direct));
}

TEST_CASE("SGRT_VULKAN_READBACK: a value it does not know, and direct reads of an arena the host cannot see, are refused") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(kClassifier, &m).ok());
  std::unique_ptr<Session> s;
  Status st = test::vulkan_session_with("SGRT_VULKAN_READBACK", "cached", m, &s);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("SGRT_VULKAN_READBACK is direct or staged, not 'cached'") != std::string::npos);
  test::ScopedEnv device_arena("SGRT_VULKAN_STAGING", "1");
  st = test::vulkan_session_with("SGRT_VULKAN_READBACK", "direct", m, &s);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("SGRT_VULKAN_READBACK=direct, but the arena is not host-visible") != std::string::npos);
}

TEST_CASE("fashion MLP: 200 steps on vulkan track the cpu's losses") {
  if (!test::vulkan_device_present()) return;
  std::unique_ptr<Dataset> data;
  if (!open_fashion_mnist(kFashionMnistDir, &data).ok()) {
    MESSAGE("skipping: no Fashion-MNIST under " << kFashionMnistDir);
    return;
  }
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(test::fashion_mlp_lua(), &m, {{"batch", "100"}, {"hidden", "128"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  TrainOptions o;
  o.steps = 200;
  o.seed = 1;
  o.log_every = 50;
  TrainResult res[2];
  test::train_on_both(m, "vulkan", *data, o, res);
  test::check_losses_track(res, 1e-3);
  CHECK(res[1].final_eval.loss == doctest::Approx(res[0].final_eval.loss).epsilon(1e-3));
  MESSAGE("eval loss cpu " << res[0].final_eval.loss << ", vulkan " << res[1].final_eval.loss);
}

// SGRT_VULKAN_ARENA=address: the *_addr shaders reach the arena by its device
// address instead of binding 0. The same dispatches on the same bytes: two
// training steps of the transformer model (every transformer op, the GEMMs,
// AdamW) leave every tensor bit for bit as the bound arena's.
TEST_CASE("an arena reached by its device address trains bit for bit as the bound one") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(test::kTransformerModel, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Session> by_address;
  st = test::vulkan_session_with("SGRT_VULKAN_ARENA", "address", m, &by_address);
  if (!st.ok()) {  // a device without Vulkan 1.2's bufferDeviceAddress must say so
    CHECK(st.message().find("bufferDeviceAddress") != std::string::npos);
    MESSAGE("skipping: " << st.message());
    return;
  }
  REQUIRE(by_address->init(3, 100).ok());
  auto bound = test::open_session(m, "vulkan", 3);
  test::write_inputs(*bound, *by_address, 11);
  for (int step = 0; step < 2; ++step)
    for (Session* s : {bound.get(), by_address.get()}) test::run(*s, "train_step");
  const std::vector<TensorInfo>& ts = m->tensors();
  for (size_t id = 0; id < ts.size(); ++id) {
    CAPTURE(ts[id].name);
    CHECK(test::bytes_of(*bound, static_cast<int>(id)) == test::bytes_of(*by_address, static_cast<int>(id)));
  }
}

// An arena past the device's maxStorageBufferRange (lavapipe's is 128 MiB, the
// Vulkan floor): reached by address without being asked, it trains as the
// CPU does, with the looked-up rows of a frozen 138 MB table lying past the
// range; SGRT_VULKAN_ARENA=binding refuses it, naming the limit.
TEST_CASE("an arena past maxStorageBufferRange runs by address, and binding it is refused") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local ids = sg.input("ids", {4}, "i32")
    local y = sg.input("y", {4}, "i32")
    local table = sg.param("table", {270000, 128}, {"normal", 0, 0.5})
    sg.freeze("^table$")
    local w = sg.param("w", {128, 10}, {"normal", 0, 0.1})
    sg.loss(sg.softmax_cross_entropy(sg.embedding(table, ids):matmul(w), y))
    sg.optimizer.adamw{ lr = 1e-2 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Session> s;
  st = test::vulkan_session_with("SGRT_VULKAN_ARENA", "binding", m, &s);
  if (st.ok()) {
    MESSAGE("this device's maxStorageBufferRange holds the whole arena: nothing to check");
    return;
  }
  CHECK(st.message().find("SGRT_VULKAN_ARENA=binding, but") != std::string::npos);
  CHECK(st.message().find("maxStorageBufferRange") != std::string::npos);
  st = test::vulkan_session_with("SGRT_VULKAN_ARENA", "", m, &s);  // the backend's choice
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(s->init(3, 100).ok());
  auto cpu = test::open_session(m, "cpu", 3);
  for (Session* x : {cpu.get(), s.get()}) {
    test::write_vec(*x, "ids", std::vector<int32_t>{0, 135000, 269999, 7});
    test::write_vec(*x, "y", std::vector<int32_t>{1, 2, 3, 4});
    test::run(*x, "train_step");
    test::run(*x, "train_step");
  }
  CHECK(test::normalized_error(test::read_f32(*s, "w"), test::read_f32(*cpu, "w")) <= test::kF32Bound);
  CHECK(test::loss_of(*s, "eval") == doctest::Approx(test::loss_of(*cpu, "eval")).epsilon(1e-5));
}
