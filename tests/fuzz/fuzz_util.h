// Shared by the fuzz targets: a private scratch folder, seeds written on
// request, and the small models the targets load into.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compile.h"
#include "dsl.h"
#include "serialize.h"
#include "sgrt/file_io.h"
#include "sgrt/model.h"
#include "sgrt/session.h"

namespace sgrt::fuzz {

// Stops the run: libFuzzer reports the input that got here.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

// One folder per process under /dev/shm (tmpfs) or /tmp, reused by every
// input and removed at exit (libFuzzer exits normally at -max_total_time).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/sgrt_fuzz_XXXXXX";
    if (!mkdtemp(tmpl.data())) fail("cannot create a scratch folder under " + base);
    return tmpl;
  }();
  static const bool cleanup = std::atexit([] { std::filesystem::remove_all(scratch_dir()); }) == 0;
  (void)cleanup;
  return dir;
}

inline void write_or_die(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) fail("cannot write " + path);
}

// scripts/fuzz.sh sets SGRT_FUZZ_SEED_DIR to the target's working corpus:
// seeds that depend on the current file formats are generated there at start
// (libFuzzer reads the corpus after LLVMFuzzerInitialize), not committed.
inline void write_seed(const std::string& name, const std::vector<uint8_t>& bytes) {
  if (const char* dir = std::getenv("SGRT_FUZZ_SEED_DIR")) write_or_die(std::string(dir) + "/" + name, bytes);
}

// Compiles Lua source to a .sg file image (payload + footer).
inline std::vector<uint8_t> compile_lua(const std::string& lua, const std::map<std::string, std::string>& set = {}) {
  std::string path = scratch_dir() + "/seed_model.lua";
  write_or_die(path, std::vector<uint8_t>(lua.begin(), lua.end()));
  dsl::ScriptOptions opts;
  opts.set = set;
  compiler::Graph g;
  Status st = dsl::load_script(path, opts, &g);
  if (st.ok()) st = compiler::compile(g);
  if (!st.ok()) fail("seed model does not compile: " + st.message());
  return compiler::serialize(g);
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The README's MLP, shrunk: the IR has the full model's structure.
inline std::vector<uint8_t> small_mlp() {
  return compile_lua(read_text(SGRT_SOURCE_DIR "/models/fashion_mlp.lua"), {{"batch", "4"}, {"hidden", "8"}});
}

// An initialized CPU session of a 4 -> 3 linear classifier trained by
// `optimizer` ("sgd" or "adamw"), for the readers that fill a session.
inline std::unique_ptr<Session> tiny_session(const std::string& optimizer) {
  std::string lua = "local sg = require \"sg\"\n"
                    "local x = sg.input(\"image\", {2, 4})\n"
                    "local y = sg.input(\"label\", {2}, \"i32\")\n"
                    "local logits = sg.nn.linear(x, 3, { name = \"fc\" })\n"
                    "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
                    "sg.optimizer." + optimizer + "{ lr = 1e-2 }\n";
  std::unique_ptr<Model> m;
  Status st = Model::load_bytes(compile_lua(lua), "tiny.sg", &m);
  std::unique_ptr<Backend> be;
  std::unique_ptr<Session> s;
  if (st.ok()) st = make_backend("cpu", &be);
  if (st.ok()) st = Session::create(std::move(m), std::move(be), &s);
  if (st.ok()) st = s->init(1, 10);
  if (!st.ok()) fail("tiny session: " + st.message());
  return s;
}

}  // namespace sgrt::fuzz
