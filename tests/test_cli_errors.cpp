// The sgrt tool against bad input, through its real command line: each case
// must exit with status 2 (not a signal), print exactly one line on stderr that
// names the file and where (Lua line, flag, tensor or op), and leave no output
// file behind (neither -o X nor X.tmp.*, nor a log or checkpoint).
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "harness.h"
#include "sgrt/dataset.h"
#include "sgrt/file_io.h"
#include "sgrt/model_file.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

using test::slurp;
using test::TempDir;
using Result = test::ToolResult;
using test::run_tool;

const std::string kMlp = SGRT_SOURCE_DIR "/models/fashion_mlp.lua";

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string joined(const std::vector<std::string>& args) {
  std::string s = "sgrt";
  for (const std::string& a : args) s += " " + a;
  return s;
}

// The contract for bad input: exit 2, no signal, one line on stderr holding
// every string in `must`.
void expect_bad_input(const std::vector<std::string>& args, const std::vector<std::string>& must) {
  Result r = run_tool(args);
  INFO("command: " << joined(args));
  INFO("stderr: " << r.err);
  CHECK_MESSAGE(r.signal == 0, "killed by signal " << r.signal);
  CHECK(r.exited);
  CHECK(r.code == 2);
  CHECK(!r.err.empty());
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK((!r.err.empty() && r.err.back() == '\n'));
  for (const std::string& m : must) CHECK_MESSAGE(r.err.find(m) != std::string::npos, "stderr lacks '" << m << "'");
}

// `sgrt compile SCRIPT -o DIR/out.sg` fails, and DIR holds exactly what it held before.
void expect_compile_fails(const TempDir& dir, const std::string& script, const std::vector<std::string>& must,
                          std::vector<std::string> extra = {}) {
  std::set<std::string> before = dir.list();
  std::string out = dir.path + "/out.sg";
  std::vector<std::string> args{"compile", script, "-o", out};
  args.insert(args.end(), extra.begin(), extra.end());
  expect_bad_input(args, must);
  CHECK_MESSAGE(!exists(out), out << " was left behind");
  CHECK(dir.list() == before);  // no out.sg.tmp.* either
}

const char* kHead = "local sg = require \"sg\"\n";

