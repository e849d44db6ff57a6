// The `_sg` C module the Lua side (dsl/lua/*.lua) is built on. Tensors cross
// the boundary as integer ids into compiler::Graph::tensors.
#include <lua.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "dsl.h"
#include "embedded_lua.h"
#include "optimizer.h"
#include "sgrt/checked_math.h"
#include "sgrt/quant.h"

namespace sgrt::dsl {
namespace {

using compiler::Graph;
using compiler::Loc;

struct State {
  Graph* g;
  const ScriptOptions* opts;
  std::set<std::string> config_keys;
  uint64_t param_count = 0;
};

State& state(lua_State* L) { return *static_cast<State*>(lua_touserdata(L, lua_upvalueindex(1))); }

// The innermost frame that belongs to a user file (chunk names "@path"); the
// embedded library's chunks are named "=sg..." and skipped.
Loc user_loc(lua_State* L) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); ++level) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.source && ar.source[0] == '@') return Loc{ar.source + 1, ar.currentline};
  }
  return Loc{};
}

// Errors leave a C function as a C++ exception, so its strings and vectors are
// destroyed; guarded() turns it into a Lua error once no C++ frame is live
// (lua_error longjmps, which would skip destructors).
struct ScriptError {
  std::string msg;
};

[[noreturn]] void raise(lua_State*, const std::string& msg) { throw ScriptError{msg}; }
[[noreturn]] void raise_at(lua_State* L, const std::string& msg) { raise(L, user_loc(L).str() + ": " + msg); }

template <lua_CFunction F>
int guarded(lua_State* L) {
  try {
    return F(L);
  } catch (const ScriptError& e) {
    lua_pushstring(L, e.msg.c_str());
  } catch (const std::exception& e) {
    lua_pushstring(L, e.what());
  }
  return lua_error(L);
}

// Argument checks that fail like raise_at, by exception: luaL_check* would
// longjmp past the caller's strings and vectors. User tables are read raw, so
// no metamethod can raise in the middle of a C++ frame either.
std::string arg_error(lua_State* L, int idx, const char* want) {
  return "argument #" + std::to_string(idx) + ": " + want + " expected, got " + luaL_typename(L, idx);
}
void check_table(lua_State* L, int idx) {
  if (!lua_istable(L, idx)) raise_at(L, arg_error(L, idx, "table"));
}
lua_Integer check_integer(lua_State* L, int idx) {
  if (!lua_isinteger(L, idx)) raise_at(L, arg_error(L, idx, "integer"));
  return lua_tointeger(L, idx);
}
std::string check_string(lua_State* L, int idx) {
  if (!lua_isstring(L, idx)) raise_at(L, arg_error(L, idx, "string"));
  lua_pushvalue(L, idx);  // a copy: converting a number in place would confuse lua_next
  std::string r = lua_tostring(L, -1);
  lua_pop(L, 1);
  return r;
}
std::string opt_string(lua_State* L, int idx, const char* def) { return lua_isnoneornil(L, idx) ? def : check_string(L, idx); }
double opt_number(lua_State* L, int idx, double def) {
  if (lua_isnoneornil(L, idx)) return def;
  if (!lua_isnumber(L, idx)) raise_at(L, arg_error(L, idx, "number"));
  return lua_tonumber(L, idx);
}
lua_Integer raw_len(lua_State* L, int idx) { return static_cast<lua_Integer>(lua_rawlen(L, idx)); }
// Pushes t[key] without metamethods.
void raw_field(lua_State* L, int idx, const char* key) {
  idx = lua_absindex(L, idx);
  lua_pushstring(L, key);
  lua_rawget(L, idx);
}

int tensor_id(lua_State* L, int idx) {
  State& s = state(L);
  lua_Integer id = check_integer(L, idx);
  if (id < 0 || id >= static_cast<lua_Integer>(s.g->tensors.size())) raise_at(L, "invalid tensor handle");
  return static_cast<int>(id);
}

Shape read_shape(lua_State* L, int idx) {
  check_table(L, idx);
  Shape s;
  lua_Integer n = raw_len(L, idx);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, i);
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0) raise_at(L, "shape entries must be positive integers");
    s.push_back(lua_tointeger(L, -1));
    lua_pop(L, 1);
  }
  int64_t count;
  if (!checked_numel(s, &count)) raise_at(L, "shape " + shape_str(s) + " has more than 2^40 elements");
  return s;
}

