// Nothing a run writes is lost silently, through the real command line:
//  - the checkpoint folder and the --log file are locked for the run: a second
//    trainer on either exits 2 naming the first one's pid;
//  - a log or checkpoint write that fails (full disk: /dev/full, RLIMIT_FSIZE)
//    is exit 1, a run-time failure;
//  - a log line with a non-finite number is still JSON (null, "nonfinite": true),
//    and a run ending on a non-finite loss exits 1, even when only the loss
//    (-inf) and not the gradients went bad;
//  - a resumed run's log is exactly an uninterrupted one's, even when lines
//    past the checkpoint had been written before the run died;
//  - temporary files that killed writers left in the folder are removed.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <regex>
#include <sstream>

#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::string kMlp = SGRT_SOURCE_DIR "/models/fashion_mlp.lua";

// A 3-step run of the MLP at hidden 16 (an epoch is 10 steps of 6000).
std::vector<std::string> mlp(int steps, const std::vector<std::string>& extra) {
  std::vector<std::string> a{"train", kMlp, "--set", "hidden=16", "--set", "batch=6000", "--steps", std::to_string(steps),
                             "--quiet"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> r;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) r.push_back(l);
  return r;
}

// Waits until `path` holds at least one line: the run is past its start, with its locks taken.
void wait_for_line(const std::string& path) {
  for (int i = 0; i < 3000 && test::slurp(path).find('\n') == std::string::npos; ++i) ::usleep(10000);
  REQUIRE_MESSAGE(test::slurp(path).find('\n') != std::string::npos, path << " stayed empty");
}

// A JSON checker small enough to trust for what the log writes: one object
// of lower-case keys whose values are numbers, strings, true, false or null.
bool json_object(const std::string& l) {
  static const std::string v = R"((-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|"[a-z_]*"|true|false|null))";
  static const std::regex object("\\{\"[a-z_]+\":" + v + "(,\"[a-z_]+\":" + v + ")*\\}");
  return std::regex_match(l, object);
}

void limit_files_to_64k() {
  ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing the process
  rlimit r{64 << 10, 64 << 10};
  ::setrlimit(RLIMIT_FSIZE, &r);
}

// Logistic regression whose loss adds the mean log of the raw pixels: -inf
// (Fashion-MNIST images have black pixels) while no gradient reaches a
// parameter through it, so every gradient stays finite.
const char kNegInfLoss[] = R"(local sg = require "sg"
local x = sg.input("image", { 2000, 784 })
local y = sg.input("label", { 2000 }, "i32")
local logits = sg.nn.linear(x, 10, { name = "fc" })
sg.loss(sg.softmax_cross_entropy(logits, y) + sg.mean(sg.mean(sg.log(x))))
sg.data.fashion_mnist{ image = x, label = y }
sg.optimizer.sgd{ lr = 0.1 }
)";

}  // namespace

TEST_CASE("a second trainer on a locked checkpoint folder or log exits 2 naming the first one's pid") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck", log = dir.path + "/log.jsonl";
  test::RunningTool first;
  test::start_tool(mlp(100000, {"--checkpoint", ck, "--log", log, "--log-every", "1"}), &first);
  wait_for_line(log);
  std::string pid = "(pid " + std::to_string(first.pid) + ")";
  test::ToolResult second = test::run_tool(mlp(3, {"--checkpoint", ck, "--resume"}));
  CHECK(second.code == 2);
  CHECK_MESSAGE(second.err.find(ck + ": the checkpoint folder is in use by another sgrt run " + pid) != std::string::npos,
                second.err);
  test::ToolResult third = test::run_tool(mlp(3, {"--log", log}));
  CHECK(third.code == 2);
  CHECK_MESSAGE(third.err.find(log + ": the log is in use by another sgrt run " + pid) != std::string::npos, third.err);
  REQUIRE(::kill(first.pid, SIGTERM) == 0);
  test::ToolResult r = first.wait();
  CHECK(r.code == 128 + SIGTERM);
  // The second and third runs wrote nothing into the first one's log.
  for (const std::string& l : lines_of(test::slurp(log))) CHECK(l.find("\"done\"") == std::string::npos);
}

TEST_CASE("a log write on a full disk is a run-time failure (exit 1)") {
  test::ToolResult r = test::run_tool(mlp(3, {"--log", "/dev/full"}));
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("/dev/full: write failed: No space left on device") != std::string::npos, r.err);
}

