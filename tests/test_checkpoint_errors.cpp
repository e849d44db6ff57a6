// Bad checkpoints and bad safetensors files through the real command line:
// each is one clear error (exit 2, a single stderr line naming the file) and
// the checkpoint already in the folder is left byte for byte as it was.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include <sys/stat.h>

#include "harness.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf_weights.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::string kMlp = SGRT_SOURCE_DIR "/models/fashion_mlp.lua";

std::vector<std::string> model_args(int hidden) {
  return {kMlp, "--set", "hidden=" + std::to_string(hidden), "--set", "batch=6000"};
}

std::vector<std::string> cmd(const std::string& verb, int hidden, const std::vector<std::string>& extra) {
  std::vector<std::string> a{verb};
  for (const std::string& s : model_args(hidden)) a.push_back(s);
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A finished 3-step run of the MLP with `hidden` units: its checkpoint folder.
struct Trained {
  test::TempDir dir;
  std::string ck;
  explicit Trained(int hidden) : ck(dir.path + "/ck") {
    test::ToolResult r = test::run_tool(cmd("train", hidden, {"--steps", "3", "--quiet", "--checkpoint", ck}));
    REQUIRE_MESSAGE(r.code == 0, r.err);
  }
  std::string file() const { return ck + "/checkpoint.sgck"; }
};

void expect_bad_input(const std::vector<std::string>& args, const std::vector<std::string>& must) {
  test::ToolResult r = test::run_tool(args);
  INFO("stderr: " << r.err);
  CHECK(r.signal == 0);
  CHECK(r.code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const std::string& m : must) CHECK_MESSAGE(r.err.find(m) != std::string::npos, "stderr lacks '" << m << "'");
}

// `sgrt train --resume` (or `args`) on the folder holding `bytes` as its
// checkpoint fails and leaves those bytes unchanged.
void expect_resume_fails(const std::string& bytes, const std::vector<std::string>& must, int hidden = 16) {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  REQUIRE(mkdir(ck.c_str(), 0755) == 0);
  std::string path = ck + "/checkpoint.sgck";
  { std::ofstream(path, std::ios::binary) << bytes; }
  std::vector<std::string> m = must;
  m.push_back(path);
  expect_bad_input(cmd("train", hidden, {"--steps", "3", "--quiet", "--checkpoint", ck, "--resume"}), m);
  CHECK(test::slurp(path) == bytes);
}

// A safetensors file written by hand: (name, dtype, shape, payload bytes).
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  size_t bytes;
};
std::string safetensors(const std::vector<Entry>& entries) {
  std::string header = "{", data;
  for (const Entry& e : entries) {
    std::string shape;
    for (int64_t d : e.shape) {
      if (!shape.empty()) shape += ",";
      shape += std::to_string(d);
    }
    if (header.size() > 1) header += ",";
    header += "\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[";
    header += std::to_string(data.size()) + "," + std::to_string(data.size() + e.bytes) + "]}";
    data.append(e.bytes, '\0');
  }
  header += "}";
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

// The MLP's parameters at hidden = 16, all F32.
std::vector<Entry> mlp_entries() {
  return {{"fc1.w", "F32", {16, 784}, 16 * 784 * 4}, {"fc1.b", "F32", {16}, 64},
          {"fc2.w", "F32", {10, 16}, 640}, {"fc2.b", "F32", {10}, 40}};
}

// `sgrt train --init-weights FILE --checkpoint DIR --overwrite` with a good checkpoint in
// DIR fails before training and leaves the checkpoint as it was.
void expect_import_fails(const Trained& t, const std::string& content, const std::vector<std::string>& must) {
  test::TempDir dir;
  std::string w = dir.file("w.safetensors", content);
  std::string before = test::slurp(t.file());
  std::vector<std::string> m = must;
  m.push_back(w);
  expect_bad_input(cmd("train", 16, {"--steps", "3", "--quiet", "--checkpoint", t.ck, "--overwrite", "--init-weights", w}), m);
  CHECK(test::slurp(t.file()) == before);
}

}  // namespace