void push_shape(lua_State* L, const Shape& s) {
  lua_createtable(L, static_cast<int>(s.size()), 0);
  for (size_t i = 0; i < s.size(); ++i) {
    lua_pushinteger(L, s[i]);
    lua_seti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

std::string field_string(lua_State* L, int idx, const char* key, const char* def) {
  raw_field(L, idx, key);
  std::string r = lua_isstring(L, -1) ? lua_tostring(L, -1) : def;
  lua_pop(L, 1);
  return r;
}
double field_number(lua_State* L, int idx, const char* key, double def) {
  raw_field(L, idx, key);
  double r = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : def;
  lua_pop(L, 1);
  return r;
}
// A step count or seed, truncated; out of int64's range (inf, NaN) is an error.
int64_t field_int(lua_State* L, int idx, const char* key, int64_t def) {
  double v = field_number(L, idx, key, static_cast<double>(def));
  if (!(v > -0x1p63 && v < 0x1p63)) raise_at(L, std::string(key) + " = " + std::to_string(v) + " is not a usable count");
  return static_cast<int64_t>(v);
}
bool field_bool(lua_State* L, int idx, const char* key, bool def) {
  raw_field(L, idx, key);
  bool r = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return r;
}

bool name_taken(const Graph& g, const std::string& name) { return g.find_tensor(name) >= 0; }

// A declared value range: finite, lo <= hi.
compiler::ValueRange check_range(lua_State* L, const std::string& input, double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi)
    raise_at(L, "input '" + input + "': range {" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "} must be finite with lo <= hi");
  return {static_cast<float>(lo), static_cast<float>(hi)};
}

// opts.range = {lo, hi}, or nothing.
std::optional<compiler::ValueRange> read_range(lua_State* L, int opts, const std::string& input) {
  if (lua_isnoneornil(L, opts)) return std::nullopt;
  check_table(L, opts);
  raw_field(L, opts, "range");
  std::optional<compiler::ValueRange> r;
  if (!lua_isnil(L, -1)) {
    int t = lua_gettop(L);
    if (!lua_istable(L, t) || raw_len(L, t) != 2) raise_at(L, "input '" + input + "': range must be {lo, hi}");
    lua_rawgeti(L, t, 1);
    lua_rawgeti(L, t, 2);
    if (!lua_isnumber(L, -2) || !lua_isnumber(L, -1)) raise_at(L, "input '" + input + "': range must be {lo, hi}, two numbers");
    r = check_range(L, input, lua_tonumber(L, -2), lua_tonumber(L, -1));
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  return r;
}

// A persistent tensor (sg.input, sg.param, sg.cache) named by argument 1 and
// shaped by argument 2; a name already in use is "a <kind> named ... already exists<hint>".
compiler::Tensor persistent_tensor(lua_State* L, sg::Role role, const std::string& kind, const std::string& hint = "") {
  compiler::Tensor t;
  t.name = check_string(L, 1);
  if (name_taken(*state(L).g, t.name)) raise_at(L, "a " + kind + " named '" + t.name + "' already exists" + hint);
  t.type.shape = read_shape(L, 2);
  t.role = role;
  t.persistent = true;
  t.loc = user_loc(L);
  return t;
}

// _sg.input(name, shape, dtype, {range = {lo, hi}}) -> id
int l_input(lua_State* L) {
  State& s = state(L);
  compiler::Tensor t = persistent_tensor(L, sg::Role::input, "tensor");
  const std::string& name = t.name;
  std::string dt = opt_string(L, 3, "f32");
  if (!dtype_from_name(dt.c_str(), &t.type.dtype) || (t.type.dtype != DType::f32 && t.type.dtype != DType::i32))
    raise_at(L, std::string("input '") + name + "': dtype must be f32 or i32, got '" + dt + "'");
  t.range = read_range(L, 4, name);
  lua_pushinteger(L, s.g->add_tensor(std::move(t)));
  return 1;
}

// _sg.default_range(id, lo, hi): a data set's range for an input bound to it,
// unless the script declared one.
int l_default_range(lua_State* L) {
  State& s = state(L);
  compiler::Tensor& t = s.g->tensors[tensor_id(L, 1)];
  if (t.role != sg::Role::input) raise_at(L, "'" + t.name + "' is not an sg.input");
  if (!t.range) t.range = check_range(L, t.name, opt_number(L, 2, 0), opt_number(L, 3, 0));
  return 0;
}

// A block format's rules for a param stored in it (a frozen quantized base).
void check_block_param(lua_State* L, const compiler::Tensor& t) {
  const std::string what = "param '" + t.name + "' stored as " + dtype_name(t.type.dtype);
  if (t.type.shape.size() != 2) raise_at(L, what + " must be rank 2 ([out, in] or [vocab, width])");
  if (t.type.shape[1] % dtype_block_size(t.type.dtype) != 0)
    raise_at(L, what + ": its last dimension " + std::to_string(t.type.shape[1]) + " must be a multiple of " +
                    std::to_string(dtype_block_size(t.type.dtype)) + " (whole blocks per row)");
}

// The dtype named by a string: f32, or a block format (q8_0, q4_1) for frozen weights.
DType weight_dtype(lua_State* L, const std::string& name, const std::string& what) {
  DType d = DType::f32;
  if (!dtype_from_name(name.c_str(), &d) || (d != DType::f32 && !dtype_is_block(d)))
    raise_at(L, what + ": dtype must be f32, q8_0 or q4_1, got '" + name + "'");
  return d;
}

// _sg.param(name, shape, init, a, b, dtype) -> id; init in zeros|ones|uniform|normal;
// dtype f32 (default), q8_0 or q4_1 (frozen: the caller freezes it).
int l_param(lua_State* L) {
  State& s = state(L);
  compiler::Tensor t = persistent_tensor(L, sg::Role::param, "parameter", " (give layers distinct names)");
  const std::string& name = t.name;
  std::string init = opt_string(L, 3, "zeros");
  static const char* const kinds[] = {"zeros", "ones", "uniform", "normal"};
  int k = -1;
  for (int i = 0; i < 4; ++i) if (init == kinds[i]) k = i;
  if (k < 0) raise_at(L, "param '" + name + "': unknown initializer '" + init + "' (zeros, ones, uniform, normal)");
  t.init.kind = static_cast<sg::InitKind>(k);
  t.init.a = static_cast<float>(opt_number(L, 4, 0));
  t.init.b = static_cast<float>(opt_number(L, 5, 0));
  t.init.seed = ++s.param_count;  // mixed with the run's seed by the runtime
  t.type.dtype = weight_dtype(L, opt_string(L, 6, "f32"), "param '" + name + "'");
  if (dtype_is_block(t.type.dtype)) check_block_param(L, t);
  lua_pushinteger(L, s.g->add_tensor(std::move(t)));
  return 1;
}

// _sg.frozen_base(id, dtype): sg.lora's base for this param, its storage once
// frozen (compiler/frozen_base.h).
int l_frozen_base(lua_State* L) {
  compiler::Tensor& t = state(L).g->tensors[tensor_id(L, 1)];
  if (t.role != sg::Role::param) raise_at(L, "'" + t.name + "' is not an sg.param");
  t.base_dtype = weight_dtype(L, check_string(L, 2), "sg.lora: base for '" + t.name + "'");
  return 0;
}

// _sg.cache(name, shape) -> id: f32 decoding state (a KV cache), zero at init,
// kept across runs, never saved.
int l_cache(lua_State* L) {
  compiler::Tensor t = persistent_tensor(L, sg::Role::cache, "tensor");
  t.type.dtype = DType::f32;
  lua_pushinteger(L, state(L).g->add_tensor(std::move(t)));
  return 1;
}

// _sg.statistic(name, shape, init) -> id: f32 running statistics (batch norm's),
// init "zeros" or "ones"; updated in place by training, saved, never trained.
int l_statistic(lua_State* L) {
  compiler::Tensor t = persistent_tensor(L, sg::Role::statistic, "tensor");
  t.type.dtype = DType::f32;
  std::string init = opt_string(L, 3, "zeros");
  if (init != "zeros" && init != "ones") raise_at(L, "statistic '" + t.name + "': init must be zeros or ones, got '" + init + "'");
  t.init.kind = init == "ones" ? sg::InitKind::ones : sg::InitKind::zeros;
  lua_pushinteger(L, state(L).g->add_tensor(std::move(t)));
  return 1;
}

// _sg.program(name, {ids}): a program of its own computing these outputs.
int l_program(lua_State* L) {
  Graph& g = *state(L).g;
  std::string name = check_string(L, 1);
  if (name == "train_step" || name == "eval" || name == "infer") raise_at(L, "sg.program: '" + name + "' is a built-in program");
  for (auto& [n, ids] : g.declared_programs)
    if (n == name) raise_at(L, "sg.program: '" + name + "' declared twice");
  check_table(L, 2);
  std::vector<int> ids;
  for (lua_Integer i = 1, n = raw_len(L, 2); i <= n; ++i) {
    lua_rawgeti(L, 2, i);
    ids.push_back(tensor_id(L, -1));
    lua_pop(L, 1);
  }
  if (ids.empty()) raise_at(L, "sg.program: '" + name + "' has no outputs");
  g.declared_programs.push_back({name, std::move(ids)});
  return 0;
}

// _sg.freeze(id): the param trains no more (no gradient, optimizer state or master).
int l_freeze(lua_State* L) {
  compiler::Tensor& t = state(L).g->tensors[tensor_id(L, 1)];
  if (t.role != sg::Role::param) raise_at(L, "'" + t.name + "' is not an sg.param: only params can be frozen");
  t.frozen = true;
  return 0;
}

// An op's attributes from a Lua table; numbers take the kind ops.def declares
// (an integer where a float is declared is that float).
Attrs read_attrs(lua_State* L, int idx, OpCode code) {
  Attrs a;
  if (lua_isnoneornil(L, idx)) return a;
  std::vector<AttrDecl> decls;
  if (Status st = op_attr_decls(code, &decls); !st.ok()) raise_at(L, st.message());
  check_table(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) raise_at(L, "attribute names must be strings");
    std::string key = lua_tostring(L, -2);
    bool want_float = false;
    for (const AttrDecl& d : decls) want_float |= d.name == key && d.kind == AttrKind::f;
    if (lua_isboolean(L, -1)) a.set_i(key, lua_toboolean(L, -1));
    else if (lua_isinteger(L, -1) && !want_float) a.set_i(key, lua_tointeger(L, -1));
    else if (lua_isnumber(L, -1)) a.set_f(key, lua_tonumber(L, -1));
    else if (lua_istable(L, -1)) {
      std::vector<int64_t> v;
      lua_Integer n = raw_len(L, -1);
      for (lua_Integer i = 1; i <= n; ++i) {
        lua_rawgeti(L, -1, i);
        if (!lua_isinteger(L, -1)) raise_at(L, "attribute '" + key + "' must list integers");
        v.push_back(lua_tointeger(L, -1));
        lua_pop(L, 1);
      }
      a.set_ints(key, std::move(v));
    } else raise_at(L, "attribute '" + key + "' has an unsupported type");
    lua_pop(L, 1);
  }
  return a;
}

// _sg.op(name, {ids}, {attrs}) -> ids...
int l_op(lua_State* L) {
  State& s = state(L);
  std::string name = check_string(L, 1);
  OpCode code;
  if (!op_from_name(name, &code)) raise_at(L, "unknown op '" + name + "'");
  check_table(L, 2);
  std::vector<int> in;
  lua_Integer n = raw_len(L, 2);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, 2, i);
    in.push_back(tensor_id(L, -1));
    lua_pop(L, 1);
  }
  Attrs attrs = read_attrs(L, 3, code);
  std::vector<int> out;
  Status st = s.g->add_op(code, std::move(in), std::move(attrs), user_loc(L), &out);
  if (!st.ok()) raise(L, st.message());
  for (int id : out) lua_pushinteger(L, id);
  return static_cast<int>(out.size());
}

