-- The sg module: what model scripts `require "sg"`. Tensors are small tables
-- {id = n} with operator overloads; every call records the script line that
-- made it (the C side walks the stack to the user's file).
local core = require "_sg"

local sg = {}
local Tensor = {}
Tensor.__index = Tensor

local function wrap(id) return setmetatable({ id = id }, Tensor) end
local function is_tensor(x) return getmetatable(x) == Tensor end
sg.is_tensor = is_tensor

-- Edit distance, for "did you mean" suggestions.
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- Fails (at the caller's line) on an option table that is not a table or has a
-- key `fn` does not take, naming the nearest valid key: a typo must not be
-- silently ignored. `valid` lists the keys; returns opts, or {} for nil.
function sg.check_options(fn, opts, valid)
  if opts == nil then return {} end
  if type(opts) ~= "table" then core.fail(fn .. ": options must be a table, got " .. type(opts)) end
  for k in pairs(opts) do
    local known = false
    for _, v in ipairs(valid) do known = known or k == v end
    if not known then
      local sorted = {}
      for i, v in ipairs(valid) do sorted[i] = v end
      table.sort(sorted)
      local best, best_d = nil, math.huge
      for _, v in ipairs(sorted) do
        local d = math.huge
        if type(k) == "string" then  -- a prefix either way ("epsilon" for "eps") is as near as one typo
          d = (k:sub(1, #v) == v or v:sub(1, #k) == k) and 1 or distance(k, v)
        end
        if d < best_d then best, best_d = v, d end
      end
      local hint = best and best_d <= math.max(2, #best // 2) and ("did you mean '" .. best .. "'? ") or ""
      core.fail(fn .. ": unknown option '" .. tostring(k) .. "' (" .. hint .. "options: " .. table.concat(sorted, ", ") .. ")")
    end
  end
  return opts
end
local check = sg.check_options

local function op(name, inputs, attrs)
  local ids = {}
  for i, t in ipairs(inputs) do
    if not is_tensor(t) then core.fail(name .. ": input " .. i .. " is not a tensor") end
    ids[i] = t.id
  end
  return wrap(core.op(name, ids, attrs))
end
sg.op = op

function Tensor:shape() return core.shape(self.id) end
function Tensor:dtype() return core.dtype(self.id) end
function Tensor:rank() return #core.shape(self.id) end
function Tensor:dim(i)
  local s = core.shape(self.id)
  return s[i < 0 and #s + 1 + i or i]
end

-- Numpy broadcasting from the right: the shape both operands expand to.
local function broadcast_shape(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local x = a[#a - n + i] or 1
    local y = b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      core.fail("shapes [" .. table.concat(a, ", ") .. "] and [" .. table.concat(b, ", ") .. "] do not broadcast")
    end
    out[i] = math.max(x, y)
  end
  return out
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

function sg.broadcast_to(x, shape)
  if same(x:shape(), shape) then return x end
  return op("broadcast_to", { x }, { shape = shape })
end

-- A Lua number on either side: products and x / c are a scale (whose gradient
-- is the same scale); sums, differences and c / x see a fill [] broadcast.
local function constant(c) return op("fill", {}, { value = c + 0.0, shape = {} }) end
local function binary(name)
  return function(a, b)
    local operands = { a, b }
    for i = 1, 2 do
      local v = operands[i]  -- a nil operand too (ipairs would stop there)
      if not is_tensor(v) and math.type(v) == nil then
        core.fail(name .. ": operand " .. i .. " is a " .. type(v) .. ", expected a tensor or a number")
      end
    end
    if not is_tensor(a) and not is_tensor(b) then core.fail(name .. ": at least one operand must be a tensor") end
    if name == "mul" and not is_tensor(a) then a, b = b, a end
    if name == "mul" and not is_tensor(b) then return sg.scale(a, b) end
    if name == "div" and not is_tensor(b) then
      if b == 0 then core.fail("div: division by the constant 0") end
      return sg.scale(a, 1 / b)
    end
    if not is_tensor(a) then a = constant(a) end
    if not is_tensor(b) then b = constant(b) end
    local s = broadcast_shape(a:shape(), b:shape())
    return op(name, { sg.broadcast_to(a, s), sg.broadcast_to(b, s) })
  end
end
sg.add, sg.sub, sg.mul, sg.div = binary "add", binary "sub", binary "mul", binary "div"
Tensor.__add, Tensor.__sub, Tensor.__mul, Tensor.__div = sg.add, sg.sub, sg.mul, sg.div
function Tensor.__unm(x) return op("neg", { x }) end
Tensor.add, Tensor.sub, Tensor.mul, Tensor.div = sg.add, sg.sub, sg.mul, sg.div

function sg.scale(x, alpha) return op("scale", { x }, { alpha = alpha + 0.0 }) end
local lora  -- sg.lora's settings, once declared
-- A tensor stored in a GGUF block format: a frozen quantized base weight.
local block_dtypes = { q8_0 = true, q4_1 = true }
local function is_blocks(t) return block_dtypes[t:dtype()] ~= nil end
-- x @ W^T for a weight W [out, in]: dequant_matmul decodes a block-stored W inside the GEMM.
function sg.matmul_t(x, w)
  if is_blocks(w) then return op("dequant_matmul", { x, w }) end
  return op("matmul", { x, w }, { trans_a = false, trans_b = true })
end
function sg.matmul(a, b, opts)
  opts = check("sg.matmul", opts, { "trans_a", "trans_b" })
  local t = opts.trans_b and not opts.trans_a
  if lora and t and lora.adapts(sg.param_name(b)) then return sg.nn.lora(a, b, lora.opts) end
  for _, x in ipairs({ a, b }) do
    if is_blocks(x) and (x == a or not t) then
      core.fail("sg.matmul: " .. (sg.param_name(x) or "the operand") .. " is stored as " .. x:dtype() ..
                " (a frozen base): only sg.matmul(x, W, {trans_b = true}) reads it")
    end
  end
  if t then return sg.matmul_t(a, b) end
  return op("matmul", { a, b }, { trans_a = opts.trans_a or false, trans_b = opts.trans_b or false })
end
Tensor.matmul = sg.matmul

-- relu, gelu, tanh, sigmoid, exp, log, neg, silu, ...: every unary op of ops.def.
for _, name in ipairs(core.unary_ops()) do
  sg[name] = function(x) return op(name, { x }) end
  Tensor[name] = sg[name]
end

function sg.reshape(x, shape)
  local known, hole = 1, nil
  local s = {}
  for i, d in ipairs(shape) do
    if d == -1 then hole = i else known = known * d end
    s[i] = d
  end
  if hole then
    local n = 1
    for _, d in ipairs(x:shape()) do n = n * d end
    s[hole] = n // known
  end
  return op("reshape", { x }, { shape = s })
end
function sg.transpose(x, perm)
  if not perm then
    perm = {}
    local r = x:rank()
    for i = 1, r do perm[i] = i - 1 end
    perm[r - 1], perm[r] = r - 1, r - 2
  end
  return op("transpose", { x }, { perm = perm })
end
Tensor.reshape, Tensor.transpose = sg.reshape, sg.transpose

-- Windows along one axis: sg.slice keeps elements start .. start + size - 1
-- (0-based, as axes are; size defaults to the rest), sg.pad adds zeros
-- (before, after: one entry per axis). sg.concat joins tensors along an axis as
-- a sum of pads: each input padded to the output's shape, so k inputs cost k
-- output-sized tensors; fine for the few pieces models join.
local function axis_of(fn, x, axis)
  local r = x:rank()
  if math.type(axis) ~= "integer" or axis < -r or axis >= r then
    core.fail(fn .. ": axis " .. tostring(axis) .. " out of range for a rank-" .. r .. " tensor")
  end
  return axis < 0 and axis + r or axis
end
function sg.slice(x, axis, start, size)
  local a = axis_of("sg.slice", x, axis)
  local starts, sizes = {}, x:shape()
  for k = 1, #sizes do starts[k] = 0 end
  starts[a + 1], sizes[a + 1] = start, size or sizes[a + 1] - start
  return op("slice", { x }, { starts = starts, sizes = sizes })
end
function sg.pad(x, before, after) return op("pad", { x }, { before = before, after = after }) end
function sg.concat(xs, axis)
  if type(xs) ~= "table" or #xs == 0 then core.fail("sg.concat: expected a list of tensors") end
  local a = axis_of("sg.concat", xs[1], axis or 0)
  local total = 0
  for i, x in ipairs(xs) do
    if not is_tensor(x) then core.fail("sg.concat: entry " .. i .. " is not a tensor") end
    local s, s1 = x:shape(), xs[1]:shape()
    s[a + 1], s1[a + 1] = 0, 0
    if not same(s, s1) then
      core.fail("sg.concat: entry " .. i .. " is [" .. table.concat(x:shape(), ", ") .. "], entry 1 [" ..
                table.concat(xs[1]:shape(), ", ") .. "]: only axis " .. a .. " may differ")
    end
    total = total + x:dim(a + 1)
  end
  local y, at = nil, 0
  for _, x in ipairs(xs) do
    local before, after = {}, {}
    for k = 1, x:rank() do before[k], after[k] = 0, 0 end
    before[a + 1], after[a + 1] = at, total - at - x:dim(a + 1)
    at = at + x:dim(a + 1)
    local p = #xs == 1 and x or sg.pad(x, before, after)
    y = y and y + p or p
  end
  return y
end
Tensor.slice, Tensor.pad = sg.slice, sg.pad
function Tensor:T() return sg.transpose(self) end

local function reduction(name)
  return function(x, axis, keepdims)
    return op(name, { x }, { axis = axis or -1, keepdims = keepdims or false })
  end
end
sg.reduce_sum, sg.reduce_mean, sg.reduce_max = reduction "reduce_sum", reduction "reduce_mean", reduction "reduce_max"
sg.sum, sg.mean, sg.max = sg.reduce_sum, sg.reduce_mean, sg.reduce_max
Tensor.sum, Tensor.mean, Tensor.max = sg.sum, sg.mean, sg.max

function sg.softmax(x, axis) return op("softmax", { x }, { axis = axis or -1 }) end
function sg.log_softmax(x, axis) return op("log_softmax", { x }, { axis = axis or -1 }) end
Tensor.softmax, Tensor.log_softmax = sg.softmax, sg.log_softmax

-- Mean over the batch of -log softmax(logits)[label]; logits [N, C], labels i32 [N].
function sg.softmax_cross_entropy(logits, labels) return op("softmax_cross_entropy", { logits, labels }) end
-- Fraction of rows whose argmax equals the label.
function sg.accuracy(logits, labels) return op("accuracy", { logits, labels }) end

-- opts.range = {lo, hi}: the values' range, which lets the scale planner give
-- the input (and what it bounds) a compile-time scale.
function sg.input(name, shape, dtype, opts) return wrap(core.input(name, shape, dtype or "f32", opts)) end
-- Freezing: a frozen param gets no gradient, optimizer state or master copy
-- (docs/dsl.md). sg.freeze's rules cover params declared before and after it.
local params = {}        -- every sg.param tensor, in order
local freeze_rules = {}  -- functions name -> true to freeze
local pinned = {}        -- id -> true: requires_grad = true, never frozen by a rule
local base_of            -- sg.lora's base: function name -> storage dtype of a frozen weight
local function freeze_if_ruled(t, name)
  if pinned[t.id] then return end
  for _, rule in ipairs(freeze_rules) do
    if rule(name) then core.freeze(t.id); return end
  end
end

-- init: {"uniform", low, high} | {"normal", mean, std} | "zeros" | "ones"
-- opts.requires_grad: false freezes the param; true keeps it trained whatever
-- sg.freeze says; nil follows sg.freeze.
-- opts.dtype: "f32" (default), or "q8_0" / "q4_1" to store a frozen weight as
-- GGUF blocks (rank 2, last dimension a multiple of 32, requires_grad = false),
-- read by sg.matmul(x, W, {trans_b = true}) and sg.embedding only.
local param_names = {}  -- id -> name
-- The name of the sg.param t, or nil for any other tensor.
function sg.param_name(t) return is_tensor(t) and param_names[t.id] or nil end

function sg.param(name, shape, init, opts)
  opts = check("sg.param", opts, { "requires_grad", "dtype" })
  if opts.dtype ~= nil and opts.dtype ~= "f32" and opts.requires_grad ~= false then
    core.fail("sg.param: '" .. tostring(name) .. "' stored as " .. tostring(opts.dtype) ..
              " cannot be trained: give requires_grad = false")
  end
  init = init or "zeros"
  if type(init) == "string" then init = { init } end
  local t = wrap(core.param(name, shape, init[1], init[2] or 0, init[3] or 0, opts.dtype))
  params[#params + 1] = { t = t, name = name }
  param_names[t.id] = name
  if opts.requires_grad == false then core.freeze(t.id)
  elseif opts.requires_grad == true then pinned[t.id] = true
  else freeze_if_ruled(t, name) end
  -- A param trained whatever sg.freeze says (an adapter) keeps f32, in an
  -- inference-only compile too (where every param is read, none trained).
  if base_of and opts.dtype == nil and not pinned[t.id] then core.frozen_base(t.id, base_of(name)) end
  return t
end

-- sg.freeze(rule): freezes every param, declared or still to come, whose name
-- matches rule: a Lua pattern, a list of them, or a function name -> boolean.
function sg.freeze(rule)
  local fn = rule
  if type(rule) == "string" then rule = { rule } end
  if type(rule) == "table" then
    for i, p in ipairs(rule) do
      if type(p) ~= "string" then core.fail("sg.freeze: entry " .. i .. " is not a name pattern") end
    end
    fn = function(name)
      for _, p in ipairs(rule) do if name:find(p) then return true end end
      return false
    end
  elseif type(fn) ~= "function" then
    core.fail("sg.freeze: expected a name pattern, a list of them or a function, got " .. type(rule))
  end
  freeze_rules[#freeze_rules + 1] = fn
  for _, p in ipairs(params) do
    if not pinned[p.t.id] and fn(p.name) then core.freeze(p.t.id) end
  end
end

-- sg.lora{rank, alpha, dropout, init, targets, aliases}: LoRA fine-tuning
-- (docs/lora.md). Every later sg.matmul(x, W, {trans_b = true}) whose W is a
-- param named by a target gains an nn.lora adapter, and every other param,
-- declared before or after, is frozen. targets: Lua patterns matched against
-- W's name, as a list or a comma-separated string; aliases maps short target
-- names to patterns (a model's "q" -> "attn_q%.weight$"). rank = 0: no
-- adapters, so a model can take the rank from sg.config. base: "f32" (default),
-- "q8_0" or "q4_1" stores the frozen 2-D weights read as x @ W^T or as an
-- embedding table in that GGUF block format (QLoRA; with rank = 0, the weights
-- of an inference-only compile such as sgrt run's); a table { "q4_1",
-- ["^token_embd%."] = "q8_0" } gives the params a pattern matches another one.
local function base_rule(base)
  local spec = type(base) == "table" and base or { base }
  local patterns = {}
  for k, d in pairs(spec) do
    if d ~= "f32" and d ~= "q8_0" and d ~= "q4_1" then
      core.fail("sg.lora: base: dtype must be f32, q8_0 or q4_1, got '" .. tostring(d) .. "'")
    end
    if type(k) == "string" then patterns[#patterns + 1] = k
    elseif k ~= 1 then core.fail("sg.lora: base: give one default dtype and name patterns as keys") end
  end
  table.sort(patterns)  -- the first matching pattern, in a fixed order
  return function(name)
    for _, p in ipairs(patterns) do if name:find(p) then return spec[p] end end
    return spec[1] or "f32"
  end
end
function sg.lora(o)
  o = check("sg.lora", o, { "rank", "alpha", "dropout", "init", "targets", "aliases", "base" })
  if o.base ~= nil then
    base_of = base_rule(o.base)
    for _, p in ipairs(params) do
      if not pinned[p.t.id] then core.frozen_base(p.t.id, base_of(p.name)) end
    end
  end
  if o.rank == 0 then return end
  if lora then core.fail("sg.lora: already declared") end
  if math.type(o.rank) ~= "integer" or o.rank < 0 then core.fail("sg.lora: rank must be a non-negative integer") end
  local targets = o.targets or {}
  if type(targets) == "string" then
    local list = {}
    for t in targets:gmatch("[^,%s]+") do list[#list + 1] = t end
    targets = list
  end
  if type(targets) ~= "table" or #targets == 0 then core.fail("sg.lora: targets must name at least one projection") end
  local patterns = {}
  for i, t in ipairs(targets) do
    local alias = o.aliases and o.aliases[t]
    if type(t) ~= "string" then core.fail("sg.lora: target " .. i .. " is not a name pattern") end
    if o.aliases and not alias and not t:find("[%%%.%^%$]") then
      local known = {}
      for k in pairs(o.aliases) do known[#known + 1] = k end
      table.sort(known)
      core.fail("sg.lora: unknown target '" .. t .. "' (" .. table.concat(known, ", ") .. ", or a name pattern)")
    end
    patterns[i] = alias or t
  end
  lora = { opts = { rank = o.rank, alpha = o.alpha, dropout = o.dropout, init = o.init } }
  function lora.adapts(name)
    if not name then return false end
    for _, p in ipairs(patterns) do if name:find(p) then return true end end
    return false
  end
  sg.freeze(function() return true end)  -- the adapters are made with requires_grad = true
end

-- sg.checkpoint(fn, ...): fn(...)'s results; the activations made inside fn
-- are not kept for the backward pass but recomputed there from fn's inputs
-- (docs/lora.md): the same loss and gradients in less memory.
local in_checkpoint = false
function sg.checkpoint(fn, ...)
  if type(fn) ~= "function" then core.fail("sg.checkpoint: expected a function, got " .. type(fn)) end
  if in_checkpoint then core.fail("sg.checkpoint: checkpoints do not nest") end
  in_checkpoint = true
  local mark = core.forward_ops()
  local r = table.pack(fn(...))
  in_checkpoint = false
  core.checkpoint(mark)
  return table.unpack(r, 1, r.n)
end

function sg.loss(t) core.loss(t.id); return t end
function sg.metric(name, t) core.metric(name, t.id); return t end
function sg.output(name, t) core.output(name, t.id); return t end
-- sg.program(name, {key = t, ...}): a program of its own that computes just
-- these outputs (named name.key) from inputs, parameters and persistent state,
-- e.g. a decode step reading and appending to KV caches (docs/llama.md).
function sg.program(name, outputs)
  if type(outputs) ~= "table" then core.fail("sg.program: outputs must be a table {name = tensor}") end
  local keys, ids = {}, {}
  for k in pairs(outputs) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)  -- compiled files are byte-identical run to run
  for i, k in ipairs(keys) do
    if not is_tensor(outputs[k]) then core.fail("sg.program: output '" .. k .. "' is not a tensor") end
    core.output(name .. "." .. k, outputs[k].id)
    ids[i] = outputs[k].id
  end
  core.program(name, ids)
end
-- A KV cache: f32 state that decode programs append to, zero at first.
function sg.cache(name, shape) return wrap(core.cache(name, shape)) end
-- Running statistics (nn.batch_norm's): f32 state that training programs update
-- in place (sg.op "running_stat"), saved with the parameters; init "zeros" or "ones".
function sg.statistic(name, shape, init) return wrap(core.statistic(name, shape, init)) end
-- sg.preset{key = value, ...}: new defaults for the sg.config of a script this
-- one builds on (require "llama" loads models/llama.lua beside it); --set
-- still wins. A key the config does not have is an error.
local presets = {}
function sg.preset(t)
  for k, v in pairs(t) do presets[k] = v end
end
function sg.config(defaults)
  for k, v in pairs(presets) do
    if defaults[k] == nil then core.fail("sg.preset: '" .. tostring(k) .. "' is not a config key of the script it presets") end
    if type(v) ~= type(defaults[k]) then core.fail("sg.preset: " .. k .. " must be a " .. type(defaults[k])) end
    defaults[k] = v
  end
  return core.config(defaults)
end
-- recipe(name, {keep = {"fc2"}, plan = true}): keep names layers (or params)
-- that stay in f32; plan = false turns the static scale planner off; dge,
-- clamp and granularity switch the fp4 recipe's parts, hadamard and stochastic
-- nvfp4-train's (docs/recipes.md).
function sg.recipe(name, opts)
  core.recipe(name, opts and check("sg.recipe", opts, { "keep", "plan", "dge", "clamp", "granularity", "hadamard", "stochastic" }))
end
function sg.train(opts) core.train(check("sg.train", opts, { "epochs", "steps", "log_every", "seed", "accumulate", "eval_every" })) end

-- A schedule is a table only the sg.schedule constructors make.
local Schedule = {}
sg.schedule = {
  constant = function() return setmetatable({ schedule = "constant" }, Schedule) end,
  cosine = function(o)
    o = check("sg.schedule.cosine", o, { "warmup", "min_lr_ratio" })
    return setmetatable({ schedule = "cosine", warmup = o.warmup or 0, min_lr_ratio = o.min_lr_ratio or 0 }, Schedule)
  end,
}

local function optimizer(kind, keys)
  local fn = "sg.optimizer." .. kind
  return function(o)
    o = check(fn, o, keys)
    if o.schedule ~= nil and getmetatable(o.schedule) ~= Schedule then
      core.fail(fn .. ": schedule must come from sg.schedule.constant() or sg.schedule.cosine{...}")
    end
    local cfg = {}
    for k, v in pairs(o) do cfg[k] = v end
    for k, v in pairs(cfg.schedule or {}) do cfg[k] = v end
    cfg.schedule = o.schedule and o.schedule.schedule or "constant"
    core.optimizer(kind, cfg)
  end
end
sg.optimizer = {
  sgd = optimizer("sgd", { "lr", "momentum", "weight_decay", "schedule", "state", "clip" }),
  adamw = optimizer("adamw", { "lr", "beta1", "beta2", "eps", "weight_decay", "schedule", "state", "clip" }),
}

-- A user's own data set (docs/dsl.md, "Your own data"): binds `fields` of o
-- to inputs; `settings` pass to the runtime as text, checked when it loads.
local function own_data(name, fields, settings)
  return function(o)
    local keys = { "path" }
    for _, k in ipairs(fields) do keys[#keys + 1] = k end
    for _, k in ipairs(settings) do keys[#keys + 1] = k end
    o = check("sg.data." .. name, o, keys)
    local bound, opts = {}, {}
    for _, f in ipairs(fields) do if o[f] then bound[f] = o[f].id end end
    for _, k in ipairs(settings) do  -- label_column = 5.0 is column "5"
      if o[k] ~= nil then opts[k] = tostring(math.tointeger(o[k]) or o[k]) end
    end
    core.data(name, bound, { shuffle = true, path = o.path, options = opts })
    if name == "images" and o.image then core.default_range(o.image.id, 0, 1) end  -- pixels / 255
  end
end

sg.data = {
  -- csv{features = x, label = y, path = file, delimiter = ",", header = true, label_column = 5 or "name"}
  csv = own_data("csv", { "features", "label" }, { "delimiter", "header", "label_column" }),
  -- npy{features = x, label = y, path = "x.npy", labels = "y.npy" (beside x.npy)}
  npy = own_data("npy", { "features", "label" }, { "labels" }),
  -- images{image = x, label = y, path = folder}: one subfolder of PNG/JPEG files per class
  images = own_data("images", { "image", "label" }, {}),
  -- fashion_mnist{image = x, label = y, shuffle = true, path = dir}
  fashion_mnist = function(o)
    o = check("sg.data.fashion_mnist", o, { "image", "label", "shuffle", "path" })
    local fields = {}
    for _, f in ipairs { "image", "label" } do if o[f] then fields[f] = o[f].id end end
    core.data("fashion_mnist", fields, { shuffle = o.shuffle, path = o.path })
    if o.image then core.default_range(o.image.id, 0, 1) end  -- pixels / 255
  end,
  -- text{tokens = x, targets = y, path = file}: byte-level windows of a UTF-8
  -- file, targets shifted by one byte; x and y are i32 [batch, block].
  text = function(o)
    o = check("sg.data.text", o, { "tokens", "targets", "path" })
    local fields = {}
    for _, f in ipairs { "tokens", "targets" } do if o[f] then fields[f] = o[f].id end end
    core.data("text", fields, { shuffle = true, path = o.path })
  end,
  -- instruct{tokens = x, targets = y, mask = m, valid = v, path = file}: JSON-lines
  -- conversations in the model's tokens and chat template (sgrt train --data
  -- FILE.jsonl --init-weights MODEL.gguf); x, y i32 and m, v f32, all [batch, block],
  -- m = 1 on response targets (nn.masked_cross_entropy), v = 1 on the
  -- conversation's tokens, 0 on the padding after it. docs/lora.md.
  instruct = function(o)
    o = check("sg.data.instruct", o, { "tokens", "targets", "mask", "valid", "path" })
    local fields = {}
    for _, f in ipairs { "tokens", "targets", "mask", "valid" } do if o[f] then fields[f] = o[f].id end end
    core.data("instruct", fields, { shuffle = true, path = o.path })
    for _, f in ipairs { "mask", "valid" } do if o[f] then core.default_range(o[f].id, 0, 1) end end
  end,
}

-- Transformer ops (docs/transformers.md). Norms and attention have extra
-- outputs (saved statistics) that only their gradients read.
function sg.embedding(table_, ids) return op("embedding", { table_, ids }) end
function sg.layer_norm(x, gain, bias, eps) return op("layer_norm", { x, gain, bias }, { eps = eps or 1e-5 }) end
function sg.rms_norm(x, gain, eps) return op("rms_norm", { x, gain }, { eps = eps or 1e-5 }) end
-- Causal self-attention over q [B, T, n_head * head_size] and k, v
-- [B, T, n_kv_head * head_size] (grouped-query attention; n_kv_head defaults to n_head).
function sg.attention(q, k, v, n_head, n_kv_head)
  return op("attention", { q, k, v }, { n_head = n_head, n_kv_head = n_kv_head or n_head })
end
-- Rotary positions; interleaved = true pairs elements (2i, 2i+1) as llama.cpp
-- does for GGUF llama weights, else (i, i + head_size/2) as GPT-NeoX and HF.
function sg.rope(x, n_head, base, interleaved)
  return op("rope", { x }, { n_head = n_head, base = (base or 10000) + 0.0, inverse = 0, interleaved = interleaved and 1 or 0 })
end
-- Decoding (docs/llama.md): rope at positions pos.. (pos an i32[] input), and
-- attention that appends k, v to the caches at pos and reads rows 0..pos+t.
function sg.rope_at(x, pos, n_head, base, interleaved)
  return op("rope_at", { x, pos }, { n_head = n_head, base = (base or 10000) + 0.0, interleaved = interleaved and 1 or 0 })
end
function sg.kv_attention(q, k, v, k_cache, v_cache, pos, n_head, n_kv_head)
  return op("kv_attention", { q, k, v, k_cache, v_cache, pos }, { n_head = n_head, n_kv_head = n_kv_head or n_head })
end
-- Inverted dropout, a fresh mask each step (seeded by the op's position in the
-- script and the step); the eval and infer programs pass x through.
local dropouts = 0
function sg.dropout(x, p)
  if not p or p == 0 then return x end
  dropouts = dropouts + 1
  return op("dropout", { x, wrap(core.train_state()) }, { p = p + 0.0, seed = dropouts, training = 1 })
end

-- Convolution patches (docs/dsl.md): x [N, H, W, C] -> [N, Ho, Wo, KH*KW*C] in
-- (kh, kw, c) order; kernel, stride and pad are {rows, cols} (zero padding).
function sg.im2col(x, kernel, stride, pad) return op("im2col", { x }, { kernel = kernel, stride = stride, pad = pad }) end

sg.nn = require "sg.nn"
return sg
