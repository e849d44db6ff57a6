// A fine-tuned llama written back as GGUF (sgrt/gguf_export.h, `sgrt
// export-weights -o FILE.gguf --gguf-base BASE.gguf`). Its encoders against
// gguf-py's (tests/data/gguf/encode.bin); then, on models/llama.lua
// shaped small by --set with random nonzero adapters, against a base GGUF
// assembled field by field here (gguf_builder.h). The output is read back by
// GgufFile (test_gguf.cpp checks it against gguf-py):
//  * every metadata entry of the base in its order with its bytes, but
//    general.file_type (the type most matrix elements have); the base's
//    tensors in its order and ggml shapes; each value the session's, not the
//    base's; each merged weight W + (alpha / rank) B A computed here in double;
//  * a model without LoRA that imports the file gives the unmerged model's
//    logits within 1e-5 (f32), 1e-2 (f16, bf16, q8_0);
//  * F16 / BF16 / Q8_0 matrices within their rounding of the merged values,
//    vectors F32; a q4_1 / q8_0 base keeps its unadapted blocks byte for byte;
//  * refused, the output left as it was: adapters without --merge, another
//    architecture, a tensor missing, extra or misshapen, a value the type cannot
//    hold, the base itself as the output; on the command line, exit 2 with one
//    line: -o FILE.gguf without --gguf-base, GGUF options for safetensors.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "formats/gguf_blocks.h"
#include "gguf_builder.h"
#include "harness.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf.h"
#include "sgrt/gguf_export.h"
#include "sgrt/gguf_weights.h"
#include "tiny_lora_llama.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

using test::infer_logits;
using test::rel_err;
constexpr int kRank = test::kLoraRank;
constexpr double kScale = test::kLoraScale;

std::shared_ptr<const Model> llama(int rank, const std::map<std::string, std::string>& extra = {}) {
  return test::tiny_lora_llama(rank, extra);
}

// The tiny llama with LoRA, every adapter random (B too) and the fed tokens.
std::unique_ptr<Session> adapted(const std::map<std::string, std::string>& extra = {}) {
  auto s = test::open_session(llama(kRank, extra));
  test::randomize_adapters(*s);
  test::feed_tiny_llama(*s);
  return s;
}

// What the base file may differ in, for the refusals.
struct BaseShape {
  std::string arch = "llama";
  std::string drop = {}, extra = {}, misshape = {};  // a tensor left out, one added, one with a wrong ne
  bool file_type = true;              // a general.file_type entry (Q4_1's 3)
};

// A GGUF for the tiny llama without LoRA: metadata of several value types,
// every parameter as an F32 tensor of 7s (ne = the shape reversed).
std::string base_gguf(const test::TempDir& dir, const BaseShape& b = {}) {
  test::GgufBuilder g;
  g.str("general.architecture", b.arch).str("general.name", "tiny").u32("llama.block_count", 2);
  if (b.file_type) g.u32("general.file_type", 3);
  g.strings("tokenizer.ggml.tokens", {"<s>", "a", "\xc4\xa0the"}).i32s("tokenizer.ggml.token_type", {3, 1, 1});
  g.boolean("tokenizer.ggml.add_bos_token", false);
  uint64_t offset = 0;
  auto add = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    g.tensor(name, ne, static_cast<uint32_t>(GgufType::F32), offset);
    for (uint64_t i = 0; i < n; ++i) g.data += test::le(7.0f);
    offset += 4 * n;  // every size here is a multiple of 32 floats: aligned
  };
  auto m = llama(0);
  for (const TensorInfo& t : m->tensors()) {
    if (t.role != Role::param || t.name == b.drop) continue;
    std::vector<uint64_t> ne(t.type.shape.rbegin(), t.type.shape.rend());
    if (t.name == b.misshape) ne[0] *= 2;
    add(t.name, ne);
  }
  if (!b.extra.empty()) add(b.extra, {32});
  return dir.file("base.gguf", g.bytes());
}

std::unique_ptr<GgufFile> open_gguf(const std::string& path) {
  std::unique_ptr<GgufFile> f;
  Status st = GgufFile::open(path, &f);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return f;
}