int l_shape(lua_State* L) {
  push_shape(L, state(L).g->t(tensor_id(L, 1)).type.shape);
  return 1;
}
int l_dtype(lua_State* L) {
  lua_pushstring(L, dtype_name(state(L).g->t(tensor_id(L, 1)).type.dtype));
  return 1;
}

int l_loss(lua_State* L) {
  State& s = state(L);
  if (s.g->loss >= 0) raise_at(L, "the loss is already declared");
  s.g->loss = tensor_id(L, 1);
  return 0;
}

void add_named(lua_State* L, std::vector<std::pair<std::string, int>>* v, const char* what) {
  std::string name = check_string(L, 1);
  for (auto& [n, id] : *v) if (n == name) raise_at(L, std::string(what) + " '" + name + "' declared twice");
  v->push_back({name, tensor_id(L, 2)});
}
int l_metric(lua_State* L) { add_named(L, &state(L).g->metrics, "metric"); return 0; }
int l_output(lua_State* L) { add_named(L, &state(L).g->outputs, "output"); return 0; }

// _sg.optimizer(kind, {lr=, momentum=, beta1=, beta2=, eps=, weight_decay=, schedule=, warmup=, min_lr_ratio=,
//                     state = "fp32"|"O1"|"O2"|"O3", clip = global norm})
int l_optimizer(lua_State* L) {
  compiler::OptimizerConfig& o = state(L).g->optimizer;
  std::string kind = check_string(L, 1);
  check_table(L, 2);
  if (kind == "sgd") o.kind = sg::OptimizerKind::sgd;
  else if (kind == "adamw") o.kind = sg::OptimizerKind::adamw;
  else raise_at(L, "unknown optimizer '" + kind + "' (sgd, adamw)");
  o.lr = static_cast<float>(field_number(L, 2, "lr", o.lr));
  o.momentum = static_cast<float>(field_number(L, 2, "momentum", kind == "sgd" ? 0.9 : 0.0));
  o.beta1 = static_cast<float>(field_number(L, 2, "beta1", o.beta1));
  o.beta2 = static_cast<float>(field_number(L, 2, "beta2", o.beta2));
  o.eps = static_cast<float>(field_number(L, 2, "eps", o.eps));
  o.weight_decay = static_cast<float>(field_number(L, 2, "weight_decay", kind == "adamw" ? 0.01 : 0.0));
  std::string sched = field_string(L, 2, "schedule", "constant");
  if (sched == "constant") o.schedule = sg::ScheduleKind::constant;
  else if (sched == "cosine") o.schedule = sg::ScheduleKind::cosine;
  else raise_at(L, "unknown schedule '" + sched + "' (constant, cosine)");
  o.warmup_steps = field_int(L, 2, "warmup", 0);
  o.min_lr_ratio = static_cast<float>(field_number(L, 2, "min_lr_ratio", 0.0));
  if (!(o.lr > 0)) raise_at(L, "the learning rate must be positive");
  o.state = field_string(L, 2, "state", "fp32");
  if (!compiler::is_opt_level(o.state)) raise_at(L, "unknown optimizer state level '" + o.state + "' (fp32, O1, O2, O3)");
  o.clip = static_cast<float>(field_number(L, 2, "clip", 0.0));
  if (!(o.clip >= 0)) raise_at(L, "clip must be a non-negative global gradient norm (0: off)");
  return 0;
}

