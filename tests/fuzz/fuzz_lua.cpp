// Fuzzes the Lua front end: dsl::load_script on the fuzzed text, then every
// compiler pass; a graph that compiles must serialize into a file the runtime
// loads (the compiler and the loader must agree on what is valid).
//
// Model scripts are trusted code, so the script runs behind a one-line prelude
// that only keeps the fuzzer's process safe and finite: no os/io/debug/load,
// no file-system modules, no pattern matching or string.rep (C-side work the
// instruction budget cannot see), and an instruction budget that, once spent,
// fails every later instruction (pcall cannot swallow it).
#include "fuzz_util.h"

using namespace sgrt;

namespace {

const char kPrelude[] =
    "do local sethook, err = debug.sethook, error; "
    "sethook(function() sethook(function() err('fuzz: budget') end, '', 1); err('fuzz: budget') end, '', 200000) end; "
    "debug, os, io, load, loadfile, dofile, collectgarbage, coroutine = nil; "
    "string.rep, string.find, string.match, string.gmatch, string.gsub = nil; "
    "package.path, package.cpath, package.loadlib = '', '', nil; ";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = fuzz::scratch_dir() + "/model.lua";
  std::vector<uint8_t> text(kPrelude, kPrelude + sizeof kPrelude - 1);
  text.insert(text.end(), data, data + size);
  fuzz::write_or_die(path, text);
  compiler::Graph g;
  Status st = dsl::load_script(path, {}, &g);
  if (st.ok()) st = compiler::compile(g);
  if (!st.ok()) {
    if (st.message().empty()) fuzz::fail("a rejection without a message");
    return 0;
  }
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(g), "fuzz.sg", &m);
  if (!st.ok()) fuzz::fail("the compiler emitted a model the runtime rejects: " + st.message());
  return 0;
}
