# Writes OUT: a C++ header holding each Lua file of the sg library as a string,
# so the compiler finds its DSL wherever it runs. Module name = file name less ".lua".
set(body "// Generated from dsl/lua by embed_lua.cmake; do not edit.\n#pragma once\nstruct EmbeddedLua { const char* module; const char* source; };\ninline constexpr EmbeddedLua kEmbeddedLua[] = {\n")
foreach(f ${FILES})
  get_filename_component(mod ${f} NAME_WLE)
  file(READ ${f} src)
  string(APPEND body "  {\"${mod}\", R\"sglua(${src})sglua\"},\n")
endforeach()
string(APPEND body "};\n")
file(WRITE ${OUT}.tmp "${body}")
file(RENAME ${OUT}.tmp ${OUT})
