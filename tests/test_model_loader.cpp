// Model::load_bytes against damaged files: every truncation and every byte
// flip of a real compiled model must come back as a Status (never a crash, a
// hang or an exception), and the undamaged file must load.
//
// Two layers are exercised separately:
//  * the CRC-32 footer (model_file.h): damage with the original footer must be
//    rejected, always (CRC-32 detects every burst of up to 32 bits);
//  * the FlatBuffer Verifier and Model::decode: the same damage with the footer
//    recomputed, so the checksum no longer hides the structural checks. Those
//    mutants may legitimately load (a flipped float in an initializer is still
//    a valid model); the ones that do load must also be safe to run.
#include <cstring>
#include <stdexcept>

#include "cpu/parallel.h"
#include "harness.h"
#include "sgrt/file_io.h"
#include "sgrt/model_file.h"

using namespace sgrt;

namespace {

// The README's model, shrunk so that running a mutant costs microseconds; the
// IR (names, ops, programs) has the same structure as the full-size model.
std::vector<uint8_t> mlp_bytes() {
  std::ifstream f(SGRT_SOURCE_DIR "/models/fashion_mlp.lua");
  REQUIRE(f.good());
  std::string lua((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  compiler::Graph g;
  Status st = test::compile_graph(lua, &g, {{"batch", "4"}, {"hidden", "8"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  return compiler::serialize(g);
}

// The payload with a freshly computed footer.
std::vector<uint8_t> refooter(std::vector<uint8_t> payload) {
  append_footer(&payload);
  return payload;
}

std::vector<uint8_t> payload_of(const std::vector<uint8_t>& file) {
  REQUIRE(file.size() > kFooterBytes);
  return std::vector<uint8_t>(file.begin(), file.end() - kFooterBytes);
}

// load_bytes must return, not throw; a failure must say something and name the file.
Status load(const std::vector<uint8_t>& bytes, std::unique_ptr<Model>* m) {
  try {
    Status st = Model::load_bytes(bytes, "damaged.sg", m);
    if (!st.ok()) {
      CHECK(st.code() == StatusCode::invalid_input);
      CHECK(st.message().find("damaged.sg") != std::string::npos);
      CHECK(!*m);
    }
    return st;
  } catch (const std::exception& e) {
    FAIL("load_bytes threw: " << e.what());
  } catch (...) {
    FAIL("load_bytes threw a non-std exception");
  }
  return Status::Runtime("unreachable");
}

// A model that loaded must be usable: a session opens (or fails with a Status)
// and its programs run (or fail with a Status). The backend refuses arenas far
// larger than the original's: the loader allows them (the tensors still lie
// inside) and allocating and clearing them is a resource question, not a
// safety one.
void exercise(std::unique_ptr<Model> m, uint64_t max_arena) {
  std::shared_ptr<const Model> sm(std::move(m));
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend("cpu", &be).ok());
  be->limit_arena(max_arena);
  std::unique_ptr<Session> s;
  if (!Session::create(sm, std::move(be), &s).ok()) return;
  if (!s->init(7, 10).ok()) return;
  for (const char* p : {"eval", "train_step", "infer"}) {
    int id = -1;
    if (!s->find_program(p, &id).ok()) continue;
    (void)s->run(id);
  }
}

}  // namespace

TEST_CASE("the undamaged model loads, from bytes and from a file") {
  std::vector<uint8_t> bytes = mlp_bytes();
  MESSAGE("model file: " << bytes.size() << " bytes");
  std::unique_ptr<Model> m;
  Status st = Model::load_bytes(bytes, "mlp.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(m->find_program("train_step") >= 0);
  CHECK(m->find_program("eval") >= 0);
  CHECK(m->find_tensor("fc1.w") >= 0);
  CHECK(m->loss() >= 0);

  test::TempFile f(".sg");
  REQUIRE(write_file_atomic(f.path, bytes.data(), bytes.size()).ok());
  std::unique_ptr<Model> m2;
  st = Model::load_file(f.path, &m2);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(m2->tensors().size() == m->tensors().size());

  std::unique_ptr<Model> none;
  st = Model::load_file("/nonexistent/dir/x.sg", &none);
  CHECK(!st.ok());
  CHECK(st.message().find("/nonexistent/dir/x.sg") != std::string::npos);
}

TEST_CASE("a model truncated at every length is rejected") {
  const std::vector<uint8_t> bytes = mlp_bytes();
  int rejected = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::unique_ptr<Model> m;
    Status st = load(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n), &m);
    if (st.ok()) FAIL_CHECK("a file truncated to " << n << " of " << bytes.size() << " bytes loaded");
    else ++rejected;
  }
  CHECK(rejected == static_cast<int>(bytes.size()));
}

TEST_CASE("a payload truncated at every length, with a valid footer, is rejected by the verifier") {
  // The checksum is recomputed, so only the FlatBuffer verifier and the
  // decoder stand between the truncated buffer and the runtime.
  const std::vector<uint8_t> payload = payload_of(mlp_bytes());
  for (size_t n = 0; n < payload.size(); ++n) {
    std::unique_ptr<Model> m;
    Status st = load(refooter(std::vector<uint8_t>(payload.begin(), payload.begin() + n)), &m);
    if (st.ok()) FAIL_CHECK("a payload truncated to " << n << " of " << payload.size() << " bytes loaded");
  }
}

TEST_CASE("every byte flipped is caught by the checksum") {
  const std::vector<uint8_t> bytes = mlp_bytes();
  std::vector<uint8_t> b = bytes;
  int loaded = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xFF)}) {
      b[i] ^= mask;
      std::unique_ptr<Model> m;
      if (load(b, &m).ok()) {
        ++loaded;
        FAIL_CHECK("byte " << i << " ^ " << int(mask) << " loaded despite the checksum");
      }
      b[i] ^= mask;
    }
  }
  CHECK(loaded == 0);
  CHECK(b == bytes);
}

