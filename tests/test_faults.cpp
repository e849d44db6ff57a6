// Faults during training: a NaN in an activation and an inf in a gradient are
// skipped and training converges (on the cpu and on vulkan); a run of them stops cleanly with the last
// checkpoint intact; SIGKILL during a checkpoint write and a full disk leave
// the previous checkpoint whole; data files that vanish after open do not
// matter, and before open they give a clear error.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "harness.h"
#include "tool_runner.h"
#include "sgrt/checkpoint.h"
#include "sgrt/file_io.h"
#include "sgrt/quant.h"
#include "sgrt/trainer.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

// Three separable classes. reg = -1e-3 * mean(log(x * p)) is finite for any
// positive x, but its gradient 1 / (x p) overflows when x is denormal: that
// is how a test puts an inf into a gradient while the forward pass stays finite.
const char kBlobModel[] = R"(
local sg = require "sg"
local x = sg.input("image", {8, 4})
local y = sg.input("label", {8}, "i32")
local logits = sg.nn.linear(x, 3, { name = "fc" })
local p = sg.param("p", {4}, "ones")
local reg = sg.scale(sg.mean(sg.mean(sg.log(x * p))), -1e-3)
sg.loss(sg.softmax_cross_entropy(logits, y) + reg)
sg.metric("accuracy", sg.accuracy(logits, y))
sg.data.fashion_mnist{ image = x, label = y }
sg.optimizer.sgd{ lr = 0.1 }
)";

// A model whose checkpoint (2.4 MB) takes a while to write.
const char kWideModel[] = R"(
local sg = require "sg"
local x = sg.input("image", {8, 784})
local y = sg.input("label", {8}, "i32")
local h = sg.nn.linear(x, 256, { name = "fc1" }):relu()
sg.loss(sg.softmax_cross_entropy(sg.nn.linear(h, 10, { name = "fc2" }), y))
sg.data.fashion_mnist{ image = x, label = y }
sg.optimizer.adamw{ lr = 1e-3 }
)";

enum class Fault { none, nan_once, nan_from, denormal_once };

// Blobs around (1, 1, 1, 1) + e_class, with a fault in the train batch of step `at`.
class Blobs final : public Dataset {
 public:
  Blobs(Fault f, int64_t at) : fault_(f), at_(at) {}
  int64_t size(Split s) const override { return s == Split::train ? 240 : 60; }
  Status check_field(const std::string&, const TensorInfo&) const override { return Status::Ok(); }
  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo&,
                void* dst) const override {
    if (field == "label") {
      for (int64_t r = 0; r < n; ++r) static_cast<int32_t*>(dst)[r] = label(s, idx[r]);
      return Status::Ok();
    }
    float* x = static_cast<float*>(dst);
    for (int64_t r = 0; r < n; ++r)
      for (int j = 0; j < 4; ++j) {
        uint32_t h = static_cast<uint32_t>((idx[r] * 4 + j) * 2654435761u + (s == Split::test));
        x[r * 4 + j] = 1.f + (j == label(s, idx[r]) ? 1.f : 0.f) + 0.3f * ((h >> 8) % 1000 / 1000.f - 0.5f);
      }
    if (s == Split::train) {
      int64_t step = steps_++;
      bool nan = (fault_ == Fault::nan_once && step == at_) || (fault_ == Fault::nan_from && step >= at_);
      if (nan) x[5] = std::numeric_limits<float>::quiet_NaN();
      if (fault_ == Fault::denormal_once && step == at_) x[5] = std::numeric_limits<float>::denorm_min();
    }
    return Status::Ok();
  }

 private:
  static int32_t label(Split s, int64_t i) { return static_cast<int32_t>((i + (s == Split::test)) % 3); }
  Fault fault_;
  int64_t at_;
  mutable int64_t steps_ = 0;  // train batches served so far = the step being loaded
};

std::unique_ptr<Session> session_of(const char* lua, const std::string& backend = "cpu") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return test::open_session(m, backend);
}

int32_t nonfinite_total(const Session& s) {
  int32_t ts[kTrainStateLen] = {};
  REQUIRE(s.read(s.model().train_state(), ts, sizeof ts).ok());
  return ts[kNonfiniteTotal];
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v) if (!std::isfinite(x)) return false;
  return true;
}

float metric(const EvalReport& e, const std::string& name) {
  for (auto& [n, v] : e.metrics) if (n == name) return v;
  FAIL("no metric " << name);
  return 0;
}

using test::TempDir;

// Trains 150 steps with one faulty batch at step index 50; returns the loss per step.
std::vector<float> train_with_one_fault(Fault f, Session& s, TrainResult* res) {
  Blobs data(f, 50);
  std::vector<float> losses;
  TrainOptions o;
  o.steps = 150;
  o.log_every = 1;
  o.on_step = [&](const StepReport& r) { losses.push_back(r.loss); };
  Status st = train(s, data, o, res);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(losses.size() == 150);
  return losses;
}

}  // namespace

