// Fuzzes the Lua front end: dsl::load_script on the fuzzed text, then every
// compiler pass; a graph that compiles must serialize into a file the runtime
// loads (the compiler and the loader must agree on what is valid).
//
// The script runs in the model sandbox (dsl/sandbox.h), with budgets small
// enough to keep the fuzzer fast; a one-line prelude also removes pattern
// matching, C-side work the instruction budget cannot see.
#include "fuzz_util.h"

using namespace sgrt;

namespace {

const char kPrelude[] = "string.find, string.match, string.gmatch, string.gsub = nil; ";

dsl::ScriptOptions fuzz_options() {
  dsl::ScriptOptions o;
  o.limits.instructions = 2'000'000;
  o.limits.memory_bytes = 64 << 20;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = fuzz::scratch_dir() + "/model.lua";
  std::vector<uint8_t> text(kPrelude, kPrelude + sizeof kPrelude - 1);
  text.insert(text.end(), data, data + size);
  fuzz::write_or_die(path, text);
  compiler::Graph g;
  Status st = dsl::load_script(path, fuzz_options(), &g);
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