std::vector<float> values(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.find_tensor(name);
  REQUIRE_MESSAGE(t, "no tensor " << name);
  std::vector<float> v(static_cast<size_t>(t->numel()));
  Status st = f.dequantize(*t, v);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

// W + (alpha / rank) B A of the adapted weight `w` ("blk.0.attn_q"), in double.
std::vector<double> merged_here(const Session& s, const std::string& w) {
  const std::vector<float> w0 = test::param_f32(s, w + ".weight"), a = test::param_f32(s, w + ".lora_A"),
                           b = test::param_f32(s, w + ".lora_B");
  const size_t cols = a.size() / kRank, rows = b.size() / kRank;
  REQUIRE(rows * cols == w0.size());
  std::vector<double> out(w0.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      double ba = 0;
      for (int k = 0; k < kRank; ++k) ba += static_cast<double>(b[r * kRank + k]) * a[k * cols + c];
      out[r * cols + c] = w0[r * cols + c] + kScale * ba;
    }
  return out;
}

// The model without LoRA, its weights from `path`.
std::vector<float> logits_of_file(const std::string& path) {
  auto s = test::open_session(llama(0), "cpu", 77);
  Status st = import_gguf(*s, path);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::feed_tiny_llama(*s);
  return infer_logits(*s);
}

Status write(const Session& s, const std::string& base, const std::string& out, DType dt = DType::f32, bool merge = true,
             GgufExportSummary* sum = nullptr) {
  return export_gguf(s, base, {dt, merge}, out, sum);
}

const char* const kAdapted[] = {"blk.0.attn_q", "blk.0.attn_k", "blk.1.attn_output", "blk.1.ffn_gate", "blk.1.ffn_down"};

}  // namespace

TEST_CASE("the Q8_0, F16 and BF16 encodings equal gguf-py's, byte for byte") {
  // scripts/make_gguf_encode_reference.py: values and gguf.quants.quantize of them.
  const std::string bytes = test::slurp(SGRT_SOURCE_DIR "/tests/data/gguf/encode.bin");
  REQUIRE(bytes.size() > 8);
  uint32_t rows, cols;
  std::memcpy(&rows, bytes.data(), 4);
  std::memcpy(&cols, bytes.data() + 4, 4);
  const size_t n = size_t(rows) * cols, q8 = n / 32 * 34;
  REQUIRE(bytes.size() == 8 + 4 * n + q8 + 2 * n + 2 * n);
  std::vector<float> x(n);
  std::memcpy(x.data(), bytes.data() + 8, 4 * n);
  const uint8_t* ref = reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + 4 * n;
  std::vector<uint8_t> got(q8);
  fmt::gguf_encode_blocks(true, x.data(), static_cast<int64_t>(n), got.data());
  CHECK(std::vector<uint8_t>(ref, ref + q8) == got);
  for (int bf = 0; bf < 2; ++bf) {
    const uint8_t* halves = ref + q8 + bf * 2 * n;
    int64_t differ = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = bf ? fmt::bf16_encode(x[i]) : fmt::f16_encode(x[i]);
      differ += std::memcmp(&h, halves + 2 * i, 2) != 0;
    }
    CAPTURE(bf);
    CHECK(differ == 0);
  }
}