TEST_CASE("truncated, corrupted and foreign checkpoints are refused and left unchanged") {
  Trained good(16), other(24);
  std::string bytes = test::slurp(good.file());
  REQUIRE(bytes.size() > 1000);
  for (size_t keep : {size_t(0), size_t(10), bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(keep);
    expect_resume_fails(bytes.substr(0, keep), {});
  }
  for (size_t at : {size_t(9), bytes.size() / 3, bytes.size() - 20}) {
    CAPTURE(at);
    std::string flipped = bytes;
    flipped[at] ^= 0x10;
    expect_resume_fails(flipped, {"checksum"});
  }
  expect_resume_fails(test::slurp(other.file()), {"another model"});
  expect_resume_fails(bytes, {"another model"}, 24);
  // eval and export-weights read the same way.
  test::TempDir dir;
  std::string ck = dir.path + "/ck", out = dir.path + "/w.safetensors";
  REQUIRE(mkdir(ck.c_str(), 0755) == 0);
  { std::ofstream(ck + "/checkpoint.sgck", std::ios::binary) << bytes.substr(0, bytes.size() / 2); }
  expect_bad_input(cmd("eval", 16, {"--checkpoint", ck}), {ck});
  expect_bad_input(cmd("export-weights", 16, {"--checkpoint", ck, "-o", out}), {ck});
  CHECK(test::slurp(out).empty());
}

TEST_CASE("safetensors with missing, unknown or mis-shaped tensors, or a malformed header, are refused") {
  Trained t(16);
  std::vector<Entry> e = mlp_entries();
  SUBCASE("the good file is accepted") {
    test::TempDir dir;
    std::string w = dir.file("w.safetensors", safetensors(e));
    test::ToolResult r = test::run_tool(cmd("train", 16, {"--steps", "1", "--quiet", "--init-weights", w}));
    CHECK_MESSAGE(r.code == 0, r.err);
    CHECK(r.err.find("warning") == std::string::npos);
    // Under fp8-static it is accepted with a warning naming the file: static
    // scales assume unit-scaled initial weights (docs/recipes.md).
    r = test::run_tool(cmd("train", 16, {"--steps", "1", "--quiet", "--init-weights", w, "--recipe", "fp8-static"}));
    CHECK_MESSAGE(r.code == 0, r.err);
    CHECK(r.err.find("warning: recipe fp8-static") != std::string::npos);
    CHECK(r.err.find(w) != std::string::npos);
  }
  SUBCASE("missing") {
    e.pop_back();
    expect_import_fails(t, safetensors(e), {"no tensor 'fc2.b'"});
  }
  SUBCASE("unknown") {
    e.push_back({"fc3.w", "F32", {2}, 8});
    expect_import_fails(t, safetensors(e), {"'fc3.w' is not a parameter"});
  }
  SUBCASE("mis-shaped") {
    e[0].shape = {784, 16};
    expect_import_fails(t, safetensors(e), {"'fc1.w'", "[784, 16]", "[16, 784]"});
  }
  SUBCASE("bytes that do not match the shape") {
    e[1].bytes = 60;
    expect_import_fails(t, safetensors(e), {"'fc1.b'", "data_offsets"});
  }
  SUBCASE("an unsupported dtype") {
    e[3] = {"fc2.b", "I64", {10}, 80};
    expect_import_fails(t, safetensors(e), {"I64"});
  }
  SUBCASE("header length past the end") {
    std::string f = safetensors(e);
    uint64_t n = f.size();
    std::memcpy(f.data(), &n, 8);
    expect_import_fails(t, f, {"header length"});
  }
  SUBCASE("header not JSON") {
    std::string f = safetensors(e);
    f[8 + 8] = '#';  // the first key's colon
    expect_import_fails(t, f, {"malformed header"});
  }
  SUBCASE("too short") { expect_import_fails(t, "abc", {"too short"}); }
  SUBCASE("overlapping data") {
    std::string f = safetensors({{"fc2.b", "F32", {10}, 40}, {"fc1.b", "F32", {16}, 64}});
    std::string h = "\"data_offsets\":[40,104]";
    size_t at = f.find(h);
    REQUIRE(at != std::string::npos);
    f.replace(at, h.size(), "\"data_offsets\":[20,84]");  // same length: the header size holds
    expect_import_fails(t, f, {"overlap"});
  }
}

namespace {

// The checkpoint's bytes with their CRC made valid again (zlib's crc32, the
// footer's definition: docs/optimizer.md).
std::string with_crc(std::string bytes) {
  size_t payload = bytes.size() - 8;
  uint32_t crc = static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), payload));
  std::memcpy(bytes.data() + payload, &crc, 4);
  return bytes;
}

