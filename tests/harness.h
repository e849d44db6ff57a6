// Shared test helpers: compile a Lua model given as a string, open a session
// on a backend, move float tensors in and out by name.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include "compile.h"
#include "dsl.h"
#include "serialize.h"
#include "sgrt/params.h"
#include "sgrt/session.h"

namespace sgrt::test {

// A file under the system temp dir, removed when this goes out of scope.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& suffix, const std::string& content = "") {
    char tmpl[] = "/tmp/sgrt_test_XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    close(fd);
    std::remove(tmpl);
    path = std::string(tmpl) + suffix;
    if (!content.empty()) std::ofstream(path) << content;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

// Runs the DSL and the compiler on `lua`; errors come back as a Status.
// plan = false: the scale planner off, as --no-plan (true leaves the script's choice).
// infer_only: frozen weights, no gradient or optimizer state in the arena.
inline Status compile_graph(const std::string& lua, compiler::Graph* g, const std::map<std::string, std::string>& set = {},
                            bool plan = true, bool infer_only = false) {
  TempFile f(".lua", lua);
  dsl::ScriptOptions opts;
  opts.set = set;
  SG_TRY(dsl::load_script(f.path, opts, g));
  if (!plan) g->plan_scales = false;
  g->infer_only = infer_only;
  return compiler::compile(*g);
}

inline Status compile_lua(const std::string& lua, std::shared_ptr<const Model>* out,
                          const std::map<std::string, std::string>& set = {}, bool infer_only = false) {
  compiler::Graph g;
  SG_TRY(compile_graph(lua, &g, set, true, infer_only));
  std::unique_ptr<Model> m;
  SG_TRY(Model::load_bytes(compiler::serialize(g), "test.sg", &m));
  *out = std::move(m);
  return Status::Ok();
}

// A model file of the repository (e.g. "models/llama.lua") compiled with `set`;
// infer_only: frozen weights, no gradient or optimizer state in the arena;
// recipe: in place of the script's (as --recipe).
inline std::shared_ptr<const Model> compile_model_file(const std::string& path,
                                                       const std::map<std::string, std::string>& set,
                                                       bool infer_only = false, const std::string& recipe = "",
                                                       const std::string& opt_level = "") {
  dsl::ScriptOptions opts;
  opts.set = set;
  compiler::Graph g;
  Status st = dsl::load_script(SGRT_SOURCE_DIR "/" + path, opts, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  g.infer_only = infer_only;
  if (!recipe.empty()) g.recipe = recipe;
  if (!opt_level.empty()) g.optimizer.state = opt_level;
  st = compiler::compile(g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(g), path, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return std::shared_ptr<const Model>(std::move(m));
}

// `supplied`: Session::init's, the tensors the caller writes next.
inline std::unique_ptr<Session> open_session(std::shared_ptr<const Model> m, const std::string& backend = "cpu",
                                             uint64_t seed = 1, const std::vector<bool>& supplied = {}) {
  std::unique_ptr<Backend> be;
  Status st = make_backend(backend, &be);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Session> s;
  st = Session::create(std::move(m), std::move(be), &s);
  REQUIRE_MESSAGE(st.ok(), st.message());
  st = s->init(seed, 100, supplied);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return s;
}

// Every persistent tensor's bytes, by name.
inline std::map<std::string, std::vector<uint8_t>> persistent_state(const Session& s) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (size_t id = 0; id < s.model().tensors().size(); ++id) {
    const TensorInfo& t = s.model().tensors()[id];
    if (!t.persistent || t.bytes == 0) continue;
    std::vector<uint8_t>& b = out[t.name];
    b.resize(t.bytes);
    Status st = s.read(static_cast<int>(id), b.data(), b.size());
    REQUIRE_MESSAGE(st.ok(), st.message());
  }
  return out;
}

inline int tensor_id(const Session& s, const std::string& name) {
  int id = s.model().find_tensor(name);
  REQUIRE_MESSAGE(id >= 0, "no tensor " << name);
  return id;
}

inline std::vector<float> read_f32(const Session& s, const std::string& name) {
  int id = tensor_id(s, name);
  std::vector<float> v(numel(s.model().tensors()[id].type.shape));
  Status st = s.read(id, v.data(), v.size() * sizeof(float));
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

// A parameter's f32 values wherever the optimizer keeps them (sgrt/params.h),
// decoded when stored as blocks.
inline std::vector<float> param_f32(const Session& s, const std::string& name) {
  std::vector<float> v;
  Status st = read_param(s, tensor_id(s, name), &v);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

// The f32 values of the output `name` (sg.output, or sg.program's "program.key").
inline std::vector<float> read_output(const Session& s, const std::string& name) {
  for (auto& [n, id] : s.model().outputs())
    if (n == name) {
      std::vector<float> v(numel(s.model().tensors()[id].type.shape));
      Status st = s.read(id, v.data(), v.size() * sizeof(float));
      REQUIRE_MESSAGE(st.ok(), st.message());
      return v;
    }
  FAIL("no output " << name);
  return {};
}

template <class T>
inline void write_vec(Session& s, const std::string& name, const std::vector<T>& v) {
  Status st = s.write(tensor_id(s, name), v.data(), v.size() * sizeof(T));
  REQUIRE_MESSAGE(st.ok(), st.message());
}

// Writes 16 random token ids below 40 into "tokens" and "targets" (seeds 1, 2):
// the tiny llama models of test_lora.cpp and test_qlora.cpp (vocab >= 40, batch 2, block 8).
inline void feed_tiny_llama(Session& s) {
  for (auto [name, seed] : {std::pair<const char*, uint32_t>{"tokens", 1}, {"targets", 2}}) {
    std::mt19937 rng(seed);
    std::vector<int32_t> v(16);
    for (int32_t& x : v) x = static_cast<int32_t>(rng() % 40);
    write_vec(s, name, v);
  }
}

// A "Key:  N kB" line of /proc/self/status, in KiB.
inline int64_t proc_status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  FAIL("no " << key << " in /proc/self/status");
  return 0;
}

// This process's resident set (VmRSS) and its peak (VmHWM), in KiB; the peak's
// reset to the current one (false where /proc/self/clear_refs cannot be written).
inline int64_t rss_kib() { return proc_status_kib("VmRSS"); }
inline int64_t peak_rss_kib() { return proc_status_kib("VmHWM"); }
inline bool reset_peak_rss() { return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5" << std::flush); }

inline void run(Session& s, const std::string& program) {
  int p = -1;
  Status st = s.find_program(program, &p);
  REQUIRE_MESSAGE(st.ok(), st.message());
  st = s.run(p);
  REQUIRE_MESSAGE(st.ok(), st.message());
}

inline float loss_of(Session& s, const std::string& program = "eval") {
  run(s, program);
  float v = 0;
  Status st = s.read_scalar(s.model().loss(), &v);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

}  // namespace sgrt::test