// A small valid model to corrupt: compiled by the real tool into dir/model.sg.
std::string compiled_model(const TempDir& dir) {
  std::string sg = dir.path + "/model.sg";
  Result r = run_tool({"compile", kMlp, "-o", sg, "--set", "hidden=16"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  REQUIRE(exists(sg));
  return sg;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

TEST_CASE("Lua syntax error: file and line") {
  TempDir d;
  std::string s = d.file("syntax.lua", std::string(kHead) + "local x = sg.param(\"x\", {2, 3})\nlocal y = = x\n");
  expect_compile_fails(d, s, {s + ":3:"});
}

TEST_CASE("Lua runtime error (calling nil): file and line") {
  TempDir d;
  std::string s = d.file("runtime.lua", std::string(kHead) + "local f = nil\n\nf(1)\n");
  expect_compile_fails(d, s, {s + ":4:", "nil"});
}

TEST_CASE("unknown op: file, line and the op's name") {
  TempDir d;
  std::string s = d.file("unknown_op.lua", std::string(kHead) + "local x = sg.param(\"x\", {2, 3})\n"
                                                                 "local y = sg.op(\"nonexistent\", {x})\n");
  expect_compile_fails(d, s, {s + ":3:", "nonexistent"});
}

TEST_CASE("matmul shape mismatch names both shapes and the line") {
  TempDir d;
  std::string s = d.file("matmul.lua", std::string(kHead) + "local a = sg.param(\"a\", {2, 3})\n"
                                                             "local b = sg.param(\"b\", {4, 5})\n"
                                                             "local c = sg.matmul(a, b)\n");
  expect_compile_fails(d, s, {s + ":4:", "matmul", "[2, 3]", "[4, 5]"});
}

TEST_CASE("add shape mismatch names both shapes and the line") {
  TempDir d;
  // Through the operator (the DSL's broadcast check) ...
  std::string s = d.file("add_op.lua", std::string(kHead) + "local a = sg.param(\"a\", {2, 3})\n"
                                                            "local b = sg.param(\"b\", {4, 5})\n"
                                                            "local c = a + b\n");
  expect_compile_fails(d, s, {s + ":4:", "[2, 3]", "[4, 5]"});
  // ... and through sg.op, straight to the compiler's shape inference.
  std::string s2 = d.file("add_raw.lua", std::string(kHead) + "local a = sg.param(\"a\", {2, 3})\n"
                                                              "local b = sg.param(\"b\", {3, 2})\n\n"
                                                              "local c = sg.op(\"add\", {a, b})\n");
  expect_compile_fails(d, s2, {s2 + ":5:", "add", "[2, 3]", "[3, 2]"});
}

TEST_CASE("unknown flag, unknown --set key, unknown recipe, unknown command") {
  TempDir d;
  expect_compile_fails(d, kMlp, {"--bogus"}, {"--bogus"});
  expect_compile_fails(d, kMlp, {"--set nokey", "fashion_mlp.lua"}, {"--set", "nokey=3"});
  expect_compile_fails(d, kMlp, {"fp99", "fashion_mlp.lua"}, {"--recipe", "fp99"});
  expect_bad_input({"train", kMlp, "--steps", "1", "--bogus"}, {"--bogus"});
  expect_bad_input({"train", kMlp, "--steps", "1", "--set", "nokey=3"}, {"nokey"});
  expect_bad_input({"train", kMlp, "--steps", "1", "--recipe", "fp99"}, {"fp99"});
  expect_bad_input({"train", kMlp, "--steps", "notanumber"}, {"--steps", "notanumber"});
  expect_bad_input({"frobnicate", kMlp}, {"frobnicate"});
  expect_bad_input({"compile", "/nonexistent/model.lua"}, {"/nonexistent/model.lua"});
}

TEST_CASE("missing data directory: named, and no log or checkpoint left") {
  TempDir d;
  std::string log = d.path + "/log.jsonl", ck = d.path + "/ck";
  expect_bad_input({"train", kMlp, "--steps", "1", "--data", "/nonexistent", "--log", log, "--checkpoint", ck},
                   {"/nonexistent"});
  CHECK(d.list().empty());
}

TEST_CASE("malformed data files: the file is named, and no log or checkpoint left") {
  TempDir d;
  std::string data = d.path + "/data";
  REQUIRE(mkdir(data.c_str(), 0755) == 0);
  const std::string src = kFashionMnistDir;
  for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
    std::vector<uint8_t> b;
    REQUIRE(read_file(src + "/" + f, &b).ok());
    write_bytes(data + "/" + f, b);
  }
  std::string log = d.path + "/log.jsonl", ck = d.path + "/ck";
  std::vector<std::string> args{"train", kMlp, "--steps", "1", "--data", data, "--log", log, "--checkpoint", ck};

  SUBCASE("a truncated gzip stream") {
    std::vector<uint8_t> b;
    REQUIRE(read_file(src + "/train-images-idx3-ubyte.gz", &b).ok());
    b.resize(4096);
    write_bytes(data + "/train-images-idx3-ubyte.gz", b);
    expect_bad_input(args, {data + "/train-images-idx3-ubyte"});
  }
  SUBCASE("not gzip at all: a short IDX header under the .gz name") {
    write_bytes(data + "/train-images-idx3-ubyte.gz", {0x00, 0x00, 0x08, 0x01, 0, 0, 0, 5, 1, 2, 3});
    expect_bad_input(args, {data + "/train-images-idx3-ubyte"});
  }
  SUBCASE("an empty file") {
    write_bytes(data + "/train-images-idx3-ubyte.gz", {});
    expect_bad_input(args, {data + "/train-images-idx3-ubyte"});
  }
  CHECK(!exists(log));
  CHECK(!exists(ck));
  // Leave the data dir empty so TempDir can remove it.
  DIR* dd = opendir(data.c_str());
  REQUIRE(dd);
  while (dirent* e = readdir(dd))
    if (e->d_name[0] != '.') std::remove((data + "/" + e->d_name).c_str());
  closedir(dd);
  rmdir(data.c_str());
}

TEST_CASE("truncated, bit-flipped and wrong-version .sg files") {
  TempDir d;
  std::string good = compiled_model(d);
  std::vector<uint8_t> bytes;
  REQUIRE(read_file(good, &bytes).ok());
  REQUIRE(bytes.size() > 100);
  {
    Result r = run_tool({"info", good});
    CHECK(r.code == 0);
  }
  std::string bad = d.path + "/bad.sg";
  std::string log = d.path + "/log.jsonl";
  std::vector<std::string> expect;

  SUBCASE("truncated") {
    write_bytes(bad, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
    expect = {bad, "truncated"};
  }
  SUBCASE("bit-flipped") {
    std::vector<uint8_t> b = bytes;
    b[b.size() / 3] ^= 0x10;
    write_bytes(bad, b);
    expect = {bad, "checksum"};
  }
  SUBCASE("wrong schema version, with a valid checksum") {
    std::vector<uint8_t> payload(bytes.begin(), bytes.end() - kFooterBytes);
    auto* table = reinterpret_cast<const flatbuffers::Table*>(sg::GetModel(payload.data()));
    auto* field = const_cast<uint8_t*>(table->GetAddressOf(sg::Model::VT_SCHEMA_VERSION));
    REQUIRE(field != nullptr);
    uint32_t v = 999;
    std::memcpy(field, &v, 4);
    REQUIRE(sg::GetModel(payload.data())->schema_version() == 999u);
    append_footer(&payload);
    write_bytes(bad, payload);
    expect = {bad, "schema version 999"};
  }
  expect_bad_input({"info", bad}, expect);
  expect_bad_input({"info", bad, "--json"}, expect);
  expect_bad_input({"train", bad, "--steps", "1", "--log", log}, expect);
  CHECK(!exists(log));
  std::remove(bad.c_str());
}

TEST_CASE("a .sg file with --set or --recipe is refused") {
  TempDir d;
  std::string good = compiled_model(d);
  expect_bad_input({"train", good, "--steps", "1", "--set", "hidden=3"}, {good});
}

TEST_CASE("--final-recipe misused: named, and no log or checkpoint left") {
  TempDir d;
  std::string good = compiled_model(d), log = d.path + "/log.jsonl", ck = d.path + "/ck";
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"train", kMlp, "--set", "hidden=16", "--steps", "20", "--quiet", "--log", log};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_bad_input(train({"--final-recipe", "fp32"}), {"--final-recipe", "--final-steps"});
  expect_bad_input(train({"--final-recipe", "fp32", "--final-steps", "0"}), {"--final-steps", "0"});
  expect_bad_input(train({"--final-recipe", "fp99", "--final-steps", "5"}), {"fp99", "fashion_mlp.lua"});
  expect_bad_input(train({"--final-recipe", "fp32", "--final-steps", "20"}), {"20 steps", "--final-steps"});
  expect_bad_input(train({"--final-recipe", "fp32", "--final-steps", "5", "--checkpoint", ck}), {"--checkpoint"});
  expect_bad_input({"train", good, "--steps", "20", "--final-recipe", "fp32", "--final-steps", "5"}, {good, "MODEL.lua"});
  CHECK(!exists(log));
  CHECK(!exists(ck));
}

TEST_CASE("sgrt train models/fashion_mlp.lua --steps 5 --quiet succeeds") {
  TempDir d;
  std::string log = d.path + "/log.jsonl";
  Result r = run_tool({"train", "models/fashion_mlp.lua", "--steps", "5", "--quiet", "--log", log});
  INFO("stderr: " << r.err);
  CHECK(r.signal == 0);
  CHECK(r.code == 0);
  CHECK(r.err.empty());  // --quiet
  CHECK(r.out.find("test loss") != std::string::npos);
  std::string l = slurp(log);
  CHECK(l.find("{\"step\":5,") != std::string::npos);  // the last step is always logged
  CHECK(l.find("\"event\":\"done\"") != std::string::npos);
}
