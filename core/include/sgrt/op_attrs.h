// Checks an op's attributes against its declaration in ops.def. The compiler
// runs it as the DSL adds each op, the runtime's loader on every op of a file.
#pragma once
#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/status.h"

namespace sgrt {

// Refuses a missing required attribute, an undeclared one and, where the kind
// was recorded (kind != unset), a mistyped one; the message names the op and
// the attribute. Callers add the source location.
Status check_op_attrs(OpCode code, const Attrs& attrs);

}  // namespace sgrt
