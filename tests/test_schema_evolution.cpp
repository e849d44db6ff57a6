// The IR's evolution rule (docs/ir.md) and its typed scale spec: files of
// schema version 1, written by the previous release (tests/data/mlp_*.sg),
// load and train exactly like the same model compiled now; a newer file is
// refused; the scale codec refuses specs that do not hold together; an input's
// declared range is the planner's bound.
#include <cmath>
#include <cstring>
#include <random>

#include "harness.h"
#include "sgrt/export.h"
#include "sgrt/model_file.h"
#include "sgrt/scale_codec.h"

using namespace sgrt;

namespace {

// tests/data/mlp_R.sg: `sgrt compile models/fashion_mlp.lua --set batch=4
// --set hidden=16 --recipe R` by the release that wrote schema version 1.
const char* const kV1Recipes[] = {"fp8", "mxfp8", "nvfp4", "fp4"};

std::shared_ptr<const Model> load_v1(const std::string& recipe) {
  std::unique_ptr<Model> m;
  Status st = Model::load_file(std::string(SGRT_SOURCE_DIR) + "/tests/data/mlp_" + recipe + ".sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

std::vector<uint8_t> compile_mlp(const std::string& recipe) {
  dsl::ScriptOptions opts;
  opts.set = {{"batch", "4"}, {"hidden", "16"}};
  compiler::Graph g;
  Status st = dsl::load_script(std::string(SGRT_SOURCE_DIR) + "/models/fashion_mlp.lua", opts, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  g.recipe = recipe;
  st = compiler::compile(g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return compiler::serialize(g);
}

std::shared_ptr<const Model> load_bytes(std::vector<uint8_t> bytes) {
  std::unique_ptr<Model> m;
  Status st = Model::load_bytes(std::move(bytes), "test.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

// Losses of `steps` train steps on fixed pseudo-random images in [0, 1] and labels.
std::vector<float> train_losses(std::shared_ptr<const Model> m, int steps) {
  auto s = test::open_session(std::move(m));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    std::vector<float> image(4 * 784);
    for (float& v : image) v = pixel(rng);
    std::vector<int32_t> label(4);
    for (int32_t& l : label) l = static_cast<int32_t>(rng() % 10);
    test::write_vec(*s, "image", image);
    test::write_vec(*s, "label", label);
    losses.push_back(test::loss_of(*s, "train_step"));
  }
  return losses;
}

std::vector<uint8_t> with_version(std::vector<uint8_t> bytes, uint32_t v) {
  bytes.resize(bytes.size() - kFooterBytes);
  // sg::Model privately inherits flatbuffers::Table at the same address.
  auto* table = reinterpret_cast<const flatbuffers::Table*>(sg::GetModel(bytes.data()));
  auto* field = const_cast<uint8_t*>(table->GetAddressOf(sg::Model::VT_SCHEMA_VERSION));
  REQUIRE(field != nullptr);
  std::memcpy(field, &v, sizeof v);
  append_footer(&bytes);
  return bytes;
}

// Rewrites the model through the object API; `edit` changes it.
template <class F>
std::vector<uint8_t> edited(const std::vector<uint8_t>& bytes, F edit) {
  std::unique_ptr<sg::ModelT> m(sg::GetModel(bytes.data())->UnPack());
  edit(*m);
  flatbuffers::FlatBufferBuilder b;
  sg::FinishModelBuffer(b, sg::Model::Pack(b, m.get()));
  std::vector<uint8_t> out(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  append_footer(&out);
  return out;
}

sg::TensorT& tensor_named(sg::ModelT& m, const std::string& name) {
  for (auto& t : m.tensors)
    if (t->name == name) return *t;
  FAIL("no tensor " << name);
  return *m.tensors[0];
}

Status try_load(std::vector<uint8_t> bytes) {
  std::unique_ptr<Model> m;
  return Model::load_bytes(std::move(bytes), "test.sg", &m);
}

}  // namespace

TEST_CASE("version-1 files load with their scale plan and train like the same model compiled now") {
  for (std::string r : kV1Recipes) {
    CAPTURE(r);
    std::shared_ptr<const Model> old = load_v1(r);
    REQUIRE(old->root().schema_version() == 1u);
    // The legacy scale attributes are gone; the spec carries the plan.
    for (const ProgramInfo& p : old->programs())
      for (const OpInfoLoaded& op : p.ops)
        for (const Attr& a : op.attrs.all()) CHECK_MESSAGE(!is_v1_scale_attr(op.code, a.name), a.name);
    std::shared_ptr<const Model> now = load_bytes(compile_mlp(r));
    REQUIRE(now->root().schema_version() == kSchemaVersion);
    std::vector<float> a = train_losses(old, 4), b = train_losses(now, 4);
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isfinite(a[i]));
      CHECK(a[i] == b[i]);
    }
    CHECK(a.front() != a.back());  // it trained
  }
}

TEST_CASE("an exported version-1 file is written in the current version and trains the same") {
  for (std::string r : {"fp8", "nvfp4"}) {
    CAPTURE(r);
    std::shared_ptr<const Model> old = load_v1(r);
    std::vector<uint8_t> bytes;
    {
      auto s = test::open_session(old);
      Status st = export_model(*s, {}, &bytes);
      REQUIRE_MESSAGE(st.ok(), st.message());
    }
    std::shared_ptr<const Model> now = load_bytes(bytes);
    CHECK(now->root().schema_version() == kSchemaVersion);
    for (const sg::Program* p : *now->root().programs())
      for (const sg::Op* op : *p->ops()) {
        OpCode code = static_cast<OpCode>(op->code());
        CHECK(op->version() == op_info(code).version);
        if (op->attrs())
          for (const sg::Attr* a : *op->attrs()) CHECK_MESSAGE(!is_v1_scale_attr(code, a->name()->str()), a->name()->str());
      }
    // The export stores the parameters open_session initialized: the same start.
    CHECK(train_losses(old, 3) == train_losses(now, 3));
  }
}

TEST_CASE("an op of a newer version than the reader knows is refused") {
  std::vector<uint8_t> bytes = edited(compile_mlp("fp8"), [](sg::ModelT& m) {
    for (auto& op : m.programs[0]->ops)
      if (static_cast<OpCode>(op->code) == OpCode::Quantize) op->version = 3;
  });
  Status st = try_load(bytes);
  REQUIRE(!st.ok());
  CHECK(st.message().find("quantize version 3, this reader takes 1 to 2") != std::string::npos);
}

TEST_CASE("a version-1 nvfp4 file decodes its blocks by size: 16 is nvfp4 with e4m3 block scales") {
  std::shared_ptr<const Model> m = load_v1("nvfp4");
  int blocks = 0;
  for (const ProgramInfo& p : m->programs())
    for (const OpInfoLoaded& op : p.ops)
      if (op.code == OpCode::Quantize && op.quant[0].granularity == QuantGranularity::nvfp4) {
        ++blocks;
        CHECK(op.quant[0].dtype == DType::e2m1);
        CHECK(op.quant[0].mode == ScaleMode::block);
        CHECK(m->tensors()[op.out[1]].type.dtype == DType::e4m3);
      }
  CHECK(blocks > 0);
}

TEST_CASE("a file of a newer schema version is refused naming both versions") {
  std::vector<uint8_t> bytes = with_version(compile_mlp("fp8"), kSchemaVersion + 1);
  Status st = try_load(bytes);
  REQUIRE(!st.ok());
  CHECK(st.message() == "test.sg: written by schema version " + std::to_string(kSchemaVersion + 1) +
                            ", this reader takes ≤ " + std::to_string(kSchemaVersion));
  CHECK(try_load(with_version(compile_mlp("fp8"), kSchemaVersion)).ok());
}

TEST_CASE("the scale codec refuses specs that do not hold together, naming the tensor") {
  std::vector<uint8_t> bytes = compile_mlp("mxfp8");
  REQUIRE(try_load(bytes).ok());
  SUBCASE("block granularity with a block size that is neither mx nor nvfp4") {
    Status st = try_load(edited(bytes, [](sg::ModelT& m) { tensor_named(m, "image.e4m3").scale->block_size = 24; }));
    REQUIRE(!st.ok());
    CHECK(st.message().find("tensor image.e4m3") != std::string::npos);
    CHECK(st.message().find("block size 24") != std::string::npos);
  }
  SUBCASE("nvfp4 blocks on an e4m3 tensor") {
    Status st = try_load(edited(bytes, [](sg::ModelT& m) {
      sg::ScaleSpecT& s = *tensor_named(m, "image.e4m3").scale;
      s.block_size = 16;
      s.block_scale_dtype = sg::DType::e4m3;
    }));
    REQUIRE(!st.ok());
    CHECK(st.message().find("tensor image.e4m3") != std::string::npos);
    CHECK(st.message().find("nvfp4 granularity needs e2m1") != std::string::npos);
  }
  SUBCASE("mx blocks with e4m3 block scales") {
    Status st = try_load(edited(bytes, [](sg::ModelT& m) {
      tensor_named(m, "image.e4m3").scale->block_scale_dtype = sg::DType::e4m3;
    }));
    REQUIRE(!st.ok());
    CHECK(st.message().find("mx blocks need e8m0 block scales") != std::string::npos);
  }
  SUBCASE("a quantize whose spec's granularity disagrees with its scale tensor") {
    Status st = try_load(edited(bytes, [](sg::ModelT& m) {
      sg::ScaleSpecT& s = *tensor_named(m, "image.e4m3").scale;
      s.mode = sg::ScaleMode::current_amax;
      s.granularity = sg::Granularity::row;
      s.block_size = 0;
    }));
    REQUIRE(!st.ok());
    CHECK(st.message().find("quantize") != std::string::npos);
  }
}

TEST_CASE("the codec's encoding decodes to the same spec for every granularity") {
  for (auto [g, d, mode] : {std::tuple{QuantGranularity::tensor, DType::e4m3, ScaleMode::delayed_amax},
                            std::tuple{QuantGranularity::row, DType::e2m1, ScaleMode::current_amax},
                            std::tuple{QuantGranularity::column, DType::e5m2, ScaleMode::current_amax},
                            std::tuple{QuantGranularity::mx, DType::e5m2, ScaleMode::block},
                            std::tuple{QuantGranularity::nvfp4, DType::e2m1, ScaleMode::block}}) {
    CAPTURE(granularity_name(g));
    ScaleSpec s;
    s.mode = mode;
    s.granularity = g;
    s.dtype = d;
    s.static_log2 = -3;
    s.history = 16;
    s.margin = 1;
    s.state_tensor = 7;
    s.rule = "r";
    sg::ScaleSpecT t = encode_scale_spec(s);
    CHECK(t.block_size == (g == QuantGranularity::mx ? 32 : g == QuantGranularity::nvfp4 ? 16 : 0));
    flatbuffers::FlatBufferBuilder b;
    b.Finish(sg::ScaleSpec::Pack(b, &t));
    ScaleSpec back;
    Status st = decode_scale_spec(flatbuffers::GetRoot<sg::ScaleSpec>(b.GetBufferPointer()), d, "x", kSchemaVersion, &back);
    REQUIRE_MESSAGE(st.ok(), st.message());
    CHECK(back.mode == s.mode);
    CHECK(back.granularity == s.granularity);
    CHECK(back.dtype == s.dtype);
    CHECK(back.static_log2 == s.static_log2);
    CHECK(back.history == s.history);
    CHECK(back.margin == s.margin);
    CHECK(back.state_tensor == s.state_tensor);
    CHECK(back.rule == s.rule);
  }
}

namespace {

std::string ranged_mlp(const std::string& input_opts) {
  return R"(
    local sg = require "sg"
    local x = sg.input("x", {4, 32}, "f32"  )" + input_opts + R"()
    local y = sg.input("label", {4}, "i32")
    sg.loss(sg.softmax_cross_entropy(sg.nn.linear(x, 10, { name = "fc1" }), y))
    sg.optimizer.sgd{ lr = 0.1 }
    sg.recipe("fp8")
  )";
}

const compiler::Tensor& named(const compiler::Graph& g, const std::string& name) {
  int id = g.find_tensor(name);
  REQUIRE_MESSAGE(id >= 0, name);
  return g.t(id);
}

}  // namespace

TEST_CASE("an input's declared range gives it the static scale the range implies") {
  compiler::Graph g;
  Status st = test::compile_graph(ranged_mlp(R"(, { range = { -3, 0.5 } })"), &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  // |x| <= 3: E4M3's max 448 / 3 = 149.3, so 2^7.
  const ScaleSpec& s = named(g, "x.e4m3").scale;
  CHECK(s.mode == ScaleMode::static_pow2);
  CHECK(s.static_log2 == 7);
  std::shared_ptr<const Model> m = load_bytes(compiler::serialize(g));
  const sg::Tensor* x = m->root().tensors()->Get(m->find_tensor("x"));
  CHECK(x->has_range());
  CHECK(x->range_lo() == -3.f);
  CHECK(x->range_hi() == 0.5f);

  compiler::Graph none;
  st = test::compile_graph(ranged_mlp(""), &none);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(named(none, "x.e4m3").scale.mode == ScaleMode::current_amax);
}

TEST_CASE("a bad range is a DSL error at its line") {
  for (const char* bad : {"{ range = { 1, 0 } }", "{ range = { 0, 0/0 } }", "{ range = { -math.huge, 1 } }",
                          "{ range = { 0 } }", "{ range = 'wide' }"}) {
    CAPTURE(bad);
    compiler::Graph g;
    Status st = test::compile_graph(ranged_mlp(std::string(", ") + bad), &g);
    REQUIRE(!st.ok());
    CHECK(st.message().find(".lua:3: input 'x': range") != std::string::npos);
  }
}