TEST_CASE("merged GGUF: the base's metadata and tensor list, the merged values, the unmerged logits within 1e-5") {
  test::TempDir dir;
  const std::string base = base_gguf(dir), out = dir.path + "/merged.gguf";
  auto s = adapted();
  const std::vector<float> want = infer_logits(*s);
  REQUIRE(rel_err(want, infer_logits(*test::open_session(llama(0)))) > 0.01);  // the adapters count
  GgufExportSummary sum;
  Status st = write(*s, base, out, DType::f32, true, &sum);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto b = open_gguf(base), f = open_gguf(out);
  CHECK(sum.tensors == 20);
  CHECK(sum.merged == 14);
  CHECK(sum.kept_blocks == 0);
  CHECK(sum.bytes == f->file_size());
  REQUIRE(f->metadata().size() == b->metadata().size());
  for (size_t i = 0; i < b->metadata().size(); ++i) {
    const GgufKv &x = b->metadata()[i], &y = f->metadata()[i];
    CAPTURE(x.key);
    CHECK(y.key == x.key);
    if (x.key == "general.file_type") continue;
    CHECK(y.type == x.type);
    const auto rx = b->raw_value(x), ry = f->raw_value(y);
    CHECK(std::vector<uint8_t>(rx.begin(), rx.end()) == std::vector<uint8_t>(ry.begin(), ry.end()));
  }
  uint32_t ft = 99;
  REQUIRE(f->get_u32("general.file_type", &ft).ok());
  CHECK(ft == 0);  // all F32
  REQUIRE(f->tensors().size() == b->tensors().size());
  for (size_t i = 0; i < b->tensors().size(); ++i) {
    CAPTURE(b->tensors()[i].name);
    CHECK(f->tensors()[i].name == b->tensors()[i].name);
    CHECK(f->tensors()[i].shape == b->tensors()[i].shape);
    CHECK(f->tensors()[i].type == GgufType::F32);
  }
  for (const char* w : kAdapted) {
    CAPTURE(w);
    const std::vector<double> merged = merged_here(*s, w);
    const std::vector<float> got = values(*f, std::string(w) + ".weight");
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - merged[i]) / std::max(1e-3, std::fabs(merged[i])));
    CHECK(worst < 1e-6);
  }
  for (const char* n : {"token_embd.weight", "blk.1.ffn_norm.weight", "output_norm.weight"}) {
    CAPTURE(n);
    CHECK(values(*f, n) == test::param_f32(*s, n));  // the session's, not the base's 7s
  }
  CHECK(rel_err(logits_of_file(out), want) <= 1e-5);
}

TEST_CASE("merged GGUF as F16, BF16 or Q8_0: matrices within their rounding, vectors F32, general.file_type") {
  test::TempDir dir;
  const std::string base = base_gguf(dir, {.file_type = false}), out = dir.path + "/m.gguf";
  auto s = adapted();
  const std::vector<float> want = infer_logits(*s);
  struct Case {
    DType dt;
    GgufType type;
    uint32_t file_type;
  };
  for (const Case c : {Case{DType::f16, GgufType::F16, 1}, Case{DType::bf16, GgufType::BF16, 32}, Case{DType::q8_0, GgufType::Q8_0, 7}}) {
    CAPTURE(std::string(dtype_name(c.dt)));
    Status st = write(*s, base, out, c.dt);
    REQUIRE_MESSAGE(st.ok(), st.message());
    auto f = open_gguf(out);
    uint32_t ft = 99;
    REQUIRE(f->get_u32("general.file_type", &ft).ok());  // added: the base had none
    CHECK(ft == c.file_type);
    for (const GgufTensor& t : f->tensors()) CHECK(t.type == (t.shape.size() == 1 ? GgufType::F32 : c.type));
    for (const char* w : kAdapted) {
      CAPTURE(w);
      const std::vector<double> merged = merged_here(*s, w);
      const std::vector<float> got = values(*f, std::string(w) + ".weight");
      int64_t off = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        double bound = 0;
        if (c.dt == DType::q8_0) {  // half a step of the block's scale amax / 127, which is itself f16-rounded
          double amax = 0;
          for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(merged[j]));
          bound = 0.6 * amax / 127;
        } else {  // half an ulp: 11 and 8 significant bits
          bound = std::fabs(merged[i]) * std::ldexp(1.0, c.dt == DType::f16 ? -11 : -8) + 1e-7;
        }
        off += !(std::fabs(got[i] - merged[i]) <= bound);
      }
      CHECK(off == 0);
    }
    const double err = rel_err(logits_of_file(out), want);
    MESSAGE(std::string(dtype_name(c.dt)) << ": logits within " << err << " of the unmerged model's");
    CHECK(err > 0);
    CHECK(err < 1e-2);
  }
}