void nan_activation_is_skipped(const std::string& backend) {
  auto s = session_of(kBlobModel, backend);
  TrainResult res;
  std::vector<float> losses = train_with_one_fault(Fault::nan_once, *s, &res);
  CHECK(std::isnan(losses[50]));  // the NaN reached the forward pass
  CHECK(std::isfinite(losses[51]));
  CHECK(nonfinite_total(*s) == 1);
  CHECK(all_finite(test::read_f32(*s, "fc.w")));
  CHECK(std::isfinite(res.final_eval.loss));
  CHECK(metric(res.final_eval, "accuracy") > 0.95f);
}

void inf_gradient_is_skipped(const std::string& backend) {
  auto s = session_of(kBlobModel, backend);
  TrainResult res;
  std::vector<float> losses = train_with_one_fault(Fault::denormal_once, *s, &res);
  CHECK(std::isfinite(losses[50]));  // the forward pass stayed finite
  CHECK(nonfinite_total(*s) == 1);
  CHECK(all_finite(test::read_f32(*s, "p")));
  CHECK(all_finite(test::read_f32(*s, "fc.w")));
  CHECK(metric(res.final_eval, "accuracy") > 0.95f);
}

TEST_CASE("a NaN in an activation mid training: the step is skipped and training converges") {
  nan_activation_is_skipped("cpu");
}

TEST_CASE("an inf in a gradient only (finite loss) mid training: the step is skipped and training converges") {
  inf_gradient_is_skipped("cpu");
}

// check_finite's gradient workgroups run side by side there and their flags meet in one count.
TEST_CASE("vulkan: a NaN activation and an inf gradient skip their steps as on the cpu") {
  if (!test::vulkan_device_present()) return;
  nan_activation_is_skipped("vulkan");
  inf_gradient_is_skipped("vulkan");
}

