// safetensors reader and writer against bytes written out by hand from the
// format's definition (huggingface/safetensors: u64 LE header length, JSON
// header, raw little-endian data), and parameter round trips through sessions
// at the fp32 and O2 state levels.
#include <cstring>

#include "harness.h"
#include "sgrt/safetensors.h"

using namespace sgrt;

namespace {

std::string u64le(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

template <class T>
std::string raw(std::initializer_list<T> v) {
  std::string s;
  for (T x : v) s.append(reinterpret_cast<const char*>(&x), sizeof x);
  return s;
}

const char* kModel = R"(
local sg = require "sg"
local x = sg.input("x", {2, 3})
local h = sg.nn.linear(x, 4, {name = "l1"})
sg.loss(sg.mean(sg.mean(h * h)))
sg.optimizer.adamw{ lr = 1e-3, state = STATE }
)";

std::shared_ptr<const Model> model(const std::string& level) {
  std::string lua = kModel;
  lua.replace(lua.find("STATE"), 5, "\"" + level + "\"");
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

}  // namespace

TEST_CASE("reads F32, F16 and BF16 tensors from a hand-written file") {
  // Offsets: a F32[2] 0..8, b F16[3] 8..14, c BF16[2] 14..18; metadata ignored;
  // the header padded with spaces, as writers do for alignment.
  std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F16","shape":[1,3],"data_offsets":[8,14]},)"
                       R"( "c" : { "shape" : [2], "dtype" : "BF16", "data_offsets" : [14, 18] } }   )";
  std::string data = raw<float>({1.5f, -2.0f}) + raw<uint16_t>({0x3C00, 0xC000, 0x3555}) + raw<uint16_t>({0x3F80, 0x4049});
  test::TempFile f(".safetensors");
  { std::ofstream(f.path, std::ios::binary) << u64le(header.size()) << header << data; }
  std::vector<SafeTensor> t;
  Status st = read_safetensors(f.path, &t);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(t.size() == 3);
  CHECK(t[0].name == "a");
  CHECK(t[0].values == std::vector<float>{1.5f, -2.0f});
  CHECK(t[1].shape == Shape{1, 3});
  CHECK(t[1].dtype == DType::f16);
  CHECK(t[1].values == std::vector<float>{1.0f, -2.0f, 0.333251953125f});  // 0x3555 = 1365/4096
  CHECK(t[2].dtype == DType::bf16);
  CHECK(t[2].values == std::vector<float>{1.0f, 3.140625f});
}

TEST_CASE("writes the format byte for byte") {
  std::vector<SafeTensor> t(2);
  t[0] = {"w", DType::f16, {2}, {1.0f, -2.0f}};
  t[1] = {"b", DType::bf16, {1}, {3.140625f}};
  test::TempFile f(".safetensors");
  REQUIRE(write_safetensors(f.path, t).ok());
  std::string header = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})";
  header.append((8 - header.size() % 8) % 8, ' ');  // data 8-byte aligned
  std::string want = u64le(header.size()) + header + raw<uint16_t>({0x3C00, 0xC000, 0x4049});
  std::ifstream in(f.path, std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(got == want);
}

TEST_CASE("parameters round-trip through a file into another session, at fp32 and O2") {
  for (const char* level : {"fp32", "O2"}) {
    std::string name = level;
    CAPTURE(name);
    auto m = model(level);
    auto a = test::open_session(m, "cpu", 1), b = test::open_session(m, "cpu", 2);
    REQUIRE(test::param_f32(*a, "l1.w") != test::param_f32(*b, "l1.w"));
    test::TempFile f(".safetensors");
    REQUIRE(export_safetensors(*a, f.path, DType::f32).ok());
    Status st = import_safetensors(*b, f.path);
    REQUIRE_MESSAGE(st.ok(), st.message());
    CHECK(test::param_f32(*b, "l1.w") == test::param_f32(*a, "l1.w"));
    CHECK(test::param_f32(*b, "l1.b") == test::param_f32(*a, "l1.b"));
    // The working copy the graph reads is remade from the imported master.
    std::vector<float> x{0.5f, -1, 2, 1, 0, -0.25f};
    test::write_vec(*a, "x", x);
    test::write_vec(*b, "x", x);
    CHECK(test::loss_of(*a) == test::loss_of(*b));
  }
}

TEST_CASE("a value the FP16 master cannot hold is refused before anything is written") {
  auto m = model("O2");
  auto s = test::open_session(m);
  std::vector<float> before = test::param_f32(*s, "l1.w");
  std::vector<SafeTensor> t{{"l1.w", DType::f32, {4, 3}, std::vector<float>(12, 0.5f)}, {"l1.b", DType::f32, {4}, {0, 0, 1e6f, 0}}};
  test::TempFile f(".safetensors");
  REQUIRE(write_safetensors(f.path, t).ok());
  Status st = import_safetensors(*s, f.path);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("l1.b") != std::string::npos);
  CHECK(test::param_f32(*s, "l1.w") == before);  // l1.w came first in the file and still was not written
}
