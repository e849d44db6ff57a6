// The Lua state a model script runs in. A model .lua is code people download,
// so by default it runs sandboxed: only the sg library and safe standard
// functions (no os.execute, io, debug, native modules, dofile / loadfile, or
// bytecode), within an instruction and a memory budget. `--unsafe-lua` gives
// the full standard library and no budgets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

struct lua_State;
struct lua_Debug;

namespace sgrt::dsl {

struct LuaLimits {
  bool sandbox = true;
  uint64_t instructions = 200'000'000;  // the bundled models need well under 1%
  size_t memory_bytes = size_t(256) << 20;
};

class LuaState {
 public:
  explicit LuaState(const LuaLimits& limits);
  ~LuaState();
  LuaState(const LuaState&) = delete;
  LuaState& operator=(const LuaState&) = delete;

  lua_State* get() const { return L_; }  // nullptr if the state could not be created
  // The budget the script exceeded, as a message naming it; "" if none was.
  std::string limit_error(const std::string& script) const;

 private:
  static void* alloc(void* ud, void* ptr, size_t osize, size_t nsize);
  static void count_hook(lua_State* L, lua_Debug* ar);
  void open_safe_libraries();

  LuaLimits limits_;
  lua_State* L_ = nullptr;
  size_t used_ = 0;
  uint64_t executed_ = 0;
  bool out_of_memory_ = false, out_of_instructions_ = false;
};

}  // namespace sgrt::dsl
