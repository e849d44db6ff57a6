// `sgrt ops`: the op table of ops.def as a Markdown table: each op's kind, shape
// family, gradient, scale rule, the backends whose kernel tables must have it,
// version and attributes. docs/ops.md holds its output (a test keeps them equal).
#include <cstdio>
#include <string>

#include "commands.h"
#include "sgrt/ops.h"

namespace sgrt::tool {

std::string op_table_markdown() {
  std::string t = "| op | kind | shape | gradient | scale rule | cpu | cuda | vulkan | version | attributes |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n";
  for (int c = 0; c < kNumOps; ++c) {
    const OpInfo& op = kOpInfo[c];
    std::string grad = op.gradient == kGradComposite ? "composite"
                       : op.gradient == kGradNone    ? "-"
                                                     : std::string(op_info(static_cast<OpCode>(op.gradient)).name);
    auto mark = [&](uint8_t bit) { return op.backends & bit ? "yes" : "**no**"; };
    t += "| " + std::string(op.name) + " | " + op_kind_name(op.kind) + " | " + op_shape_name(op.shape) + " | " + grad +
         " | " + scale_rule_name(op.scale_rule) + " | " + mark(kBackendCpu) + " | " + mark(kBackendCuda) + " | " +
         mark(kBackendVulkan) + " | " + std::to_string(op.version) + " | " +
         (op.attrs.empty() ? std::string("-") : "`" + std::string(op.attrs) + "`") + " |\n";
  }
  return t;
}

Status cmd_ops(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (!a.positional.empty()) return Status::Invalid("ops takes no arguments");
  std::fputs(op_table_markdown().c_str(), stdout);
  return Status::Ok();
}

}  // namespace sgrt::tool