TEST_CASE("a run of NaN steps stops training with a clear error; the last checkpoint is intact and current") {
  TempDir dir;
  auto s = session_of(kBlobModel);
  Blobs data(Fault::nan_from, 40);
  TrainOptions o;
  o.steps = 150;
  o.log_every = 1;
  o.on_step = [&](const StepReport& r) {
    if (r.step % 10 == 0) REQUIRE(save_checkpoint(*s, dir.path, r.step).ok());
  };
  TrainResult res;
  Status st = train(*s, data, o, &res);
  REQUIRE(!st.ok());
  CHECK(st.code() == StatusCode::runtime_error);
  CHECK(st.message().find("training stopped at step 48: 8 consecutive steps had NaN or inf gradients") !=
        std::string::npos);
  // Skipped steps updated nothing: the live parameters are the checkpoint's.
  std::vector<float> live = test::read_f32(*s, "fc.w");
  CHECK(all_finite(live));
  auto fresh = session_of(kBlobModel);
  int64_t step = -1;
  st = load_checkpoint(*fresh, dir.path, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(step == 40);
  CHECK(test::read_f32(*fresh, "fc.w") == live);
  CHECK(dir.list() == std::set<std::string>{"checkpoint.sgck"});
}

TEST_CASE("checkpoints due during a streak of non-finite steps are not written: the last good one is kept") {
  TempDir dir;
  auto s = session_of(kBlobModel);
  Blobs data(Fault::nan_from, 40);  // steps 41.. see a NaN
  TrainOptions o;
  o.steps = 150;
  o.checkpoint_dir = dir.path;
  o.checkpoint_every = 5;  // due at 45, inside the streak that stops the run at 48
  TrainResult res;
  Status st = train(*s, data, o, &res);
  REQUIRE(!st.ok());
  CHECK(st.message().find("training stopped at step 48") != std::string::npos);
  auto fresh = session_of(kBlobModel);
  int64_t step = -1;
  st = load_checkpoint(*fresh, dir.path, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(step == 40);
  CHECK(nonfinite_total(*fresh) == 0);
}

TEST_CASE("SIGKILL during checkpoint writes: the previous checkpoint is intact and loads") {
  TempDir dir;
  auto s = session_of(kWideModel);
  const int w = test::tensor_id(*s, "fc1.w");
  const size_t n = s->model().tensors()[w].bytes / sizeof(float);
  test::write_vec(*s, "fc1.w", std::vector<float>(n, 0.f));
  REQUIRE(save_checkpoint(*s, dir.path, 0).ok());
  const std::string file = dir.path + "/checkpoint.sgck";
  for (int round = 0; round < 6; ++round) {
    struct stat before {};
    REQUIRE(::stat(file.c_str(), &before) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // saves checkpoint k with fc1.w filled with k, forever
      std::vector<float> v(n);
      for (int64_t k = 1;; ++k) {
        std::fill(v.begin(), v.end(), static_cast<float>(k));
        if (!s->write(w, v.data(), n * sizeof(float)).ok() || !save_checkpoint(*s, dir.path, k).ok()) _exit(3);
      }
    }
    // Once the child has renamed a new checkpoint in (a new inode), kill it
    // a little later each round: at different points of the next write.
    struct stat now {};
    for (int wait = 0; wait < 3000 && ::stat(file.c_str(), &now) == 0 && now.st_ino == before.st_ino; ++wait)
      ::usleep(10000);
    CHECK(now.st_ino != before.st_ino);
    ::usleep(3000 * round);
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE_MESSAGE(WIFSIGNALED(status), "the writer exited on its own: status " << status);
    int64_t step = -1;
    Status st = load_checkpoint(*s, dir.path, &step);
    REQUIRE_MESSAGE(st.ok(), st.message());
    std::vector<float> got = test::read_f32(*s, "fc1.w");
    CHECK(got == std::vector<float>(n, static_cast<float>(step)));  // one whole checkpoint, not a mix
    MESSAGE("round " << round << ": killed after checkpoint " << step);
    // The killed writer may leave its PATH.tmp.<pid> behind; never the checkpoint half-written.
    for (const std::string& f : dir.list())
      if (f != "checkpoint.sgck") {
        CHECK(f.rfind("checkpoint.sgck.tmp.", 0) == 0);
        std::remove((dir.path + "/" + f).c_str());
      }
  }
}

TEST_CASE("a full disk while writing a checkpoint: a clear error, the previous checkpoint intact, no temp file") {
  TempDir dir;
  auto s = session_of(kWideModel);
  REQUIRE(save_checkpoint(*s, dir.path, 1).ok());
  std::vector<float> before = test::read_f32(*s, "fc1.w");
  std::vector<float> v(before.size(), 5.f);
  test::write_vec(*s, "fc1.w", v);
  // RLIMIT_FSIZE with SIGXFSZ ignored: write() past 64 KiB fails with EFBIG.
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  rlimit small = old;
  small.rlim_cur = 64 << 10;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  Status st = save_checkpoint(*s, dir.path, 2);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
  ::signal(SIGXFSZ, old_handler);
  REQUIRE(!st.ok());
  CHECK(st.code() == StatusCode::io_error);
  CHECK(st.message().find(dir.path + "/checkpoint.sgck: write failed: File too large") != std::string::npos);
  CHECK(dir.list() == std::set<std::string>{"checkpoint.sgck"});
  int64_t step = -1;
  st = load_checkpoint(*s, dir.path, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(step == 1);
  CHECK(test::read_f32(*s, "fc1.w") == before);
}

namespace {

const char* const kIdxFiles[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                  "t10k-labels-idx1-ubyte"};

// A small Fashion-MNIST look-alike: n images whose class is the row that is lit.
void write_idx(const std::string& dir, const char* prefix, uint8_t n) {
  std::vector<uint8_t> img = {0, 0, 8, 3, 0, 0, 0, n, 0, 0, 0, 28, 0, 0, 0, 28}, lab = {0, 0, 8, 1, 0, 0, 0, n};
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < 784; ++p) img.push_back(p / 28 == i % 10 ? 255 : 0);
    lab.push_back(static_cast<uint8_t>(i % 10));
  }
  std::string base = dir + "/" + prefix;
  REQUIRE(write_file_atomic(base + "-images-idx3-ubyte", img.data(), img.size()).ok());
  REQUIRE(write_file_atomic(base + "-labels-idx1-ubyte", lab.data(), lab.size()).ok());
}

}  // namespace

TEST_CASE("data files that vanish after open do not matter; before open they give a clear error") {
  TempDir dir;
  write_idx(dir.path, "train", 64);
  write_idx(dir.path, "t10k", 16);
  std::unique_ptr<Dataset> data;
  Status st = open_fashion_mnist(dir.path, &data);
  REQUIRE_MESSAGE(st.ok(), st.message());
  for (const char* f : kIdxFiles) REQUIRE(std::remove((dir.path + "/" + f).c_str()) == 0);
  auto s = session_of(kWideModel);
  TrainOptions o;
  o.steps = 24;  // three epochs: eval between them reads the test split again
  TrainResult res;
  st = train(*s, *data, o, &res);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(res.final_eval.samples == 16);
  CHECK(std::isfinite(res.final_eval.loss));

  std::unique_ptr<Dataset> none;
  st = open_fashion_mnist(dir.path, &none);
  REQUIRE(!st.ok());
  CHECK(st.message().find(dir.path + "/train-images-idx3-ubyte: cannot open") != std::string::npos);
}
