// The life of a run through the real command line:
//  - a checkpoint folder carries its compiled model and compile flags: eval,
//    export-weights and run need no model argument, a script given without
//    flags gets the recorded ones, and a conflicting flag names both values;
//  - --resume accepts the original command's flags, an equal --seed included;
//  - SIGINT / SIGTERM finish the step, save, and exit 130 / 143 with a line
//    saying how to resume; a new run over a checkpoint needs --overwrite;
//  - --eval-every N and --val-split F log held-out evaluations.
#include <signal.h>

#include <regex>
#include <sstream>

#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::string kMlp = SGRT_SOURCE_DIR "/models/fashion_mlp.lua";
const std::vector<std::string> kSmall = {"--set", "hidden=16", "--set", "batch=6000"};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> train(const std::vector<std::string>& extra) {
  return cat(cat({"train", kMlp}, kSmall), cat({"--quiet"}, extra));
}

// "test loss 2.3288, accuracy 0.0943" out of a train or eval result line.
std::string metrics_of(const std::string& out) {
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(out, m, std::regex("test loss [0-9.]+, accuracy [0-9.]+")), out);
  return m.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> r;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) r.push_back(l);
  return r;
}

int64_t field(const std::string& line, const std::string& key) {
  size_t at = line.find("\"" + key + "\":");
  REQUIRE_MESSAGE(at != std::string::npos, key << " in " << line);
  return std::stoll(line.substr(at + key.size() + 3));
}

void expect_error(const test::ToolResult& r, int code, const std::vector<std::string>& must) {
  INFO("stderr: " << r.err);
  CHECK(r.code == code);
  for (const std::string& m : must) CHECK_MESSAGE(r.err.find(m) != std::string::npos, "stderr lacks '" << m << "'");
}

}  // namespace

TEST_CASE("a checkpoint carries its compiled model: eval and export-weights need no model; conflicts name both values") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  test::ToolResult t = test::run_tool(train({"--recipe", "fp8", "--steps", "3", "--checkpoint", ck}));
  REQUIRE_MESSAGE(t.code == 0, t.err);
  std::string trained = metrics_of(t.out);
  // The folder alone; the script with the run's flags; the script alone (the flags recorded apply).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"eval", "--checkpoint", ck}, cat(cat({"eval", kMlp, "--recipe", "fp8"}, kSmall), {"--checkpoint", ck}),
        std::vector<std::string>{"eval", kMlp, "--checkpoint", ck}}) {
    test::ToolResult e = test::run_tool(args);
    REQUIRE_MESSAGE(e.code == 0, e.err);
    CHECK(e.out.rfind("step 3: ", 0) == 0);
    CHECK(metrics_of(e.out) == trained);
  }
  expect_error(test::run_tool({"eval", "--checkpoint", ck, "--recipe", "fp32"}), 2, {"--recipe fp32", "--recipe fp8"});
  expect_error(test::run_tool({"eval", kMlp, "--checkpoint", ck, "--set", "hidden=32"}), 2, {"--set hidden=32", "--set hidden=16"});
  test::ToolResult w = test::run_tool({"export-weights", "--checkpoint", ck, "-o", dir.path + "/w.safetensors"});
  CHECK_MESSAGE(w.code == 0, w.err);
  CHECK(w.out.find("(step 3)") != std::string::npos);
}