TEST_CASE("every byte flipped behind a recomputed checksum: a Status, never a crash; loaded mutants run") {
  const std::vector<uint8_t> payload = payload_of(mlp_bytes());
  std::unique_ptr<Model> orig;
  REQUIRE(Model::load_bytes(refooter(payload), "orig.sg", &orig).ok());
  const uint64_t max_arena = 4 * orig->arena_bytes();
  // Thousands of tiny programs: waking the pool for each op costs more than the op.
  const int saved_threads = cpu::num_threads();
  cpu::set_num_threads(1);
  int loaded = 0, rejected = 0;
  std::vector<uint8_t> p = payload;
  for (size_t i = 0; i < p.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xFF)}) {
      p[i] ^= mask;
      std::unique_ptr<Model> m;
      if (load(refooter(p), &m).ok()) {
        ++loaded;
        exercise(std::move(m), max_arena);
      } else {
        ++rejected;
      }
      p[i] ^= mask;
    }
  }
  cpu::set_num_threads(saved_threads);
  MESSAGE("structural fuzz: " << loaded << " mutants loaded, " << rejected << " rejected");
  // The flips that hit the identifier, the root offset or a vtable must be
  // caught structurally; if nothing is rejected, the verifier is not running.
  CHECK(rejected > 0);
  // The 4-byte file identifier "SGIR" sits at bytes 4..7: every flip there is fatal.
  for (size_t i = 4; i < 8; ++i) {
    p[i] ^= 0x01;
    std::unique_ptr<Model> m;
    Status st = load(refooter(p), &m);
    CHECK(!st.ok());
    CHECK(st.message().find("SGIR") != std::string::npos);
    p[i] ^= 0x01;
  }
}

TEST_CASE("a model with a wrong schema version is rejected by the version check") {
  std::vector<uint8_t> payload = payload_of(mlp_bytes());
  const sg::Model* root = sg::GetModel(payload.data());
  REQUIRE(root->schema_version() == kSchemaVersion);
  // sg::Model privately inherits flatbuffers::Table at the same address.
  auto* table = reinterpret_cast<const flatbuffers::Table*>(root);
  auto* field = const_cast<uint8_t*>(table->GetAddressOf(sg::Model::VT_SCHEMA_VERSION));
  REQUIRE(field != nullptr);
  for (uint32_t v : {uint32_t(0), kSchemaVersion + 1, uint32_t(999)}) {
    std::memcpy(field, &v, sizeof v);
    REQUIRE(sg::GetModel(payload.data())->schema_version() == v);
    std::unique_ptr<Model> m;
    Status st = load(refooter(payload), &m);
    REQUIRE(!st.ok());
    CHECK(st.message().find("schema version " + std::to_string(v)) != std::string::npos);
  }
}