// _sg.data(dataset, {field = id, ...}, {shuffle=, path=, options = {key = "text", ...}})
int l_data(lua_State* L) {
  State& s = state(L);
  compiler::DataConfig& d = s.g->data;
  d.dataset = check_string(L, 1);
  static const std::map<std::string, std::set<std::string>> kFields = {
      {"fashion_mnist", {"image", "label"}}, {"text", {"tokens", "targets"}}, {"instruct", {"tokens", "targets", "mask", "valid"}},
      {"csv", {"features", "label"}},        {"npy", {"features", "label"}}, {"images", {"image", "label"}}};
  auto known = kFields.find(d.dataset);
  if (known == kFields.end())
    raise_at(L, "unknown data set '" + d.dataset + "' (csv, fashion_mnist, images, instruct, npy, text)");
  check_table(L, 2);
  d.fields.clear();
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    std::string field = check_string(L, -2);
    if (!known->second.count(field)) {
      std::string names;
      for (const std::string& f : known->second) names += (names.empty() ? "" : ", ") + f;
      raise_at(L, d.dataset + " has no field '" + field + "' (" + names + ")");
    }
    int id = tensor_id(L, -1);
    if (s.g->t(id).role != sg::Role::input) raise_at(L, "data field '" + field + "' must be bound to an sg.input");
    d.fields.push_back({field, id});
    lua_pop(L, 1);
  }
  if (d.fields.empty()) raise_at(L, "data set binds no inputs");
  d.batch = s.g->t(d.fields[0].second).type.shape[0];
  for (auto& [f, id] : d.fields)
    if (s.g->t(id).type.shape[0] != d.batch) raise_at(L, "data inputs disagree on the batch size (first dimension)");
  d.shuffle = field_bool(L, 3, "shuffle", true);
  d.path = field_string(L, 3, "path", "");
  d.options.clear();
  raw_field(L, 3, "options");
  if (lua_istable(L, -1)) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      d.options[check_string(L, -2)] = check_string(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return 0;
}

