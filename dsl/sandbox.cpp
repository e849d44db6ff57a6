#include "sandbox.h"

#include <lua.hpp>

#include <cstdlib>
#include <cstring>

namespace sgrt::dsl {
namespace {

constexpr int kHookEvery = 1000;  // instructions between budget checks

LuaState* owner(lua_State* L) { return *static_cast<LuaState**>(lua_getextraspace(L)); }

// load() for text only: a binary chunk is unverified bytecode, which can
// corrupt the interpreter. Calls the real load (upvalue 1) with mode "t".
int text_load(lua_State* L) {
  if (lua_gettop(L) < 3) lua_settop(L, 3);
  lua_pushstring(L, "t");
  lua_replace(L, 3);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

void set_global_nil(lua_State* L, const char* name) {
  lua_pushnil(L);
  lua_setglobal(L, name);
}

}  // namespace

LuaState::LuaState(const LuaLimits& limits) : limits_(limits) {
  if (!limits_.sandbox) {
    L_ = luaL_newstate();
    if (L_) luaL_openlibs(L_);
    return;
  }
  L_ = lua_newstate(&LuaState::alloc, this);
  if (!L_) return;
  *static_cast<LuaState**>(lua_getextraspace(L_)) = this;  // copied into every coroutine
  open_safe_libraries();
  lua_sethook(L_, &LuaState::count_hook, LUA_MASKCOUNT, kHookEvery);
}

LuaState::~LuaState() {
  if (L_) lua_close(L_);
}

// Counts what Lua allocates and refuses growth past the budget (Lua then
// raises "not enough memory", which the script cannot outlast: the flag stays).
void* LuaState::alloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* self = static_cast<LuaState*>(ud);
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    self->used_ -= old;
    return nullptr;
  }
  if (nsize > old && nsize - old > self->limits_.memory_bytes - self->used_) {
    self->out_of_memory_ = true;
    return nullptr;
  }
  void* p = std::realloc(ptr, nsize);
  if (p) self->used_ = self->used_ - old + nsize;
  return p;
}

// Once the budget is spent every later instruction fails, so pcall cannot
// swallow the error and carry on.
void LuaState::count_hook(lua_State* L, lua_Debug*) {
  LuaState* self = owner(L);
  self->executed_ += self->out_of_instructions_ ? 1 : kHookEvery;
  if (self->executed_ > self->limits_.instructions && !self->out_of_instructions_) {
    self->out_of_instructions_ = true;
    lua_sethook(L, &LuaState::count_hook, LUA_MASKCOUNT, 1);
  }
  if (self->out_of_instructions_) luaL_error(L, "instruction limit reached");
}

void LuaState::open_safe_libraries() {
  const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},          {LUA_LOADLIBNAME, luaopen_package},
                           {LUA_COLIBNAME, luaopen_coroutine}, {LUA_TABLIBNAME, luaopen_table},
                           {LUA_STRLIBNAME, luaopen_string},   {LUA_MATHLIBNAME, luaopen_math},
                           {LUA_UTF8LIBNAME, luaopen_utf8}};
  for (const luaL_Reg& lib : libs) {
    luaL_requiref(L_, lib.name, lib.func, 1);
    lua_pop(L_, 1);
  }
  set_global_nil(L_, "dofile");
  set_global_nil(L_, "loadfile");
  lua_getglobal(L_, "load");
  lua_pushcclosure(L_, text_load, 1);
  lua_setglobal(L_, "load");

  // os: the clock only. The library itself is never registered as a module.
  lua_pushcfunction(L_, luaopen_os);
  lua_call(L_, 0, 1);
  lua_newtable(L_);
  for (const char* fn : {"clock", "time", "difftime", "date"}) {
    lua_getfield(L_, -2, fn);
    lua_setfield(L_, -2, fn);
  }
  lua_setglobal(L_, "os");
  lua_pop(L_, 1);

  // require finds preloaded and embedded modules only (load_script adds the
  // embedded searcher): no search path, no native modules.
  lua_getglobal(L_, LUA_LOADLIBNAME);
  lua_pushstring(L_, "");
  lua_setfield(L_, -2, "path");
  lua_pushstring(L_, "");
  lua_setfield(L_, -2, "cpath");
  lua_pushnil(L_);
  lua_setfield(L_, -2, "loadlib");
  lua_pushnil(L_);
  lua_setfield(L_, -2, "searchpath");
  lua_getfield(L_, -1, "searchers");
  for (lua_Integer i = luaL_len(L_, -1); i > 1; --i) {
    lua_pushnil(L_);
    lua_seti(L_, -2, i);
  }
  lua_pop(L_, 2);
}

std::string LuaState::limit_error(const std::string& script) const {
  const char* lift = " (a sandbox limit for model scripts; --unsafe-lua lifts it)";
  if (out_of_instructions_)
    return script + ": the script ran more than " + std::to_string(limits_.instructions) + " Lua instructions" + lift;
  if (out_of_memory_)
    return script + ": the script needed more than " + std::to_string(limits_.memory_bytes >> 20) + " MiB of Lua memory" + lift;
  return "";
}

}  // namespace sgrt::dsl
