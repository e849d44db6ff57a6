// Model scripts are code people download, so they run sandboxed
// (dsl/sandbox.h): every escape below fails with an error naming the script
// and leaves no trace, budgets stop endless loops and memory bombs (pcall and
// coroutines cannot outlast them), the bundled models run unchanged, and
// --unsafe-lua gives a trusted script the whole standard library back.
#include <sys/stat.h>

#include "harness.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const char kTail[] = "\nlocal x = sg.param(\"x\", {2})\nsg.loss(sg.sum(x))\nsg.optimizer.sgd{ lr = 0.1 }\n";

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// Runs `body` between `require "sg"` and a minimal loss as the script dir/name.
Status run_script(const test::TempDir& dir, const std::string& name, const std::string& body,
                  const dsl::LuaLimits& limits = {}) {
  std::string path = dir.file(name, "local sg = require \"sg\"\n" + body + kTail);
  dsl::ScriptOptions opts;
  opts.limits = limits;
  compiler::Graph g;
  return dsl::load_script(path, opts, &g);
}

// The script fails with a message that names it (at `line` when > 0) and holds `what`.
void expect_refused(const Status& st, const test::TempDir& dir, const std::string& name, int line, const std::string& what) {
  INFO(st.message());
  REQUIRE(!st.ok());
  CHECK(st.code() == StatusCode::invalid_input);
  std::string where = dir.path + "/" + name + (line > 0 ? ":" + std::to_string(line) + ":" : "");
  CHECK(st.message().find(where) != std::string::npos);
  CHECK(st.message().find(what) != std::string::npos);
}

}  // namespace

TEST_CASE("sandbox: no shell, no files, no native modules, no debug library") {
  test::TempDir d;
  const std::string mark = d.path + "/pwned";
  d.file("evil.so", "not a shared object");
  struct Escape { const char* name; std::string body; const char* what; };
  const Escape escapes[] = {
      {"execute.lua", "os.execute('touch " + mark + "')", "field 'execute'"},
      {"popen.lua", "io.popen('touch " + mark + "')", "global 'io'"},
      {"io_open.lua", "io.open('" + mark + "', 'w'):write('x')", "global 'io'"},
      {"getenv.lua", "local home = os.getenv('HOME')", "field 'getenv'"},
      {"remove.lua", "os.remove('" + mark + "')", "field 'remove'"},
      {"require_so.lua", "package.cpath = '" + d.path + "/?.so' require 'evil'", "module 'evil' not found"},
      {"loadlib.lua", "package.loadlib('" + d.path + "/evil.so', 'luaopen_evil')", "field 'loadlib'"},
      {"require_io.lua", "local io = require 'io'", "module 'io' not found"},
      {"dofile.lua", "dofile('/etc/passwd')", "global 'dofile'"},
      {"loadfile.lua", "loadfile('/etc/passwd')", "global 'loadfile'"},
      {"debug.lua", "debug.sethook()", "global 'debug'"},
      {"bytecode.lua", "local f, err = load('\\27Lua\\84\\0') error(err)", "attempt to load a binary chunk"},
      {"dump.lua", "local f, err = load(string.dump(function() return 1 end)) error(err)",
       "attempt to load a binary chunk"},
  };
  for (const Escape& e : escapes) {
    CAPTURE(e.name);
    expect_refused(run_script(d, e.name, e.body), d, e.name, 2, e.what);
  }
  CHECK_MESSAGE(!exists(mark), "an escape ran");
  // Text chunks still load (with the script's own sandboxed globals).
  CHECK(run_script(d, "text.lua", "assert(load('return 1 + 1')() == 2)\nassert(load('return io')() == nil)").ok());
}

TEST_CASE("sandbox: a precompiled script file is refused; --unsafe-lua runs it") {
  test::TempDir d;
  const std::string compiled = d.path + "/compiled.lua";
  // Unsafe mode writes the bytecode of a valid model into compiled.lua.
  dsl::LuaLimits unsafe;
  unsafe.sandbox = false;
  REQUIRE(run_script(d, "writer.lua",
                     "local f = assert(io.open('" + compiled + "', 'wb'))\n"
                     "f:write(string.dump(assert(load('local sg = require \"sg\"' .. [[" + kTail + "]]))))\nf:close()",
                     unsafe).ok());
  REQUIRE(exists(compiled));
  dsl::ScriptOptions opts;
  compiler::Graph g;
  Status st = dsl::load_script(compiled, opts, &g);
  INFO(st.message());
  REQUIRE(!st.ok());
  CHECK(st.message().find(compiled) != std::string::npos);
  CHECK(st.message().find("binary chunk") != std::string::npos);
  opts.limits = unsafe;
  compiler::Graph g2;
  st = dsl::load_script(compiled, opts, &g2);
  CHECK_MESSAGE(st.ok(), st.message());
}

TEST_CASE("sandbox: the instruction budget stops endless loops, through pcall and coroutines") {
  test::TempDir d;
  dsl::LuaLimits small;
  small.instructions = 1'000'000;
  for (const char* body : {"while true do end", "pcall(function() while true do end end)",
                           "while true do pcall(function() while true do end end) end",
                           "coroutine.wrap(function() while true do end end)()",
                           "local function f(n) return f(n + 1) end\nf(0)"}) {
    CAPTURE(body);
    expect_refused(run_script(d, "loop.lua", body, small), d, "loop.lua", 0,
                   "loop.lua: the script ran more than 1000000 Lua instructions (a sandbox limit for model scripts; "
                   "--unsafe-lua lifts it)");
  }
}

TEST_CASE("sandbox: the memory budget stops a memory bomb, through pcall") {
  test::TempDir d;
  dsl::LuaLimits small;
  small.memory_bytes = 16 << 20;
  for (const char* body : {"local s = 'x'\nwhile true do s = s .. s end",
                           "local t = {}\nfor i = 1, 1e9 do t[i] = i end",
                           "pcall(function() local s = string.rep('x', 1 << 30) end)"}) {
    CAPTURE(body);
    expect_refused(run_script(d, "bomb.lua", body, small), d, "bomb.lua", 0,
                   "bomb.lua: the script needed more than 16 MiB of Lua memory");
  }
}

TEST_CASE("sandbox: the bundled models compile within the default budgets") {
  for (const char* model : {"/models/fashion_mlp.lua", "/models/gpt.lua"}) {
    CAPTURE(model);
    compiler::Graph g;
    Status st = dsl::load_script(std::string(SGRT_SOURCE_DIR) + model, {}, &g);
    CHECK_MESSAGE(st.ok(), st.message());
  }
}

TEST_CASE("sgrt --unsafe-lua lifts the sandbox; without it the script's escape is a bad-input error") {
  test::TempDir d;
  const std::string mark = d.path + "/written";
  std::string script = d.file("writes.lua", "local sg = require \"sg\"\nio.open('" + mark + "', 'w'):close()" + kTail);
  test::ToolResult r = test::run_tool({"info", script});
  CHECK(r.code == 2);
  CHECK(r.err.find(script + ":2:") != std::string::npos);
  CHECK(!exists(mark));
  r = test::run_tool({"info", script, "--unsafe-lua"});
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(exists(mark));
  r = test::run_tool({"info", d.file("m.sg", "x"), "--unsafe-lua"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--unsafe-lua") != std::string::npos);
}