TEST_CASE("--resume accepts the original command's flags, its --seed included; another seed names both") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  std::vector<std::string> original = train({"--steps", "6", "--seed", "7", "--checkpoint", ck});
  test::ToolResult r = test::run_tool(cat(original, {"--stop-after", "2"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::string before = test::slurp(ck + "/checkpoint.sgck");
  expect_error(test::run_tool(cat(train({"--steps", "6", "--seed", "8", "--checkpoint", ck}), {"--resume"})), 2,
               {"started with --seed 7, not 8"});
  CHECK(test::slurp(ck + "/checkpoint.sgck") == before);
  r = test::run_tool(cat(original, {"--resume"}));
  CHECK_MESSAGE(r.code == 0, r.err);
  // The same as one uninterrupted run with that seed.
  test::ToolResult whole = test::run_tool(train({"--steps", "6", "--seed", "7"}));
  REQUIRE_MESSAGE(whole.code == 0, whole.err);
  CHECK(metrics_of(r.out) == metrics_of(whole.out));
}

TEST_CASE("a new run into a folder holding a checkpoint is refused unless --resume or --overwrite") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  REQUIRE(test::run_tool(train({"--steps", "2", "--checkpoint", ck})).code == 0);
  std::string before = test::slurp(ck + "/checkpoint.sgck");
  expect_error(test::run_tool(train({"--steps", "2", "--checkpoint", ck})), 2, {ck, "--resume", "--overwrite"});
  CHECK(test::slurp(ck + "/checkpoint.sgck") == before);
  test::ToolResult r = test::run_tool(train({"--steps", "3", "--checkpoint", ck, "--overwrite"}));
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(test::run_tool({"eval", "--checkpoint", ck}).out.rfind("step 3: ", 0) == 0);
}

TEST_CASE("SIGINT and SIGTERM finish the step, save a checkpoint and exit 130 / 143 saying how to resume") {
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    test::TempDir dir;
    std::string ck = dir.path + "/ck", log = dir.path + "/log.jsonl";
    test::RunningTool run;
    test::start_tool(train({"--steps", "100000", "--checkpoint", ck, "--log", log, "--log-every", "1"}), &run);
    for (int i = 0; i < 3000 && test::slurp(log).find('\n') == std::string::npos; ++i) ::usleep(10000);
    REQUIRE(::kill(run.pid, sig) == 0);
    test::ToolResult r = run.wait();
    CHECK(r.code == 128 + sig);
    CHECK_MESSAGE(r.err.find("checkpoint saved to " + ck + "; resume with the same command plus --resume") != std::string::npos,
                  r.err);
    // The checkpoint is the last logged step's.
    std::vector<std::string> lines = lines_of(test::slurp(log));
    REQUIRE(!lines.empty());
    int64_t last = field(lines.back(), "step");
    CHECK(r.err.find("after step " + std::to_string(last) + ";") != std::string::npos);
    test::ToolResult e = test::run_tool({"eval", "--checkpoint", ck});
    REQUIRE_MESSAGE(e.code == 0, e.err);
    CHECK(e.out.rfind("step " + std::to_string(last) + ": ", 0) == 0);
  }
}

TEST_CASE("--eval-every and --val-split log held-out evaluations during training") {
  test::TempDir dir;
  std::string log = dir.path + "/log.jsonl";
  test::ToolResult r = test::run_tool(train({"--steps", "14", "--eval-every", "4", "--val-split", "0.1", "--log", log}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<int64_t> steps;
  for (const std::string& l : lines_of(test::slurp(log))) {
    if (l.find("\"event\":\"eval\"") == std::string::npos) continue;
    CAPTURE(l);
    steps.push_back(field(l, "step"));
    CHECK(l.find("\"split\":\"validation\"") != std::string::npos);
    CHECK(field(l, "eval_samples") == 6000);  // a tenth of Fashion-MNIST's 60,000 training images
  }
  // Every 4 steps, and at the end of each 9-step epoch (54,000 images left to train on, 6,000 a batch).
  CHECK(steps == std::vector<int64_t>{4, 8, 9, 12});
  std::vector<std::string> lines = lines_of(test::slurp(log));
  REQUIRE(!lines.empty());
  CHECK(lines.back().find("\"event\":\"done\"") != std::string::npos);  // the final evaluation is on the test set
  CHECK(lines.back().find("\"split\"") == std::string::npos);
  expect_error(test::run_tool(train({"--steps", "2", "--val-split", "1.5"})), 2, {"--val-split"});
}