// _sg.train{epochs=, steps=, log_every=, seed=, accumulate=, eval_every=}
int l_train(lua_State* L) {
  compiler::TrainConfig& t = state(L).g->train;
  check_table(L, 1);
  t.epochs = field_int(L, 1, "epochs", t.epochs);
  t.steps = field_int(L, 1, "steps", t.steps);
  t.log_every = field_int(L, 1, "log_every", t.log_every);
  t.seed = static_cast<uint64_t>(field_int(L, 1, "seed", static_cast<int64_t>(t.seed)));
  t.accumulate = field_int(L, 1, "accumulate", t.accumulate);
  t.eval_every = field_int(L, 1, "eval_every", t.eval_every);
  if (t.accumulate < 1) raise_at(L, "accumulate must be at least 1 (micro-batches per optimizer step)");
  return 0;
}

// _sg.forward_ops() -> the number of forward ops so far; _sg.checkpoint(mark):
// the ops since mark form a segment recomputed for backward (sg.checkpoint).
int l_forward_ops(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(state(L).g->forward.size()));
  return 1;
}

int l_checkpoint(lua_State* L) {
  Graph& g = *state(L).g;
  lua_Integer mark = check_integer(L, 1);
  if (mark < 0 || static_cast<size_t>(mark) > g.forward.size()) raise_at(L, "sg.checkpoint: bad segment start");
  if (static_cast<size_t>(mark) < g.forward.size()) g.checkpoints.push_back({static_cast<size_t>(mark), g.forward.size()});
  return 0;
}

