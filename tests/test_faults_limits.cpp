// Runtime limits: `sgrt train/eval --max-memory BYTES` refuses a model whose
// memory plan needs a bigger arena, before allocating it, with the plan's
// figure in the message and exit status 2.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

using namespace sgrt;

namespace {

const std::string kTool = SGRT_BINARY_DIR "/tools/sgrt";
const std::string kMlp = SGRT_SOURCE_DIR "/models/fashion_mlp.lua";

// Runs the tool; returns its exit status (-1 if signalled) and its stderr.
int run_tool(std::vector<std::string> args, std::string* err) {
  test::TempFile errf(".stderr");
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int fe = open(errf.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = open("/dev/null", O_WRONLY);
    if (fe < 0 || null < 0 || dup2(fe, 2) < 0 || dup2(null, 1) < 0) _exit(127);
    std::vector<char*> argv{const_cast<char*>(kTool.c_str())};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(kTool.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  std::ifstream f(errf.path);
  *err = std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(!(WIFEXITED(status) && WEXITSTATUS(status) == 127));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

uint64_t mlp_arena() {
  std::ifstream f(kMlp);
  std::string lua((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m->arena_bytes();
}

}  // namespace

TEST_CASE("--max-memory below the plan's arena: exit 2 with the plan's figure, for train and eval") {
  const std::string arena = std::to_string(mlp_arena()) + "-byte arena";
  for (const char* cmd : {"train", "eval"}) {
    std::string err;
    int code = run_tool({cmd, kMlp, "--max-memory", "1M", "--checkpoint", "/nonexistent"}, &err);
    INFO(cmd << ": " << err);
    CHECK(code == 2);
    CHECK(err.find("the memory plan needs a " + arena) != std::string::npos);
    CHECK(err.find("over --max-memory 1M (1048576 bytes)") != std::string::npos);
  }
}

TEST_CASE("--max-memory above the plan's arena lets the command proceed") {
  std::string err;
  int code = run_tool({"eval", kMlp, "--max-memory", "2G", "--checkpoint", "/nonexistent"}, &err);
  CHECK(code == 2);  // fails later, on the missing checkpoint
  CHECK(err.find("memory plan") == std::string::npos);
  CHECK(err.find("/nonexistent") != std::string::npos);
}

TEST_CASE("--max-memory rejects values that are not a byte count") {
  for (const char* v : {"", "0", "12X", "M", "1.5G", "-1", "64MB"}) {
    std::string err;
    int code = run_tool({"train", kMlp, "--max-memory", v}, &err);
    INFO("--max-memory '" << v << "': " << err);
    CHECK(code == 2);
    CHECK(err.find("--max-memory expects a positive byte count") != std::string::npos);
  }
}

TEST_CASE("--max-memory past 2^64 bytes is refused, not wrapped to a small limit") {
  // 17179869184G = 2^34 * 2^30 = 2^64 bytes (wraps to 0); 16E-ish values likewise.
  for (const char* v : {"17179869184G", "18014398509481984M", "999999999999999999K"}) {
    std::string err;
    int code = run_tool({"train", kMlp, "--max-memory", v}, &err);
    INFO("--max-memory " << v << ": " << err);
    CHECK(code == 2);
    CHECK(err.find("is more than 2^64 bytes") != std::string::npos);
  }
  std::string err;  // the largest value that fits is a limit like any other
  int code = run_tool({"eval", kMlp, "--max-memory", "17179869183G", "--checkpoint", "/nonexistent"}, &err);
  CHECK(code == 2);
  CHECK(err.find("/nonexistent") != std::string::npos);
}
