# Writes OUT (ops.glsl): `const uint OP_<Enum> = <code>;` for every OP(...) line
# of OPS_DEF, in order (codes are positions, as in sgrt/ops.h).
file(STRINGS ${OPS_DEF} lines REGEX "^OP\\(")
set(text "// Generated from ops.def; do not edit.\n")
set(code 0)
foreach(line ${lines})
  string(REGEX REPLACE "^OP\\(([A-Za-z0-9_]+),.*" "\\1" name "${line}")
  string(APPEND text "const uint OP_${name} = ${code}u;\n")
  math(EXPR code "${code} + 1")
endforeach()
file(WRITE ${OUT}.tmp "${text}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