// The checkpoint with the i64 at `offset` replaced.
std::string with_field(std::string bytes, size_t offset, int64_t v) {
  std::memcpy(bytes.data() + offset, &v, 8);
  return with_crc(std::move(bytes));
}

// Header offsets (format 5): magic, two identities, then these i64 fields;
// then the init file: u32 path length, path, u64 identity.
constexpr size_t kStepAt = 24, kTotalAt = 32, kBatchesPerEpochAt = 48, kExamplesPerStepAt = 56, kInitAt = 64;

// FNV-1a (64-bit), written out here from its definition.
uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

TEST_CASE("a checkpoint with a valid checksum but fields out of range is refused") {
  Trained t(16);  // 3 of 3 steps, 10 batches per epoch
  std::string bytes = test::slurp(t.file());
  expect_resume_fails(with_field(bytes, kStepAt, -1), {"step -1 is negative"});
  expect_resume_fails(with_field(bytes, kStepAt, 4), {"step 4 is past the planned total of 3"});
  expect_resume_fails(with_field(bytes, kTotalAt, -5), {"planned total -5 is negative"});
  expect_resume_fails(with_field(bytes, kTotalAt, 0), {"holds no run position"});
  expect_resume_fails(with_field(bytes, kBatchesPerEpochAt, -10), {"batches per epoch -10 is negative"});
  expect_resume_fails(with_field(bytes, kBatchesPerEpochAt, 0), {"holds no run position"});
  expect_resume_fails(with_field(bytes, kExamplesPerStepAt, -1), {"examples per step -1 is negative"});
  // In range, but another run's steps (more ranks, or another batch).
  expect_resume_fails(with_field(bytes, kExamplesPerStepAt, 3000),
                      {"saved by steps of 3000 examples, this run's are 1 rank x batch 6000 x accumulate 1 = 6000: give "
                       "each rank the batch that makes 3000"});
  // In range, but not where the optimizer's own step counter is.
  expect_resume_fails(with_field(bytes, kStepAt, 2), {"train state is at step 3 of 3, its header at step 2 of 3"});
  // eval reads the same header.
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  REQUIRE(mkdir(ck.c_str(), 0755) == 0);
  { std::ofstream(ck + "/checkpoint.sgck", std::ios::binary) << with_field(bytes, kStepAt, -1); }
  expect_bad_input(cmd("eval", 16, {"--checkpoint", ck}), {ck, "step -1 is negative"});
}

TEST_CASE("format 4 (no init file) and format 3 (nor examples per step) checkpoints still load") {
  Trained t(16);  // no --init-weights: an empty path
  const std::string v5 = test::slurp(t.file());
  REQUIRE(v5.compare(0, 8, "SGCKPT05") == 0);
  uint32_t path_len = 1;
  std::memcpy(&path_len, v5.data() + kInitAt, 4);
  REQUIRE(path_len == 0);
  std::string v4 = v5.substr(0, kInitAt) + v5.substr(kInitAt + 4 + 8);
  v4[7] = '4';
  std::string v3 = v4.substr(0, kExamplesPerStepAt) + v4.substr(kExamplesPerStepAt + 8);
  v3[7] = '3';
  for (const std::string& old : {v4, v3}) {
    CAPTURE(old.substr(0, 8));
    { std::ofstream(t.file(), std::ios::binary) << with_crc(old); }
    test::ToolResult r = test::run_tool(cmd("eval", 16, {"--checkpoint", t.ck}));
    CHECK_MESSAGE(r.code == 0, r.err);
    CHECK(r.out.find("step 3: test loss") != std::string::npos);
  }
  std::string v6 = v5;
  v6[7] = '6';
  expect_resume_fails(with_crc(v6), {"checkpoint format version 6, this sgrt reads versions 3 to 5"});
}