// sg.recipe's dge / hadamard / stochastic = bool, clamp = quantile | false,
// granularity = "channel" | "tensor".
void read_switches(lua_State* L, int idx, compiler::RecipeSwitches* s) {
  for (auto [key, sw] : {std::pair<const char*, std::optional<bool>*>{"dge", &s->dge},
                         {"hadamard", &s->hadamard}, {"stochastic", &s->stochastic}}) {
    raw_field(L, idx, key);
    if (lua_isboolean(L, -1)) *sw = lua_toboolean(L, -1);
    else if (!lua_isnil(L, -1)) raise_at(L, std::string("sg.recipe: ") + key + " must be true or false");
    lua_pop(L, 1);
  }
  raw_field(L, idx, "clamp");
  if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) s->clamp_alpha = 0.0;
  else if (lua_type(L, -1) == LUA_TNUMBER) s->clamp_alpha = lua_tonumber(L, -1);
  else if (!lua_isnil(L, -1)) raise_at(L, "sg.recipe: clamp must be a quantile such as 0.99, or false");
  lua_pop(L, 1);
  std::string gran = field_string(L, idx, "granularity", "");
  if (gran == "channel" || gran == "tensor") s->per_channel = gran == "channel";
  else if (!gran.empty()) raise_at(L, "sg.recipe: granularity must be \"channel\" or \"tensor\", not \"" + gran + "\"");
}

// _sg.recipe(name, {keep = {names...}, plan = bool, dge, clamp, granularity, hadamard, stochastic})
int l_recipe(lua_State* L) {
  Graph& g = *state(L).g;
  g.recipe = check_string(L, 1);
  if (lua_isnoneornil(L, 2)) return 0;
  check_table(L, 2);
  g.plan_scales = field_bool(L, 2, "plan", true);
  read_switches(L, 2, &g.switches);
  raw_field(L, 2, "keep");
  if (lua_istable(L, -1)) {
    lua_Integer n = raw_len(L, -1);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_rawgeti(L, -1, i);
      if (!lua_isstring(L, -1)) raise_at(L, "sg.recipe: keep lists layer or parameter names");
      g.keep.push_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  } else if (!lua_isnil(L, -1)) {
    raise_at(L, "sg.recipe: keep must be a list of names");
  }
  lua_pop(L, 1);
  return 0;
}