TEST_CASE("a q4_1 base with a q8_0 embedding: the adapted matrices merged, the embedding's blocks kept byte for byte") {
  test::TempDir dir;
  const std::string base = base_gguf(dir), out = dir.path + "/m.gguf";
  auto s = adapted({{"lora_base", "q4_1"}, {"lora_base_embd", "q8_0"}});
  const std::vector<float> want = infer_logits(*s);
  GgufExportSummary sum;
  Status st = write(*s, base, out, DType::f32, true, &sum);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(sum.merged == 14);
  CHECK(sum.kept_blocks == 1);
  auto f = open_gguf(out);
  const GgufTensor* e = f->find_tensor("token_embd.weight");
  REQUIRE(e);
  CHECK(e->type == GgufType::Q8_0);
  const int id = test::tensor_id(*s, "token_embd.weight");
  std::vector<uint8_t> raw(s->model().tensors()[id].bytes);
  REQUIRE(s->read(id, raw.data(), raw.size()).ok());
  const auto data = f->data(*e);
  CHECK(std::vector<uint8_t>(data.begin(), data.end()) == raw);
  CHECK(f->find_tensor("blk.0.attn_q.weight")->type == GgufType::F32);
  uint32_t ft = 99;
  REQUIRE(f->get_u32("general.file_type", &ft).ok());
  CHECK(ft == 0);  // the 14 F32 matrices outnumber the embedding's elements
  // The model that reads it back keeps the embedding as q8_0 blocks.
  auto plain = test::open_session(llama(0, {{"lora_base_embd", "q8_0"}}), "cpu", 77);
  st = import_gguf(*plain, out);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::feed_tiny_llama(*plain);
  CHECK(rel_err(infer_logits(*plain), want) <= 1e-5);
}

TEST_CASE("refusals name what is wrong and leave the output as it was") {
  test::TempDir dir;
  const std::string out = dir.file("out.gguf", "old contents");
  auto s = adapted();
  auto refused = [&](const std::string& base, const std::string& what, DType dt = DType::f32, bool merge = true) {
    Status st = write(*s, base, out, dt, merge);
    CAPTURE(st.message());
    CHECK_FALSE(st.ok());
    CHECK(st.message().find(what) != std::string::npos);
    CHECK(test::slurp(out) == "old contents");
    CHECK(dir.list() == std::set<std::string>{"base.gguf", "out.gguf"});  // no temporary file left
  };
  refused(base_gguf(dir), "has LoRA adapters (blk.0.attn_q.lora_A, ...); a GGUF holds the model's own weights: merge them in (--merge)",
          DType::f32, false);
  refused(base_gguf(dir, {.arch = "gpt2"}), "architecture 'gpt2' is not supported");
  refused(base_gguf(dir, {.drop = "blk.1.ffn_up.weight"}), "base.gguf: has no tensor 'blk.1.ffn_up.weight'");
  refused(base_gguf(dir, {.extra = "rope_freqs.weight"}), "base.gguf: tensor 'rope_freqs.weight' is not a parameter");
  refused(base_gguf(dir, {.misshape = "blk.0.attn_k.weight"}), "tensor 'blk.0.attn_k.weight' is [16, 64] (ggml ne reversed)");
  refused(base_gguf(dir), "GGUF export writes matrices as f32, f16, bf16 or q8_0, not e4m3", DType::e4m3);
  std::vector<float> emb = test::param_f32(*s, "token_embd.weight");
  emb[5] = 1e5f;
  test::write_vec(*s, "token_embd.weight", emb);
  refused(base_gguf(dir), "token_embd.weight: element 5 is 100000.000000, which F16 cannot hold; choose --dtype f32 or bf16", DType::f16);
  emb[5] = std::nanf("");
  test::write_vec(*s, "token_embd.weight", emb);
  refused(base_gguf(dir), "token_embd.weight: element 5 is nan, which F32 cannot hold");
  const std::string base = base_gguf(dir);
  Status st = write(*s, base, base);
  CHECK(st.message().find("is the base GGUF the export reads") != std::string::npos);
}

