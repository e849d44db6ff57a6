// The op table (core/include/sgrt/ops.def) against everything keyed by it: each
// backend's kernel table has an entry for exactly the ops whose row declares that
// backend, every row's attribute column parses, its gradient op exists, and the
// loader and the compiler refuse attributes the row does not declare.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "cpu/op_args.h"
#include "harness.h"
#include "sgrt/backend.h"
#include "sgrt/op_attrs.h"
#include "sgrt/ops.h"
#include "tool_runner.h"
#ifdef SGRT_WITH_VULKAN
#include "vulkan/table.h"
#endif
#ifdef SGRT_WITH_CUDA
#include "cuda/bind.h"
#endif

using namespace sgrt;

namespace {

// Ops the table declares for `bit` that `has` lacks, and ops it has undeclared.
template <class Has>
void check_coverage(const char* backend, uint8_t bit, Has has) {
  std::string missing, undeclared;
  for (int c = 0; c < kNumOps; ++c) {
    auto code = static_cast<OpCode>(c);
    bool declared = op_info(code).backends & bit;
    std::string name(op_info(code).name);
    if (declared && !has(code)) missing += " " + name;
    if (!declared && has(code)) undeclared += " " + name;
  }
  INFO("backend " << backend);
  CHECK_MESSAGE(missing.empty(), "declared in ops.def but absent from the kernel table:" << missing);
  CHECK_MESSAGE(undeclared.empty(), "in the kernel table but not declared in ops.def:" << undeclared);
}

}  // namespace

TEST_CASE("every backend's kernel table covers exactly the ops ops.def declares for it") {
  check_coverage("cpu", kBackendCpu, [](OpCode c) { return table_has_op(cpu::kernel_table(), c); });
#ifdef SGRT_WITH_VULKAN
  check_coverage("vulkan", kBackendVulkan, [](OpCode c) { return table_has_op(vk::kernel_table(), c); });
#else
  MESSAGE("vulkan backend not built: its table is not checked here");
#endif
#ifdef SGRT_WITH_CUDA
  check_coverage("cuda", kBackendCuda, [](OpCode c) { return table_has_op(cuda::kernel_table(), c); });
#else
  MESSAGE("cuda backend not built: its table is not checked here");
#endif
}

TEST_CASE("every row of ops.def is well formed") {
  std::set<std::string_view> names;
  for (int c = 0; c < kNumOps; ++c) {
    auto code = static_cast<OpCode>(c);
    const OpInfo& op = op_info(code);
    INFO("op " << op.name);
    CHECK(names.insert(op.name).second);
    std::vector<AttrDecl> decls;
    Status st = op_attr_decls(code, &decls);
    CHECK_MESSAGE(st.ok(), st.message());
    CHECK((op.backends & kBackendCpu) != 0);  // the CPU is the reference: it has every op
    CHECK(op.version >= 1);
    if (op.gradient >= 0) {
      // A dedicated gradient op is a gradient-kind op that has no gradient itself.
      const OpInfo& g = op_info(static_cast<OpCode>(op.gradient));
      CHECK(g.kind == OpKind::gradient);
      CHECK(g.gradient == kGradNone);
      CHECK(op.kind == OpKind::forward);
    }
    if (op.kind != OpKind::forward) CHECK(op.gradient == kGradNone);
    int arity = op.shape == OpShape::unary ? 1 : 2;
    if (op.shape != OpShape::own) CHECK(op.num_inputs == arity);
  }
}

TEST_CASE("attributes are checked against the declaration") {
  Attrs ok;
  ok.set_i("axis", -1);
  CHECK(check_op_attrs(OpCode::Softmax, ok).ok());
  Attrs typo;
  typo.set_i("axes", -1);
  Status st = check_op_attrs(OpCode::Softmax, typo);
  CHECK(st.message().find("unknown attribute 'axes'") != std::string::npos);
  Attrs mistyped;
  mistyped.set_f("axis", 1.0);
  st = check_op_attrs(OpCode::Softmax, mistyped);
  CHECK(st.message().find("attribute 'axis' is f, declared i") != std::string::npos);
  Attrs missing;
  st = check_op_attrs(OpCode::Scale, missing);
  CHECK(st.message().find("missing attribute 'alpha'") != std::string::npos);
  Attrs unset;  // files before schema 2 record no kind: the name alone is checked
  unset.add(Attr{"alpha", AttrKind::unset, 0, 2.0, {}});
  CHECK(check_op_attrs(OpCode::Scale, unset).ok());
}

TEST_CASE("the DSL refuses an op attribute the table does not declare, naming the line") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {2, 3}, "ones")
    local y = sg.softmax(x, 1.5)
    sg.loss(sg.sum(sg.sum(y)))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find(":4: op softmax: attribute 'axis' is f, declared i") != std::string::npos);
}

TEST_CASE("missing_ops lists what a backend lacks, before anything runs") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {1, 3, 4}, "ones")
    sg.loss(sg.sum(sg.sum(sg.sum(sg.attention(x, x, x, 2)))))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<std::string> missing;
  REQUIRE(missing_ops("cpu", *m, &missing).ok());
  CHECK(missing.empty());
  for (const std::string& b : built_backends()) {
    if (b == "cpu") continue;
    REQUIRE(missing_ops(b, *m, &missing).ok());
    // Where ops.def does not declare attention for b, both it and its gradient are listed, with the line.
    bool declared = op_info(OpCode::Attention).backends & (b == "cuda" ? kBackendCuda : kBackendVulkan);
    if (declared) continue;
    REQUIRE(missing.size() >= 2);
    CHECK(missing[0].rfind("attention(f32, f32, f32) -> (f32, f32) at ", 0) == 0);
  }
  CHECK_FALSE(missing_ops("tpu", *m, &missing).ok());
}

TEST_CASE("docs/ops.md holds the op table sgrt ops prints") {
  test::ToolResult r = test::run_tool({"ops"});
  REQUIRE(r.code == 0);
  REQUIRE(r.out.find("| sqrt |") != std::string::npos);
  std::string doc = test::slurp(SGRT_SOURCE_DIR "/docs/ops.md");
  CHECK_MESSAGE(doc.find(r.out) != std::string::npos,
                "docs/ops.md is out of date: regenerate its table with `sgrt ops` (docs/adding_an_op.md)");
}

TEST_CASE("compiling a script twice writes the same bytes (attributes in a fixed order)") {
  test::TempDir dir;
  // matmul's attributes come from a Lua table, whose keys iterate in no fixed order.
  std::string a = dir.path + "/a.sg", b = dir.path + "/b.sg";
  REQUIRE(test::run_tool({"compile", "models/gpt.lua", "--set", "n_layer=1", "-o", a}).code == 0);
  REQUIRE(test::run_tool({"compile", "models/gpt.lua", "--set", "n_layer=1", "-o", b}).code == 0);
  std::string x = test::slurp(a), y = test::slurp(b);
  REQUIRE(!x.empty());
  CHECK(x == y);
}