// _sg.config(defaults) -> defaults with --set values applied, typed like the defaults.
int l_config(lua_State* L) {
  State& s = state(L);
  check_table(L, 1);
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    std::string key = lua_tostring(L, -1);
    s.config_keys.insert(key);
    auto it = s.opts->set.find(key);
    if (it == s.opts->set.end()) continue;
    const std::string& v = it->second;
    raw_field(L, 1, key.c_str());
    int type = lua_type(L, -1);
    bool is_int = lua_isinteger(L, -1);
    lua_pop(L, 1);
    if (type == LUA_TNUMBER) {
      char* end = nullptr;
      if (is_int) {
        long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end) raise(L, "--set " + key + "=" + v + ": expected an integer");
        lua_pushinteger(L, x);
      } else {
        double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end) raise(L, "--set " + key + "=" + v + ": expected a number");
        lua_pushnumber(L, x);
      }
    } else if (type == LUA_TBOOLEAN) {
      if (v != "true" && v != "false") raise(L, "--set " + key + "=" + v + ": expected true or false");
      lua_pushboolean(L, v == "true");
    } else {
      lua_pushstring(L, v.c_str());
    }
    lua_pushstring(L, key.c_str());
    lua_insert(L, -2);
    lua_rawset(L, 1);
  }
  lua_settop(L, 1);
  return 1;
}

// _sg.train_state() -> id of the i32 step counter ops like dropout read; the
// optimizer lowering adopts it.
int l_train_state(lua_State* L) {
  Graph& g = *state(L).g;
  int id = g.find_tensor("train_state");
  if (id < 0) {
    compiler::Tensor t;
    t.name = "train_state";
    t.type = TensorType{{kTrainStateLen}, DType::i32};
    t.role = sg::Role::opt_state;
    t.persistent = true;
    t.loc = user_loc(L);
    id = g.add_tensor(std::move(t));
  }
  lua_pushinteger(L, id);
  return 1;
}

int l_fail(lua_State* L) { raise_at(L, check_string(L, 1)); }

// _sg.unary_ops() -> the names of ops.def's unary forward ops that take no
// required attribute; sg.lua makes each sg.<name>(x) and x:<name>().
int l_unary_ops(lua_State* L) {
  lua_newtable(L);
  int n = 0;
  for (int c = 0; c < kNumOps; ++c) {
    const OpInfo& op = kOpInfo[c];
    std::vector<AttrDecl> decls;
    if (op.kind != OpKind::forward || op.shape != OpShape::unary || !op_attr_decls(static_cast<OpCode>(c), &decls).ok())
      continue;
    bool plain = true;
    for (const AttrDecl& d : decls) plain &= !d.required;
    if (!plain) continue;
    lua_pushlstring(L, op.name.data(), op.name.size());
    lua_rawseti(L, -2, ++n);
  }
  return 1;
}

#define SG_FN(name, fn) {name, guarded<fn>}

const luaL_Reg kFunctions[] = {
    SG_FN("input", l_input),   SG_FN("default_range", l_default_range),   SG_FN("param", l_param),       SG_FN("freeze", l_freeze),       SG_FN("frozen_base", l_frozen_base),       SG_FN("op", l_op),       SG_FN("shape", l_shape),
    SG_FN("dtype", l_dtype),   SG_FN("loss", l_loss),         SG_FN("metric", l_metric), SG_FN("output", l_output),
    SG_FN("optimizer", l_optimizer), SG_FN("data", l_data),   SG_FN("train", l_train), SG_FN("recipe", l_recipe),
    SG_FN("config", l_config), SG_FN("fail", l_fail),         SG_FN("train_state", l_train_state),
    SG_FN("unary_ops", l_unary_ops), SG_FN("cache", l_cache), SG_FN("statistic", l_statistic), SG_FN("program", l_program),
    SG_FN("forward_ops", l_forward_ops), SG_FN("checkpoint", l_checkpoint), {nullptr, nullptr}};