TEST_CASE("a checkpoint write past the file size limit is a run-time failure (exit 1)") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  test::ToolResult r = test::run_tool(mlp(3, {"--checkpoint", ck}), limit_files_to_64k);
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find(ck + "/checkpoint.sgck: write failed: File too large") != std::string::npos, r.err);
  struct stat st {};
  CHECK(::stat((ck + "/checkpoint.sgck").c_str(), &st) != 0);  // nothing half-written
}

TEST_CASE("a -inf loss with finite gradients is non-finite: null in the log, counted, and exit 1") {
  test::TempDir dir;
  std::string script = dir.file("neginf.lua", kNegInfLoss), log = dir.path + "/log.jsonl";
  test::ToolResult r = test::run_tool({"train", script, "--steps", "3", "--quiet", "--log", log, "--log-every", "1"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("the last step's loss is -inf") != std::string::npos, r.err);
  std::vector<std::string> lines = lines_of(test::slurp(log));
  REQUIRE(lines.size() == 4);  // steps 1..3 and the done event
  for (size_t i = 0; i < lines.size(); ++i) {
    CAPTURE(lines[i]);
    CHECK(json_object(lines[i]));
    CHECK(lines[i].find("\"loss\":null") != std::string::npos);
    CHECK(lines[i].find("\"nonfinite\":true") != std::string::npos);
    if (i < 3) CHECK(lines[i].find("\"nonfinite_steps\":" + std::to_string(i + 1)) != std::string::npos);
  }
  // Finite lines are JSON too, and carry no marker.
  r = test::run_tool(mlp(2, {"--log", log, "--log-every", "1"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  for (const std::string& l : lines_of(test::slurp(log))) {
    CAPTURE(l);
    CHECK(json_object(l));
    CHECK(l.find("nonfinite\":true") == std::string::npos);
  }
}

TEST_CASE("a resumed run cuts the log back to its checkpoint: the log is an uninterrupted run's") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck", full = dir.path + "/full.jsonl", part = dir.path + "/part.jsonl";
  auto with_log = [](const std::string& log, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--log", log, "--log-every", "1"});
    return mlp(14, extra);
  };
  test::ToolResult r = test::run_tool(with_log(full, {}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = test::run_tool(with_log(part, {"--checkpoint", ck, "--stop-after", "4"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::string at4 = test::slurp(ck + "/checkpoint.sgck");
  // The run goes on to step 12 (an epoch's eval included) and dies; its last checkpoint is step 4's.
  r = test::run_tool(with_log(part, {"--checkpoint", ck, "--resume", "--stop-after", "12"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  { std::ofstream(ck + "/checkpoint.sgck", std::ios::binary) << at4; }
  r = test::run_tool(with_log(part, {"--checkpoint", ck, "--resume"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  static const std::regex speed(",\"samples_per_s\":[^,}]*");
  std::vector<std::string> a = lines_of(test::slurp(full)), b = lines_of(test::slurp(part));
  REQUIRE(a.size() == 14 + 1 + 1);  // a line per step, the epoch's eval, done
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(std::regex_replace(a[i], speed, "") == std::regex_replace(b[i], speed, ""));
  }
}

TEST_CASE("temporary files of killed checkpoint writers are removed at the start of a run; a live writer's stay") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  REQUIRE(::mkdir(ck.c_str(), 0755) == 0);
  pid_t dead = fork();
  REQUIRE(dead >= 0);
  if (dead == 0) _exit(0);
  REQUIRE(waitpid(dead, nullptr, 0) == dead);  // reaped: its pid names no process
  std::string stale = "checkpoint.sgck.tmp." + std::to_string(dead), stale_model = "model.sg.tmp." + std::to_string(dead);
  std::string live = "checkpoint.sgck.tmp." + std::to_string(::getpid());
  for (const std::string& f : {stale, stale_model, live}) std::ofstream(ck + "/" + f) << "partial";
  test::ToolResult r = test::run_tool(mlp(2, {"--checkpoint", ck}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  struct stat st {};
  CHECK(::stat((ck + "/" + stale).c_str(), &st) != 0);
  CHECK(::stat((ck + "/" + stale_model).c_str(), &st) != 0);
  CHECK(::stat((ck + "/" + live).c_str(), &st) == 0);
}
