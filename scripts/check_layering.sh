#!/usr/bin/env bash
# The layering, bottom up: core <- ir, kernels <- compiler, runtime <- tools.
# core includes nothing above it; kernels and the compiler never include the
# runtime (its headers or sources). Prints each offending line; exit 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime_headers=$(cd runtime/include && ls sgrt/*.h | sed 's/[.]/[.]/g' | paste -sd'|')
ir_headers=$(cd ir/include && ls sgrt/*.h | sed 's/[.]/[.]/g' | paste -sd'|')
bad=0
check() {  # check DIR REGEX WHAT
  local hits
  hits=$(grep -rnE "#include \"($2)\"" "$1" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)
  if [ -n "$hits" ]; then echo "$3:"; echo "$hits"; bad=1; fi
}
check kernels "[.][.]/[^\"]*runtime/[^\"]*|runtime/[^\"]*|$runtime_headers" "kernels/ includes the runtime"
check compiler "[.][.]/[^\"]*runtime/[^\"]*|runtime/[^\"]*|$runtime_headers|cpu/[^\"]*|vulkan/[^\"]*|cuda/[^\"]*" \
  "compiler/ includes the runtime or the kernels"
check core "[.][.]/[^\"]*|$runtime_headers|$ir_headers|sg_generated[.]h|cpu/[^\"]*|vulkan/[^\"]*|cuda/[^\"]*|formats/[^\"]*" \
  "core/ includes a layer above it"
[ "$bad" = 0 ] && echo "layering: core, ir, kernels and compiler include nothing above them"
exit "$bad"