#undef SG_FN

// package.searchers entry for the embedded library: require "sg", "sg.nn", ...
int embedded_searcher(lua_State* L) {
  std::string name = luaL_checkstring(L, 1);
  for (const EmbeddedLua& m : kEmbeddedLua) {
    if (name != m.module) continue;
    std::string chunk = "=" + name;
    if (luaL_loadbuffer(L, m.source, std::strlen(m.source), chunk.c_str()) != LUA_OK) return lua_error(L);
    lua_pushstring(L, chunk.c_str());
    return 2;
  }
  lua_pushfstring(L, "\n\tno embedded module '%s'", name.c_str());
  return 1;
}

// package.searchers entry for a model script beside the one being compiled:
// require "llama" loads DIR/llama.lua (a plain name, so nothing outside DIR),
// as text when sandboxed; upvalues: DIR and the load mode.
int sibling_searcher(lua_State* L) {
  std::string name = luaL_checkstring(L, 1);
  bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  std::string file = std::string(lua_tostring(L, lua_upvalueindex(1))) + name + ".lua";
  if (!plain || !std::ifstream(file)) {
    lua_pushfstring(L, "\n\tno model script '%s'", file.c_str());
    return 1;
  }
  if (luaL_loadfilex(L, file.c_str(), lua_tostring(L, lua_upvalueindex(2))) != LUA_OK) return lua_error(L);
  lua_pushstring(L, file.c_str());
  return 2;
}

int open_sg_core(lua_State* L) {
  luaL_newlibtable(L, kFunctions);
  lua_pushvalue(L, lua_upvalueindex(1));
  luaL_setfuncs(L, kFunctions, 1);
  return 1;
}

}  // namespace

Status load_script(const std::string& path, const ScriptOptions& opts, compiler::Graph* g) {
  LuaState lua(opts.limits);
  lua_State* L = lua.get();
  if (!L) return Status::Runtime("cannot create a Lua state");
  State st{g, &opts, {}, 0};
  g->source = path;
  std::string base = path.substr(path.find_last_of('/') + 1);
  g->name = base.substr(0, base.rfind('.'));

  // require "_sg" yields the C module; the embedded searcher finds "sg", "sg.nn".
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushlightuserdata(L, &st);
  lua_pushcclosure(L, open_sg_core, 1);
  lua_setfield(L, -2, "_sg");
  lua_pop(L, 1);
  lua_getfield(L, -1, "searchers");
  lua_pushcfunction(L, embedded_searcher);
  lua_seti(L, -2, 2);  // ahead of the file-system searchers
  const char* mode = opts.limits.sandbox ? "t" : nullptr;  // a precompiled chunk is unverified bytecode
  lua_pushstring(L, path.substr(0, path.find_last_of('/') + 1).c_str());
  lua_pushstring(L, mode ? mode : "bt");
  lua_pushcclosure(L, sibling_searcher, 2);
  lua_seti(L, -2, luaL_len(L, -2) + 1);
  lua_pop(L, 2);

  Status result;
  bool loaded = luaL_loadfilex(L, path.c_str(), mode) == LUA_OK;
  if (!loaded || lua_pcall(L, 0, 0, 0) != LUA_OK) {
    const char* msg = lua_tostring(L, -1);
    std::string m = msg ? msg : "unknown Lua error";
    if (m.rfind("cannot open", 0) == 0) m = path + ": " + m.substr(m.find(' ') + 1);
    else if (!loaded && m.rfind(path, 0) != 0) m = path + ": " + m;  // "attempt to load a binary chunk"
    result = Status::Invalid(m);
  }
  // A spent budget fails the script even where a pcall swallowed the error.
  if (std::string limit = lua.limit_error(path); !limit.empty()) return Status::Invalid(limit);
  if (!result.ok()) return result;
  for (auto& [k, v] : opts.set)
    if (!st.config_keys.count(k)) {
      std::string known;
      for (const std::string& c : st.config_keys) known += (known.empty() ? "" : ", ") + c;
      return Status::Invalid("--set " + k + ": " + path + " has no such config key (known: " + known + ")");
    }
  if (g->loss < 0) return Status::Invalid(path + ": no loss declared (call sg.loss)");
  return Status::Ok();
}

}  // namespace sgrt::dsl