TEST_CASE("command line: a GGUF from a script's initialized weights; its options' refusals") {
  test::TempDir dir;
  const std::string base = base_gguf(dir), out = dir.path + "/out.gguf";
  std::vector<std::string> args = {"export-weights", "models/llama.lua", "--gguf-base", base, "--dtype", "f16", "-o", out};
  for (auto& [k, v] : test::kTinyLora) args.insert(args.end(), {"--set", k + "=" + v});
  test::ToolResult r = test::run_tool(args);
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("to " + out + ": 20 tensors, 0 with their LoRA adapters merged, 0 kept as the base's blocks, matrices as f16") !=
        std::string::npos);
  CHECK(open_gguf(out)->find_tensor("blk.1.ffn_down.weight")->type == GgufType::F16);
  auto refused = [&](std::vector<std::string> extra, const std::string& what) {
    std::vector<std::string> a = {"export-weights", "models/llama.lua"};
    a.insert(a.end(), extra.begin(), extra.end());
    test::ToolResult t = test::run_tool(a);
    CAPTURE(t.err);
    CHECK(t.code == 2);
    CHECK(t.err.find(what) != std::string::npos);
    CHECK(std::count(t.err.begin(), t.err.end(), '\n') == 1);
  };
  refused({"-o", dir.path + "/x.gguf"}, "-o FILE.gguf needs --gguf-base BASE.gguf");
  refused({"-o", dir.path + "/x.gguf", "--gguf-base", base, "--trained"}, "leave out --peft and --trained");
  refused({"-o", dir.path + "/x.safetensors", "--merge"}, "--merge writes a GGUF: give -o FILE.gguf");
  refused({"-o", dir.path + "/x.safetensors", "--dtype", "q8_0"}, "--dtype q8_0 is for a GGUF's matrices");
  refused({"-o", dir.path + "/x.gguf", "--gguf-base", base, "--dtype", "q4_1"}, "--dtype takes f32, f16, bf16 or");
  CHECK(dir.list() == std::set<std::string>{"base.gguf", "out.gguf"});
}

TEST_CASE("command line: --gguf-base defaults to the GGUF the checkpoint's run started from, while its header is unchanged") {
  test::TempDir dir;
  const std::string base = base_gguf(dir), ck = dir.path + "/ck", out = dir.path + "/out.gguf", ref = dir.path + "/ref.gguf";
  auto s = adapted();
  CheckpointMeta meta;  // as sgrt train --init-weights base.gguf records it
  meta.step = 2;
  meta.init_file = base;
  REQUIRE(weights_file_identity(base, &meta.init_identity).ok());
  Status st = save_checkpoint(*s, ck, meta);
  REQUIRE_MESSAGE(st.ok(), st.message());
  {
    std::ofstream flags(ck + "/model.flags");
    for (auto& [k, v] : test::kTinyLora) flags << "--set " << k << "=" << v << "\n";
    flags << "--set lora_rank=" << kRank << "\n";
  }
  REQUIRE(write(*s, base, ref).ok());
  const std::vector<std::string> args = {"export-weights", "models/llama.lua", "--checkpoint", ck, "--merge", "-o", out};
  // Its tensor data may change (the checkpoint holds the weights): the header is what identifies it.
  std::string bytes = test::slurp(base), data_changed = bytes;
  data_changed.back() ^= 1;
  { std::ofstream(base, std::ios::binary) << data_changed; }
  test::ToolResult r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test::slurp(out) == test::slurp(ref));
  // Another header (a metadata value changed), or no file: refused, naming it; nothing written.
  std::filesystem::remove(out);
  std::string renamed = bytes;
  const size_t at = renamed.find("tiny");
  REQUIRE(at != std::string::npos);
  renamed[at] = 'T';
  { std::ofstream(base, std::ios::binary) << renamed; }
  r = test::run_tool(args);
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find(ck + ": its run started from " + base + ", which has changed since") != std::string::npos, r.err);
  std::filesystem::remove(base);
  r = test::run_tool(args);
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find("which is gone (No such file or directory); give --gguf-base FILE.gguf") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(out));
  // A checkpoint that records no GGUF still needs --gguf-base.
  meta.init_file.clear();
  REQUIRE(save_checkpoint(*s, ck, meta).ok());
  r = test::run_tool(args);
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find("needs --gguf-base BASE.gguf (the GGUF the model came from); " + ck + "'s run did not start from one") !=
                    std::string::npos, r.err);
}