TEST_CASE("a run records the file it started from (absolute path, header identity) and keeps it when resumed") {
  Trained t(16);
  const std::string content = safetensors(mlp_entries());
  uint64_t header_len = 0;
  std::memcpy(&header_len, content.data(), 8);
  test::TempDir dir;
  // Named relative to this process's folder, which the tool inherits.
  const std::string relative = std::filesystem::relative(dir.file("w.safetensors", content)).string();
  REQUIRE(relative.rfind("..", 0) == 0);
  test::ToolResult r = test::run_tool(cmd("train", 16, {"--steps", "3", "--stop-after", "1", "--quiet", "--checkpoint", t.ck,
                                                        "--overwrite", "--init-weights", relative}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CheckpointMeta meta;
  Status st = read_checkpoint_meta(t.ck, &meta);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(meta.step == 1);
  CHECK(meta.init_file == std::filesystem::canonical(dir.path).string() + "/w.safetensors");
  CHECK(meta.init_identity == fnv1a(content.substr(0, 8 + header_len)));
  // Only the header counts: other values, the same identity; another tensor table, another one.
  uint64_t same = 0, other = 0;
  std::string values = content;
  values.back() = 1;
  REQUIRE(weights_file_identity(dir.file("values.safetensors", values), &same).ok());
  CHECK(same == meta.init_identity);
  std::vector<Entry> renamed = mlp_entries();
  renamed[3].name = "fc2.c";
  REQUIRE(weights_file_identity(dir.file("renamed.safetensors", safetensors(renamed)), &other).ok());
  CHECK(other != meta.init_identity);

  // Resumed, the weights are the checkpoint's: --init-weights is refused (the MLP
  // reads no instruct data set whose tokenizer it could name), the run untouched.
  const std::string before = test::slurp(t.file());
  expect_bad_input(cmd("train", 16, {"--steps", "3", "--quiet", "--checkpoint", t.ck, "--resume", "--init-weights", relative}),
                   {"--init-weights names the tokenizer of an instruct data set (the weights are the checkpoint's)"});
  CHECK(test::slurp(t.file()) == before);
  r = test::run_tool(cmd("train", 16, {"--steps", "3", "--quiet", "--checkpoint", t.ck, "--resume"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CheckpointMeta resumed;
  REQUIRE(read_checkpoint_meta(t.ck, &resumed).ok());
  CHECK(resumed.step == 3);
  CHECK(resumed.init_file == meta.init_file);
  CHECK(resumed.init_identity == meta.init_identity);
}

TEST_CASE("a checkpoint is refused by a model whose training step differs: activation, loss, optimizer, recipe") {
  Trained t(16);
  std::string bytes = test::slurp(t.file());
  test::TempDir dir;
  std::string ck = dir.path + "/ck", mlp = test::slurp(kMlp);
  REQUIRE(mkdir(ck.c_str(), 0755) == 0);
  { std::ofstream(ck + "/checkpoint.sgck", std::ios::binary) << bytes; }
  // The MLP with one change that leaves every saved tensor's name, dtype and shape as it was.
  const std::vector<std::pair<std::string, std::string>> changes = {
      {":relu()", ":sigmoid()"},                    // activation
      {"weight_decay = 0.0", "weight_decay = 0.5"},  // optimizer hyperparameter
      {"sg.loss(sg.softmax_cross_entropy(logits, y))", "sg.loss(sg.scale(sg.softmax_cross_entropy(logits, y), 2))"},
  };
  for (auto& [from, to] : changes) {
    CAPTURE(to);
    std::string s = mlp;
    size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    std::string variant = dir.file("variant.lua", s.replace(at, from.size(), to));
    expect_bad_input({"train", variant, "--set", "hidden=16", "--set", "batch=6000", "--steps", "3", "--quiet",
                      "--checkpoint", ck, "--resume"},
                     {"trained by another training step"});
  }
  // The recipe too: the same script under bf16.
  expect_bad_input(cmd("train", 16, {"--steps", "3", "--quiet", "--checkpoint", ck, "--resume", "--recipe", "bf16"}), {});
  CHECK(test::slurp(ck + "/checkpoint.sgck") == bytes);
}

TEST_CASE("--init-weights refuses +inf and -inf in f32 weights, as it refuses NaN") {
  Trained t(16);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    std::string f = safetensors(mlp_entries());
    uint64_t header = 0;
    std::memcpy(&header, f.data(), 8);
    std::memcpy(f.data() + 8 + header + 4 * 5, &bad, 4);  // fc1.w[5]: fc1.w's data comes first
    expect_import_fails(t, f, {"fc1.w: value", "at index 5"});
  }
}
